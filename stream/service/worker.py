"""``mmr worker``: run the streaming service (one Faust worker process).

Start-up: settings, systems and the HTTP port checked → topics created → the numba kernels warmed
up on their thread (no compile latency on the first event) → the Faust worker.
"""

from __future__ import annotations

import asyncio
import gc
import logging
import sys
from typing import Any

import click
import numpy as np

from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent, RoundEvent
from stream.params import parse_params
from stream.ratings import registry
from stream.ratings.sided import make_pool_system
from stream.service.config import LogFormat, Settings, from_env
from stream.service.logs import logging_config
from stream.state import id_index, packed_pool, tagged_pool

log = logging.getLogger(__name__)


def systems_in_use(s: Settings) -> list[tuple[str, dict[str, object]]]:
    return [(s.system, s.default_params), *((p.system, p.params) for p in s.pools.values())]


def warmup(s: Settings) -> None:
    """``warm_shared``, then ``warm_system`` for each configuration in use (pools often share one)."""
    warm_shared()
    warmed: set[str] = set()
    distinct = {(name, repr(sorted(params.items()))): (name, params) for name, params in systems_in_use(s)}
    for name, params in distinct.values():
        warm_system(name, params, warmed)


def warm_shared() -> None:
    """Compile (or load) the kernels every pool runs whatever its system (``mmr warm`` and the worker)."""
    id_index.warmup()
    packed_pool.warmup()
    tagged_pool.warmup()


def warm_system(name: str, params: dict[str, object], warmed: set[str]) -> None:
    """Compile (or load) system ``name``'s kernels: the warm-ups its spec names, once a process (``warmed``),
    then its rating of stored bytes with ``params`` (``warm_encoded_path``)."""
    spec = registry.spec(name)
    make_pool_system(name, params)  # bad parameters (the system's, the side advantage's) fail here, before compiling
    for target, fn in zip(spec.warmups, spec.warmup_functions(), strict=True):
        if target not in warmed:
            warmed.add(target)
            fn()
    warm_encoded_path(name, params)


def warm_encoded_path(name: str, params: dict[str, object]) -> None:
    """Rate a few matches and a round on *stored bytes*, twice, each pass with a fresh engine (so the
    second decodes what the first stored), and read one player as the HTTP API does: the codec's
    kernels are loaded before the first event instead of inside its latency."""
    system, _ = make_pool_system(name, params)
    stored: dict[str, bytes | None] = {}
    players = [f"w{i}" for i in range(4)]
    for k in range(2):
        engine = PoolEngine("warmup", system)
        batch = MatchBatch("warmup")
        for i in range(3):
            # a draw among them: some systems rate one with a kernel of its own (TrueSkill's margin)
            batch.add(MatchEvent(event_id=f"m{k}-{i}", pool="warmup", time=k, a=players[i], b=players[i + 1],
                                 score=0.5 if i == 1 else 1.0))
        # two players: every system rates such a round (Cowan rates only two-player rounds),
        # so an error here is a real one and stops the start
        round_ = RoundEvent(event_id=f"r{k}", pool="warmup", round_id=f"r{k}", time=k, players=players[:2],
                            ranks=np.arange(1, 3, dtype=np.int64))
        stored.update(engine.apply_matches(batch, stored).updates)
        stored.update(engine.apply_round(round_, stored).updates)
    PoolEngine("warmup", system).decode_all(stored, players[:1])


