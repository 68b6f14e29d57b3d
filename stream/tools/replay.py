"""``mmr replay``: a history through the pipeline, embedded or into the service's topics."""

from __future__ import annotations

import contextlib
import gc
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import click
from click.core import ParameterSource

from stream.events.inputs import CsvMapping
from stream.events.model import RatingOutput
from stream.files import JsonlWriter, iter_records, prefetched, write_jsonl_atomic
from stream.params import parse_params
from stream.ratings.sided import make_pool_system
from stream.tools.common import (
    csv_columns_option,
    exit_on_bad_input,
    load_pools_file,
    pools_option,
    report_skipped,
    skip_invalid_option,
    skipped_lines,
)


def print_leaderboard(rows: list[dict[str, Any]], top: int) -> None:
    best = sorted(rows, key=lambda r: r["rating"], reverse=True)[:top]
    click.echo(f"{'#':>3}  {'player':<24} {'pool':<10} {'rating':>9} {'mu':>9} {'sigma':>7} {'rounds':>6}")
    for i, r in enumerate(best, 1):
        click.echo(f"{i:>3}  {r['player'][:24]:<24} {r['pool'][:10]:<10} {r['rating']:>9.1f} {r['mu']:>9.1f} "
                   f"{r['sigma']:>7.1f} {r['rounds']:>6}")


#: container allocations between two young-generation collections during an embedded replay
#: (Python's default: 700)
GC_YOUNG = 50_000


@contextlib.contextmanager
def fewer_collections() -> Iterator[None]:
    """The cyclic garbage collector nearly out of an embedded replay's way, restored after.

    Why: a replay allocates containers by the million that die by reference counting or live to the
    end, beside the hundreds of thousands of objects numba and numpy create at import; with Python's
    thresholds the collector's full passes walk all of them again and again, on the main thread
    between kernel calls. ``gc.freeze`` takes what exists before the replay out of every pass, and a
    young generation of ``GC_YOUNG`` objects makes the passes rare (cycles are still collected)."""
    thresholds = gc.get_threshold()
    gc.freeze()
    gc.set_threshold(GC_YOUNG, thresholds[1], thresholds[2])
    try:
        yield
    finally:
        gc.set_threshold(*thresholds)
        gc.unfreeze()


@contextlib.contextmanager
def long_lived() -> Iterator[None]:
    """The collector off while the objects that live to the end are made (the replay's imports:
    numba's registries, the engine's and the kernels' modules), then those frozen out of its
    passes (``gc.freeze``; ``fewer_collections`` unfreezes them after). Why: they are hundreds of
    thousands, and collections during the imports would walk them again and again for nothing."""
    enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if enabled:
            gc.enable()
        gc.freeze()


#: ``--broker`` given without a value: publish to KAFKA_BOOTSTRAP_SERVERS
BROKER_FROM_ENV = "\0from-env"
EMBEDDED_ONLY = ("system", "params", "pools_file", "out", "advantages", "top", "history")
BROKER_ONLY = ("rate", "speedup")


def check_mode_options(ctx: click.Context, broker: str | None, embedded: bool) -> None:
    """Refuse options that the chosen mode would ignore (``--broker`` or in-process)."""

    def given(names: tuple[str, ...]) -> list[str]:
        opts = {p.name: p.opts[0] for p in ctx.command.params}
        return [opts[n] for n in names if ctx.get_parameter_source(n) not in (None, ParameterSource.DEFAULT)]

    if broker is None:
        if stray := given(BROKER_ONLY):
            raise click.UsageError(f"{', '.join(stray)} applies only with --broker")
        return
    if broker == "":
        raise click.BadParameter("empty; give BOOTSTRAP, or --broker alone for KAFKA_BOOTSTRAP_SERVERS",
                                 param_hint="--broker")
    if broker != BROKER_FROM_ENV and Path(broker).is_file():
        raise click.BadParameter(f"{broker!r} is a file, not a bootstrap address: put the inputs before --broker "
                                 "or write --broker=BOOTSTRAP", param_hint="--broker")
    if embedded:
        raise click.UsageError("choose --embedded or --broker, not both")
    if stray := given(EMBEDDED_ONLY):
        raise click.UsageError(f"{', '.join(stray)} does not apply with --broker: the worker's configuration "
                               "chooses each pool's system, and its ratings are read with `mmr export`")


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--system", default="elo-mmr", show_default=True, help="Rating system name.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="System parameter (repeatable).")
@click.option("--embedded", is_flag=True, help="Run the pipeline in-process (no Kafka, no Redis).")
@click.option("--out", type=click.Path(dir_okay=False), help="Embedded: final ratings JSONL.")
@click.option("--advantages", is_flag=True,
              help='Embedded: after the ratings in --out, a line per pool with its learned side advantage '
                   '({"type": "advantage", ...}, as `mmr export --advantages`).')
