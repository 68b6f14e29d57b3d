"""``mmr bench``: one subcommand per benchmark, each printing ratios measured in one run.

Numbers go to BENCHMARKS.md with the command and the machine; tests never assert timings.
"""

from __future__ import annotations

import importlib

import click

BENCHES: dict[str, tuple[str, str]] = {
    "elo-mmr": ("stream.tools.bench.elo_mmr", "bench_elo_mmr"),
    "cowan": ("stream.tools.bench.cowan", "bench_cowan"),
    "service": ("stream.tools.bench.service", "bench_service"),
    "teams": ("stream.tools.bench.teams", "bench_teams"),
    "replay": ("stream.tools.bench.replay", "bench_replay"),
}


def _load(name: str) -> click.Command:
    module, attr = BENCHES[name]
    cmd: click.Command = getattr(importlib.import_module(module), attr)
    return cmd


@click.command("all")
def bench_all() -> None:
    """Every benchmark with its defaults, one after the other (`make bench`)."""
    for name in sorted(BENCHES):
        click.echo(f"== mmr bench {name}")
        _load(name).main([], prog_name=f"mmr bench {name}", standalone_mode=False)


class _LazyBench(click.Group):
    def list_commands(self, ctx: click.Context) -> list[str]:
        return ["all", *sorted(BENCHES)]

    def get_command(self, ctx: click.Context, name: str) -> click.Command | None:
        if name == "all":
            return bench_all
        return _load(name) if name in BENCHES else None


@click.group(cls=_LazyBench)
def bench() -> None:
    """Benchmarks (all, elo-mmr, cowan, replay, service, teams); see BENCHMARKS.md for recorded runs."""
