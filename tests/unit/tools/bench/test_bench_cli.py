"""`mmr bench all` (what `make bench` runs) exists and names every benchmark."""

from __future__ import annotations

from pathlib import Path

import click
from click.testing import CliRunner

from stream.tools.bench.command import BENCHES, bench


def test_bench_lists_all_and_every_benchmark() -> None:
    out = CliRunner().invoke(bench, ["--help"])
    assert out.exit_code == 0, out.output
    for name in ["all", *BENCHES]:
        assert f"  {name} " in out.output


def test_every_benchmark_loads_as_a_command() -> None:
    ctx = click.Context(bench)
    for name in ["all", *BENCHES]:
        cmd = bench.get_command(ctx, name)
        assert cmd is not None and cmd.name is not None


def test_bench_cowan_replay_runs_both_programs_on_the_same_matches(tmp_path: Path) -> None:
    """``mmr bench cowan --only-replay``: the whole replay and openskill's loop, side by side,
    each run printed with its ratio (timings are printed, never asserted)."""
    from stream.files import write_jsonl_atomic
    from stream.tools.bench import openskill_loop
    from stream.tools.bench.cowan import bench_cowan
    from stream.tools.synth import synth_matches

    src = tmp_path / "m.jsonl"
    write_jsonl_atomic(str(src), synth_matches(30, 5, 120, 3))
    assert openskill_loop(str(src)) == 120
    out = CliRunner().invoke(bench_cowan, ["--only-replay", "--replay", "200", "--replay-players", "40",
                                           "--replay-pairs", "1"])
    assert out.exit_code == 0, out.output
    rows = [line.split() for line in out.output.splitlines() if line.strip().startswith("1 ")]
    assert len(rows) == 1 and len(rows[0]) == 9, out.output  # run, 2 × (wall / CPU), 2 ratios
