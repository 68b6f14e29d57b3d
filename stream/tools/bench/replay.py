"""``mmr bench replay --history FILE``: ``mmr replay --embedded`` against the Rust reference, whole processes.

What a user waits for: each side is a fresh process that reads the contest file and rates it
to the end — ours ``mmr replay FILE --system elo-mmr --embedded --out F`` (imports, numba's
cache, reading, rating, writing the output), the reference ``elo_mmr_py.rate_latest(...,
system='mmr-fast')`` on the same contests read with lzma + orjson (as ``mmr bench elo-mmr
--reference-history`` does). The two alternate (``--repeat`` pairs, the order flipped every
pair) so that a shared machine's load falls on both alike; each process's own CPU time and
peak memory come from ``wait4``. The ratio is ours / reference: below 1 is faster.
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import click

#: the reference run in its own process: read the file, rate it, nothing else
_REFERENCE = (
    "import sys; from pathlib import Path; from stream.tools.bench.elo_mmr import run_reference_history; "
    "run_reference_history(Path(sys.argv[1]), sys.argv[2])"
)


OURS = "ours: mmr replay --embedded"


@dataclass(frozen=True)
class Run:
    """One process: wall and CPU seconds, peak resident memory (MiB)."""

    wall: float
    cpu: float
    max_rss_mib: float


def timed(argv: list[str]) -> Run:
    """Run ``argv`` to completion (its output discarded); a failure raises ClickException."""
    t = time.perf_counter()
    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    _, status, usage = os.wait4(proc.pid, 0)
    wall = time.perf_counter() - t
    proc.returncode = os.waitstatus_to_exitcode(status)
    err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        raise click.ClickException(f"{' '.join(argv[:4])} ... exited with {proc.returncode}: {err[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def ours_argv(history: Path, out: Path) -> list[str]:
    return [sys.executable, "-m", "stream.cli", "replay", str(history), "--system", "elo-mmr", "--embedded",
            "--out", str(out), "--no-progress"]


def reference_argv(history: Path, system: str) -> list[str]:
    return [sys.executable, "-c", _REFERENCE, str(history), system]


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
    click.echo(f"load average before: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    click.echo(f"{'pair':>4} | {'side':<28} | {'wall s':>7} | {'CPU s':>7} | {'max RSS MiB':>11}")
    ratios: list[tuple[float, float]] = []
    with tempfile.TemporaryDirectory() as tmp:
        out = Path(tmp) / "ratings.jsonl"
        for pair in range(1, repeat + 1):
            ref_label = f"reference {reference_system}"
            sides = [(OURS, ours_argv(history, out)), (ref_label, reference_argv(history, reference_system))]
            if pair % 2 == 0:
                sides.reverse()
            runs = {}
            for label, argv in sides:
                run = runs[label] = timed(argv)
                click.echo(f"{pair:>4} | {label:<28} | {run.wall:>7.2f} | {run.cpu:>7.2f} | {run.max_rss_mib:>11.0f}")
            ours, ref = runs[OURS], runs[ref_label]
            ratios.append((ours.wall / ref.wall, ours.cpu / ref.cpu))
            click.echo(f"{pair:>4} | ours / reference: wall {ratios[-1][0]:.3f}, CPU {ratios[-1][1]:.3f}")
    click.echo(f"load average after: {' '.join(f'{x:.2f}' for x in os.getloadavg())}")
    if len(ratios) > 1:
        walls = sorted(r[0] for r in ratios)
        cpus = sorted(r[1] for r in ratios)
        click.echo(f"ratios over {len(ratios)} pairs: wall {walls[0]:.3f}-{walls[-1]:.3f}, "
                   f"CPU {cpus[0]:.3f}-{cpus[-1]:.3f}")