def tune_gc() -> None:
    """Freeze what start-up allocated and collect the young generation less often: a batch allocates
    tens of thousands of short-lived objects, and at CPython's default threshold the collector would
    run many times a batch, rescanning the long-lived heap (Faust, numba, caches) each time."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(50_000, 20, 20)


def tune_gil(switch_ms: float) -> None:
    """Let a thread waiting for the GIL have it after ``switch_ms`` instead of Python's 5 ms: the event
    loop waits that long for the GIL the numba thread holds, at each hand-over, commit and publish."""
    if switch_ms > 0:
        sys.setswitchinterval(switch_ms / 1000)


class RepeatLimit(logging.Filter):
    """At most ``burst`` records of one message template of one logger every ``interval`` seconds; the
    next record let through says how many were left out. Why: while the broker is down aiokafka logs an
    ERROR for every attempt, burying the worker's own one line that it waits."""

    def __init__(self, interval: float = 10.0, burst: int = 3) -> None:
        super().__init__()
        self.interval, self.burst = interval, burst
        self._seen: dict[tuple[str, object], list[float]] = {}  # key -> [interval start, passed, left out]

    def filter(self, record: logging.LogRecord) -> bool:
        key = (record.name, record.msg)
        now = record.created
        seen = self._seen.get(key)
        if seen is None or now - seen[0] >= self.interval:
            left_out = 0 if seen is None else int(seen[2])
            self._seen[key] = [now, 1, 0]
            if len(self._seen) > 10_000:  # bounded: templates, not values, are the keys
                self._seen.clear()
            if left_out:
                record.msg = f"{record.msg} ({left_out} more like it in the last {self.interval:.0f} s left out)"
            return True
        if seen[1] < self.burst:
            seen[1] += 1
            return True
        seen[2] += 1
        return False


#: the libraries whose loggers repeat themselves while the broker is down
NOISY_LOGGERS = ("aiokafka", "faust", "mode")


def limit_repeats() -> RepeatLimit:
    """Put one ``RepeatLimit`` on every logger created so far under ``NOISY_LOGGERS`` (a filter of a
    logger applies to its own records only, so each module's logger gets it)."""
    limit = RepeatLimit()
    for name in list(logging.Logger.manager.loggerDict):
        if name.split(".")[0] in NOISY_LOGGERS:
            logger = logging.getLogger(name)
            if limit not in logger.filters:
                logger.addFilter(limit)
    return limit


def faust_worker(app: Any, loglevel: str, loop: asyncio.AbstractEventLoop, log_format: LogFormat = "text") -> Any:
    """Faust's worker for ``app``, logging at ``loglevel`` in ``log_format``, without its terminal spinner:
    for it Faust sets the root logger to DEBUG for good, and every debug call would make a record."""
    import faust

    worker = faust.Worker(app, loglevel=loglevel, loop=loop, logging_config=logging_config(log_format, loglevel))
    worker.spinner = None
    return worker


@click.command()
@click.option("--system", default=None, help="System of every pool the pools file does not name "
              "(default: MMR_SYSTEM, else elo-mmr).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Parameter of the default system.")
@click.option("--loglevel", default=None, help="Log level (default MMR_LOG_LEVEL or info).")
def worker(system: str | None, params: tuple[str, ...], loglevel: str | None) -> None:
    """Run the streaming worker (configuration from the environment, see docs/operator.md)."""
    from stream.service.app import create_app
    from stream.service.http import HttpPortTaken
    from stream.service.topics import ensure_topics

    settings = from_env().with_default_system(system, parse_params(params))
    try:
        for name, p in systems_in_use(settings):
            make_pool_system(name, p)  # the system's keys and the side advantage's (``advantage*``)
    except ValueError as exc:
        raise click.UsageError(str(exc)) from None
    loop = asyncio.new_event_loop()
    asyncio.set_event_loop(loop)
    try:
        svc = create_app(settings)
    except HttpPortTaken as exc:
        raise click.ClickException(str(exc)) from None
    loop.run_until_complete(svc.serve_http())  # answers /healthz ("starting") and /metrics from here on
    # printed, not logged: Faust sets up logging (and its level) only when its worker starts
    click.echo(f"mmr worker: HTTP API on http://{settings.http_host}:{svc.http_port}", err=True)
    loop.run_until_complete(ensure_topics(settings))
    from stream.runtime.compile_notice import compile_notice  # imports numba: only once the worker really starts

    with compile_notice(hint=""):  # a cold start says, on stderr, that it compiles and for how long
        loop.run_until_complete(loop.run_in_executor(svc.executor, warmup, settings))
    tune_gc()
    tune_gil(settings.gil_switch_ms)
    limit_repeats()
    try:
        faust_worker(svc.app, loglevel or settings.log_level, loop, settings.log_format).execute_from_commandline()
    except SystemExit as exc:
        if svc.fatal is not None and not exc.code:  # stopped by itself on a fault (logged): not a clean stop
            sys.exit(1)
        raise
