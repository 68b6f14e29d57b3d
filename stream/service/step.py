"""The atomic step of one pool: read, rate (on the numba thread), commit; again on a conflict.

Per pool and step: one read (a Lua script: the commit token ``gen``, which event ids were
applied already, the beliefs not cached), the rating math on the single numba thread, and
one atomic commit (Lua) that writes beliefs, leaderboard and event ids and marks assembled
rounds done, refused when anything committed to the pool in between; the step then starts
again from the read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from functools import partial

import orjson

from stream.engine.pool import PoolConfigError, PoolEngine
from stream.events.model import RatingOutput
from stream.service.config import Settings
from stream.service.messages import BatchResult, DeadLetter, Message
from stream.service.metrics import Metrics
from stream.service.planning import DeadFn, Op, RoundOp, StepInputs, split_steps, step_inputs
from stream.service.registry import PoolRegistry
from stream.service.round_book import RoundBook
from stream.service.step_rating import rate_ops, republished, sided_step
from stream.state.cache import BeliefCache
from stream.state.fence import StoreRestarted
from stream.state.redis_client import StoreUnavailable
from stream.state.redis_store import AlreadyApplied, Conflict, MetaConflict, RedisStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20


class PoolStep:
    """Applies a pool's ops as atomic steps (see the module docstring)."""

    def __init__(self, settings: Settings, store: RedisStore, executor: Executor, metrics: Metrics,
                 registry: PoolRegistry, cache: BeliefCache, rounds: RoundBook, dead: DeadFn) -> None:
        self.settings = settings
        self.store = store
        self.executor = executor
        self.metrics = metrics
        self.registry = registry
        self.cache = cache
        self.rounds = rounds
        self.dead = dead
        self._locks: dict[str, asyncio.Lock] = {}
        #: told each time a step finds Redis unavailable and waits to try again (the processor's gauge, counter
        #: and fetch pause: a step retrying its commit by itself is an outage the worker must report)
        self.on_unavailable: Callable[[], Awaitable[None]] | None = None

    async def apply_pool(self, pool: str, ops: list[Op], out: BatchResult) -> None:
        """A pool's ops as atomic steps in order: one, or several when together they touch more than
        ``max_step_players`` players (``split_steps``)."""
        if not ops:
            return
        steps = [step_inputs(s) for s in split_steps(ops, self.settings.max_step_players)]
        async with self._locks.setdefault(pool, asyncio.Lock()):
            for step in steps:
                await self._apply_step(pool, step, out)

    async def _apply_step(self, pool: str, step: StepInputs, out: BatchResult) -> None:
        """One step: read, rate, commit, again from the read on a conflict."""
        engine = await self._engine_or_refuse(pool, step.ops, out)
        if engine is None:
            return
        loop = asyncio.get_running_loop()
        sides = sided_step(engine, step.ops)  # its read also takes the pool's learned advantages
        rate = rate_ops  # looked up at each step: tests/faults.py can swap it for a failing one
        optimistic = True
        attempt, delay = 0, 0.0
        while attempt < MAX_ATTEMPTS:
            attempt += 1
            try:
                gen, stored, seen, checked, adv = await self._read(pool, step.players, step.ids, optimistic, sides)
            except StoreRestarted:
                raise
            except StoreUnavailable:
                if not delay:  # no commit was sent yet: the batch is retried whole (the processor)
                    raise
                delay = await self._unavailable(pool, delay)
                attempt -= 1
                continue
            started = time.perf_counter()
            commit, outputs, dead, stats = await loop.run_in_executor(
                self.executor, partial(rate, places=step.places, advantages=adv), engine, step.ops, stored, seen,
                self.dead)
            self.metrics.step_seconds.labels("rate").observe(time.perf_counter() - started)
            if stats.repeated:
                outputs = await self._explain_again(pool, outputs)
            if not stats.applied and not commit.done_rounds:  # all re-delivered (or dead): nothing to write
                self.rounds.committed(pool, step.rounds)
                out.rated(outputs)
                out.dead.extend(dead)
                self.metrics.duplicates.inc(stats.repeated)
                return
            commit.offsets = step.offsets
            commit.published = outputs  # the players' history records (stream.state.history)
            meta = self.registry.unsaved.get(pool)
            try:
                started = time.perf_counter()
                new_gen = await self.store.commit(pool, gen, commit, meta, check_ids=not checked)
                self.metrics.step_seconds.labels("commit").observe(time.perf_counter() - started)
            except StoreRestarted:
                raise
            except StoreUnavailable:
                # The script may have run with its reply lost. Retried here, with the ops in hand, rather
                # than by the processor: the re-read finds their ids applied and ``rate_ops`` re-publishes
                # those players' ratings, where a batch planned again would drop a round's results as
                # seen and never publish what the commit changed.
                optimistic = False
                delay = await self._unavailable(pool, delay or 0.05)
                attempt -= 1
                continue
            except AlreadyApplied:  # a re-delivery: read which ids were applied, recompute without them
                optimistic = False
                continue
            except MetaConflict:  # another worker fixed the pool's system first: rate with that one
                self.cache.drop(pool)
                self.registry.forget(pool)
                engine = await self._engine_or_refuse(pool, step.ops, out)
                if engine is None:
                    return
                sides = sided_step(engine, step.ops)
                continue
            except Conflict:
                self.cache.drop(pool)
                self.metrics.conflicts.inc()
                await asyncio.sleep(0.001 * attempt)
                continue
            self.rounds.committed(pool, step.rounds)
            self.cache.committed(pool, gen, new_gen, commit.beliefs, commit.advantages)
            out.gens[pool] = new_gen  # the pool's mark (stream.state.marks)
            if commit.advantages:
                self.metrics.set_advantages(pool, commit.advantages)
            self.registry.unsaved.pop(pool, None)
            self.metrics.duplicates.inc(stats.repeated)
            self.metrics.batches.labels(step.kind).inc()
            out.rated(outputs)
            out.dead.extend(dead)
            return
        # another writer keeps winning (two owners during a rebalance): contention, retried later, not a bug
        raise Conflict(f"pool {pool}: {MAX_ATTEMPTS} commit conflicts in a row")

    async def republish(self, pool: str, players: dict[str, tuple[str, int]], out: BatchResult) -> None:
        """The current ratings of ``players`` (-> the event id and time their output cites), published again:
        their events were applied before (a re-delivery) and their outputs may never have reached the topic.
        Same versions as before, or newer; consumers keep the highest."""
        try:
            engine = await self.registry.engine(pool)
        except PoolConfigError:  # its events are dead-lettered by the step
            return
        out.rated(republished(engine, await self.store.beliefs(pool, list(players)), players))

    async def _unavailable(self, pool: str, delay: float) -> float:
        """Wait before trying a step again after Redis failed it; the next, longer wait (up to 5 s)."""
        log.warning("pool %r: Redis unavailable at its commit; trying the step again in %.2f s", pool, delay)
        self.cache.drop(pool)
        if self.on_unavailable is not None:
            await self.on_unavailable()
        await asyncio.sleep(delay)
        return min(delay * 2, 5.0)

    async def _explain_again(self, pool: str, outputs: Sequence[RatingOutput]) -> list[RatingOutput]:
        """Re-published ratings (a re-delivery) with the explanation stored with their version:
        the same message as the first time (an explanation of another version, e.g. none
        stored by an older worker, is left out rather than shown for the wrong change)."""
        again = [o.player for o in outputs if o.explain is None]
        if not again:
            return list(outputs)
        records = await self.store.changes(pool, again)
        out = []
        for o in outputs:
            raw = records.get(o.player) if o.explain is None else None
            if raw is not None:
                version, _, _, explained = orjson.loads(raw)
                if version == o.version:
                    o = o._replace(explain=orjson.dumps(explained))  # as the first time: JSON text
            out.append(o)
        return out

    async def _read(self, pool: str, players: dict[str, int], ids: list[str], optimistic: bool, sides: bool = False,
                    ) -> tuple[str, dict[str, bytes | None], set[str], bool, dict[bytes, bytes] | None]:
        """What a step of ``pool`` starts from: (gen, stored beliefs, applied event ids, whether
        those were read, and with ``sides`` the pool's learned advantages, else None).

        When every player (and with ``sides`` the advantages) is cached, and ``optimistic``, nothing
        is read: the commit then checks the event ids itself (``check_ids``) and its compare-and-set
        on ``gen`` proves the cache current. Otherwise one snapshot reads the event ids, the players
        not cached and with ``sides`` the advantages; a snapshot at another ``gen`` than the cache's
        replaces it. A step without sides never reads the advantages.
        """
        cache = self.cache
        entry = cache.pool(pool)
        missing = entry.missing(players)
        if optimistic and entry.gen is not None and not missing and (not sides or entry.adv is not None):
            return entry.gen, entry.get_many(players), set(), False, dict(entry.adv or {}) if sides else None
        snap = await self.store.snapshot(pool, missing, ids, advantages=sides)
        if entry.gen is not None and snap.gen != entry.gen:  # someone else wrote the pool: read everything
            cache.drop(pool)
            snap = await self.store.snapshot(pool, list(players), ids, advantages=sides)
        if not cache.enabled:
            return snap.gen, snap.beliefs, snap.seen, True, snap.advantages
        entry = cache.fill(pool, snap.gen, snap.beliefs, snap.advantages)  # complete for ``players``
        return snap.gen, entry.get_many(players), snap.seen, True, snap.advantages

    async def _engine_or_refuse(self, pool: str, ops: list[Op], out: BatchResult) -> PoolEngine | None:
        """The pool's engine, or None once ``ops`` are dead-lettered because its stored
        system cannot be built by this version (``_refuse``)."""
        try:
            return await self.registry.engine(pool)
        except PoolConfigError as exc:
            out.dead.extend(await self._refuse(pool, ops, exc))
            return None

    async def _refuse(self, pool: str, ops: list[Op], exc: PoolConfigError) -> list[DeadLetter]:
        """Dead letters for ``ops`` of a pool whose stored system this version cannot build:
        one per source message (each carries its original bytes)."""
        msgs: dict[tuple[str, int, int], tuple[Message, str | None]] = {}
        for op in ops:
            if isinstance(op, RoundOp):
                if op.round_done is not None:
                    await self.rounds.refuse(pool, op.round_done)
                msgs.setdefault((op.msg.topic, op.msg.partition, op.msg.offset), (op.msg, op.event.event_id))
            else:
                for m in op.sources:
                    msgs.setdefault((m.topic, m.partition, m.offset), (m, None))
        log.error("%s; dead-lettering %d message(s)", exc, len(msgs))
        return [self.dead(m, f"pool config: {exc}", eid, pool) for m, eid in msgs.values()]