@click.option("--history", type=click.Path(dir_okay=False),
              help="Embedded: every player's rating after every round or match batch, explained (JSONL).")
@click.option("--pool", default=None, help="Pool for contest/CSV input (default 'default'); overrides events'.")
@click.option("--top", type=int, default=0, help="Embedded: print the top-N leaderboard.")
@click.option("--batch-size", type=int, default=4096, show_default=True, help="Matches per batch.")
@click.option("--skip", type=int, default=0, help="Skip the first K events (resume a replay).")
@click.option("--broker", is_flag=False, flag_value=BROKER_FROM_ENV, default=None, metavar="[BOOTSTRAP]",
              help="Publish to the service's topics instead: to BOOTSTRAP, or to KAFKA_BOOTSTRAP_SERVERS without "
                   "a value.")
@click.option("--rate", type=float, default=0.0, help="Broker: events per second (0 = as fast as possible).")
@click.option("--speedup", type=float, default=0.0, help="Broker: time compression factor on event times.")
@csv_columns_option
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@pools_option
@skip_invalid_option
@click.pass_context
def replay(ctx: click.Context, inputs: tuple[str, ...], system: str, params: tuple[str, ...], embedded: bool,
           out: str | None, advantages: bool, history: str | None, pool: str | None, top: int, batch_size: int,
           skip: int, broker: str | None, rate: float, speedup: float, mapping: CsvMapping, progress: bool,
           pools_file: str | None, skip_invalid: bool) -> None:
    """Replay INPUT files (event JSONL, contest JSONL, 1-v-1 CSV; plain, .gz or .xz).

    With --embedded the service's pipeline runs in-process: --out gets the final rating of every
    player, --history every rating message the service would publish (a line per player and rated
    unit: a round, or the matches of one --batch-size batch) with the rating before, the change and
    its cause. With --broker the events are published to the service (--broker alone: to
    KAFKA_BOOTSTRAP_SERVERS). Options of the other mode are refused.

    Bad input stops the replay with exit status 2, a message naming the file and line, and no
    output file; with --skip-invalid such records are skipped (as the service dead-letters them),
    counted and the first reasons reported. A round assembled from round_result events that is
    still incomplete when the input ends is not rated (the service dead-letters it after
    MMR_ROUND_TIMEOUT): a "warning:" line on stderr names it (pool, round id, results k/n, the
    file:line of its first event), and the exit status stays 0.
    """
    check_mode_options(ctx, broker, embedded)
    skipped = skipped_lines(skip_invalid)
    with exit_on_bad_input():
        if broker is not None:
            from stream.tools.publish import publish_history

            publish_history(inputs, None if broker == BROKER_FROM_ENV else broker, pool=pool, mapping=mapping,
                            skip=skip, rate=rate, speedup=speedup, batch_size=batch_size, progress=progress,
                            on_invalid=skipped)
            report_skipped(skipped)
            return
        with contextlib.ExitStack() as stack:
            stack.enter_context(fewer_collections())
            with long_lived():
                from stream.engine.embedded import EmbeddedPipeline
                from stream.events.model import rating_value
                from stream.runtime.compile_notice import compile_notice

            sink = stack.enter_context(JsonlWriter(history)) if history else None

            def write_history(outputs: Sequence[RatingOutput]) -> None:
                assert sink is not None
                sink.write_lines(b"".join([rating_value(o) + b"\n" for o in outputs]), len(outputs))

            pool_systems = {name: (cfg.system, cfg.params) for name, cfg in load_pools_file(pools_file).items()}
            pipeline = EmbeddedPipeline(system, parse_params(params), batch_size=batch_size, pool_systems=pool_systems,
                                        history=None if sink is None else write_history)
            for pool_system, pool_params in pool_systems.values():
                make_pool_system(pool_system, pool_params)  # fail fast on a bad name / parameter, as the worker does
            with compile_notice():
                pipeline.run(prefetched(iter_records(inputs, pool, mapping, progress, skip, chunks=True,
                                                     on_invalid=skipped), prepare=pipeline.look_ahead),
                             on_invalid=skipped)
            # after the last record of all inputs: a round may span files of one replay
            for open_round in pipeline.incomplete_rounds():
                click.echo(f"warning: {open_round.describe()}", err=True)
            rows = list(pipeline.final_ratings())
            learned = list(pipeline.advantages()) if advantages else []
        if sink is not None:
            click.echo(f"wrote {sink.rows} rating changes to {history}", err=True)
    report_skipped(skipped)
    if out:
        n = write_jsonl_atomic(out, iter(rows + learned)) - len(learned)
        click.echo(f"wrote {n} ratings{f' and {len(learned)} advantages' if learned else ''} to {out}", err=True)
    if top:
        print_leaderboard(rows, top)
