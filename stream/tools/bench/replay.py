"""``mmr bench replay --history FILE``: ``mmr replay --embedded`` against the Rust reference, whole processes.

What a user waits for: each side a fresh process that reads the contest file and rates it to the end
(ours ``mmr replay --system elo-mmr --embedded --out F``; the reference ``elo_mmr_py.rate_latest`` on
the contests read with lzma + orjson), alternating (``--repeat`` pairs, the order flipped every pair)
so that a shared machine's load falls on both alike. The ratio is ours / reference: below 1 is faster.
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

import click

from stream.tools.bench import alternated, load_average

#: the reference run in its own process: read the file, rate it, nothing else
_REFERENCE = (
    "import sys; from pathlib import Path; from stream.tools.bench.elo_mmr import run_reference_history; "
    "run_reference_history(Path(sys.argv[1]), sys.argv[2])"
)
OURS = "ours: mmr replay --embedded"


@click.command("replay")
@click.option("--history", type=click.Path(exists=True, dir_okay=False, path_type=Path), default=None,
              help="contest JSONL (.xz) of the Elo-MMR reference, e.g. path/to/contests-2010-2020.jsonl.xz")
@click.option("--repeat", type=int, default=1, show_default=True, help="pairs of runs (order flipped each pair)")
@click.option("--reference", "reference_system", default="mmr-fast", show_default=True,
              help="the reference's system (elo_mmr_py)")
def bench_replay(history: Path | None, repeat: int, reference_system: str) -> None:
    """Whole-process ``mmr replay --embedded`` (elo-mmr) against elo_mmr_py on the same history."""
    if history is None:
        click.echo("no --history FILE: skipped")
        return
    try:
        import elo_mmr_py  # noqa: F401
    except ImportError:
        raise click.ClickException("the reference is not installed: pip install Elo-MMR-Py") from None
    click.echo(f"load average before: {load_average()}")
    click.echo(f"{'pair':>4} | {'side':<28} | {'wall s':>7} | {'CPU s':>7} | {'max RSS MiB':>11}")
    ratios: list[tuple[float, float]] = []
    ref_label = f"reference {reference_system}"
    with tempfile.TemporaryDirectory() as tmp:
        sides = [(OURS, [sys.executable, "-m", "stream.cli", "replay", str(history), "--system", "elo-mmr",
                         "--embedded", "--out", str(Path(tmp) / "ratings.jsonl"), "--no-progress"]),
                 (ref_label, [sys.executable, "-c", _REFERENCE, str(history), reference_system])]
        for pair, runs in enumerate(alternated(sides, repeat), 1):
            for label, run in runs.items():
                click.echo(f"{pair:>4} | {label:<28} | {run.wall:>7.2f} | {run.cpu:>7.2f} | {run.max_rss_mib:>11.0f}")
            ours, ref = runs[OURS], runs[ref_label]
            ratios.append((ours.wall / ref.wall, ours.cpu / ref.cpu))
            click.echo(f"{pair:>4} | ours / reference: wall {ratios[-1][0]:.3f}, CPU {ratios[-1][1]:.3f}")
    click.echo(f"load average after: {load_average()}")
    if len(ratios) > 1:
        walls = sorted(r[0] for r in ratios)
        cpus = sorted(r[1] for r in ratios)
        click.echo(f"ratios over {len(ratios)} pairs: wall {walls[0]:.3f}-{walls[-1]:.3f}, "
                   f"CPU {cpus[0]:.3f}-{cpus[-1]:.3f}")
