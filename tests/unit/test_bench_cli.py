"""`mmr bench all` (what `make bench` runs) exists and names every benchmark."""

from __future__ import annotations

import click
from click.testing import CliRunner

from stream.tools.bench import BENCHES, bench


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
