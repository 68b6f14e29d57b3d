"""``mmr bench``: one subcommand per benchmark, each printing ratios measured in one run.

Numbers go to BENCHMARKS.md with the command and the machine; tests never assert timings.
"""

from __future__ import annotations

import importlib

import click

BENCHES: dict[str, tuple[str, str]] = {
    "elo-mmr": ("stream.tools.bench_elo_mmr", "bench_elo_mmr"),
    "cowan": ("stream.tools.bench_cowan", "bench_cowan"),
    "service": ("stream.tools.bench_service", "bench_service"),
}


class _LazyBench(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return sorted(BENCHES)

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name not in BENCHES:
            return None
        module, attr = BENCHES[name]
        cmd: click.Command = getattr(importlib.import_module(module), attr)
        return cmd


@click.group(cls=_LazyBench)
def bench() -> None:
    """Benchmarks (elo-mmr, cowan, service); see BENCHMARKS.md for recorded runs."""
