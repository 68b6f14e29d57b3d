"""The worker's logic without Faust: raw Kafka messages in; Redis commits, rating outputs and dead letters out.

Apart from the Faust app (which only moves bytes) because this is everything that must be right
(validation, ordering, idempotence, the atomic step), testable against a real Redis without a broker.
Per take batch: messages decoded and grouped per pool into ops, invalid ones dead-lettered
(stream.service.planning), round results assembled (stream.service.round_book), then per pool the
atomic step (``apply_pool``), ``MAX_CONCURRENT_STEPS`` pools at a time. The caller publishes the
outputs and only then acks; with ``hand`` each step's ratings are handed on once it is committed.
A bug (neither the input's error nor the infrastructure's) halts the partition of the message it
happened on (stream.service.halts), found by retrying the batch message by message.

The atomic step of one pool: one read (a Lua script: the commit token ``gen``, which event ids were
applied already, the beliefs not cached), the rating math on the single numba thread
(stream.service.step_rating), and one atomic commit (Lua) that writes beliefs, leaderboard and event
ids and marks assembled rounds done, refused when anything committed to the pool in between; the
step then starts again from the read.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from concurrent.futures import Executor
from functools import partial
from typing import Any

import orjson

from stream.engine.pool import PoolConfigError, PoolEngine
from stream.events.model import RatingOutput
from stream.events.validate import InvalidEvent
from stream.ratings.base import RatingError
from stream.service.config import Settings
from stream.service.halts import REDIS_DOWN, Halts
from stream.service.logs import batch_done
from stream.service.messages import BatchResult, DeadLetter, Message, peek_event
from stream.service.metrics import Metrics, reason_label
from stream.service.planning import Op, Plan, RoundOp, StepInputs, decode_message, plan_batch, split_steps, step_inputs
from stream.service.round_book import RoundBook
from stream.service.step_rating import rate_ops, republished, sided_step
from stream.state.cache import BeliefCache
from stream.state.fence import StoreRestarted, Superseded
from stream.state.redis_client import StoreUnavailable
from stream.state.redis_store import AlreadyApplied, Conflict, MetaConflict, RedisStore

__all__ = ["BatchResult", "DeadLetter", "Message", "Processor"]

log = logging.getLogger(__name__)

#: pools of one batch stepped at once, each holding one Redis connection at a time: a task per pool
#: would exhaust the client's connection pool on a batch of thousands of pools, and Redis runs one
#: command at a time, so a few dozen round trips in flight are as fast as more.
MAX_CONCURRENT_STEPS = 32
#: attempts at one pool step that met a commit conflict before the batch is retried later
MAX_ATTEMPTS = 20


def step_concurrency(store: RedisStore) -> int:
    """``MAX_CONCURRENT_STEPS``, or half the client's connection pool if that is smaller."""
    pool = getattr(store.r, "connection_pool", None)
    size = getattr(pool, "max_connections", None)
    if not isinstance(size, int) or size <= 0:
        return MAX_CONCURRENT_STEPS
    return max(1, min(MAX_CONCURRENT_STEPS, size // 2))


class Handed:
    """Where one batch's ratings go step by step (``Processor.start``'s ``hand``), each step's once it is
    committed. A batch tried again finds its committed steps applied and re-publishes their players'
    ratings: from the first retry on, a version handed already is left out, so each is handed once."""

    def __init__(self, hand: Callable[[Sequence[RatingOutput]], None]) -> None:
        self._hand = hand
        self.count = 0  # ratings handed
        self._parts: list[Sequence[RatingOutput]] = []  # until the batch is tried again (``again``)
        #: (pool, player, version) of every rating handed, once the batch is tried again
        self._known: set[tuple[str, str, int]] | None = None

    def __call__(self, outputs: Sequence[RatingOutput]) -> None:
        if self._known is None:
            self._parts.append(outputs)
        else:
            outputs = [o for o in outputs if (o.pool, o.player, o.version) not in self._known]
            if not outputs:
                return
            self._known.update((o.pool, o.player, o.version) for o in outputs)
        self.count += len(outputs)
        self._hand(outputs)  # counted in mmr_ratings_out once the broker holds them (stream.service.publish)

    def again(self) -> None:
        """The batch is tried again: a rating of a version handed already is not handed from now on."""
        if self._known is None:
            self._known = {(o.pool, o.player, o.version) for part in self._parts for o in part}
            self._parts = []


class Processor:
    """Stateless apart from the round book (mirrored in Redis) and caches."""

    def __init__(self, settings: Settings, store: RedisStore, executor: Executor,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.store = store
        self.executor = executor
        self.metrics = metrics or Metrics()
        #: each pool's engine, of the system that rates it (``engine``); and the meta of pools not in Redis yet
        self.engines: dict[str, PoolEngine] = {}
        self.unsaved: dict[str, dict[str, Any]] = {}
        #: beliefs as last read or committed (exact while the pool's gen is unchanged; see stream.state.cache)
        self.cache = BeliefCache(settings.belief_cache_mb << 20)
        self.rounds = RoundBook(settings, store, self.metrics, self._dead)
        self._locks: dict[str, asyncio.Lock] = {}  # per pool: its steps one at a time
        self._starting = asyncio.Lock()
        #: partitions halted by a bug in the rating step: their messages from the halt on are skipped
        self.halts = Halts(self.metrics.registry)
        #: pools of a batch stepped at once (``step_concurrency``)
        self.step_concurrency = step_concurrency(store)
        #: a batch found Redis unavailable and no batch has committed since (``mmr_store_unavailable``)
        self.store_down = False
        #: called with True when batches start finding Redis unavailable, with False once one commits
        #: again: the worker pauses fetching meanwhile (stream.service.app)
        self.on_store_down: Callable[[bool], Awaitable[None]] | None = None
        #: the tasks stepping pools of the batch under way (``settle``)
        self._steps: set[asyncio.Task[None]] = set()
        #: where the batch under way hands each step's ratings (``start``'s ``hand``); None: in its result
        self._handed: Handed | None = None

    def predecode(self, msgs: Sequence[Message]) -> None:
        """Decode and validate ``msgs`` ahead of ``process``, while the previous batch waits on the numba
        thread or on Redis (decoding needs no state). Never raises: anything unexpected is left to ``process``."""
        for msg in msgs:
            try:
                msg.decoded = decode_message(msg, self.settings)
            except InvalidEvent as exc:
                msg.decoded = exc
            except Exception:  # process() decodes it again and handles the error
                msg.decoded = None

    def _dead(self, msg: Message, reason: str, event_id: str | None = None, pool: str | None = None) -> DeadLetter:
        self.metrics.dead_letters.labels(reason_label(reason)).inc()
        return DeadLetter(reason, msg.topic, msg.partition, msg.offset, msg.value, event_id, pool)

    async def process(self, msgs: Sequence[Message]) -> BatchResult:
        """One take batch (any mix of input topics and pools), committed when this returns; errors propagate
        (the worker's ``start(..., safe=True)`` retries and dead-letters instead)."""
        return await self.start(msgs, safe=False)

    async def start(self, msgs: Sequence[Message], safe: bool = True,
                    hand: Callable[[Sequence[RatingOutput]], None] | None = None) -> BatchResult:
        """Process one take batch after every batch started before it. With ``safe`` it never fails on
        input or Redis errors (``process_safely``). With ``hand``, the ratings of each step are
        passed to it once the step is committed, in order, and not in the result (``Handed``)."""
        async with self._starting:
            self._handed = None if hand is None else Handed(hand)
            try:
                return await self._start(msgs, safe)
            finally:
                self._handed = None

    async def _start(self, msgs: Sequence[Message], safe: bool) -> BatchResult:
        if self.store.fence is not None:  # this batch (and every step of it) begins in the fence's epoch
            self.store.fence.begin()
        msgs = [m for m in msgs if not self.halts.held(m)] if self.halts else list(msgs)
        committed: dict[str, BatchResult] = {}
        try:
            try:
                return await self._apply_plan(plan_batch(msgs, self.settings, self.metrics, self._dead), committed)
            except Superseded:
                raise
            except Exception as exc:
                if isinstance(exc, REDIS_DOWN):
                    await self._store_failed()
                if not safe:
                    self.rounds.forget()  # what the failed attempt assembled may be ahead of Redis
                    raise
                log.warning("batch failed (%r); retrying it", exc)
                return await self.process_safely(msgs, committed)
        except Superseded as exc:
            # Redis restarted since this batch began: the worker's rewind takes it back (with every batch
            # not yet on Redis's disk), cancels this call and rates them again in order. Nothing of it may
            # reach Redis from here on (stream.state.fence), nor may it fail the pipeline meanwhile.
            self.rounds.forget()
            if not safe:
                raise
            log.warning("batch superseded by a restart of Redis (%s); waiting for the rewind to take it back",
                        exc)
            never: asyncio.Future[BatchResult] = asyncio.get_running_loop().create_future()
            return await never  # ends when the rewind cancels the pipeline's stage

    async def process_safely(self, msgs: Sequence[Message], committed: dict[str, BatchResult] | None = None,
                             ) -> BatchResult:
        """Process one batch now (only from ``start``); never lets an error escape. Redis unavailable is
        retried with back-off; any other error message by message, a message that still fails alone going
        to ``_failed``. ``committed``: the results of pools an earlier attempt committed (not applied again)."""
        committed = {} if committed is None else committed
        msgs = list(msgs)
        delay = 0.1
        while True:
            self.rounds.forget()  # what the failed attempt assembled may be ahead of Redis: read it again
            if self._handed is not None:  # ratings handed by the failed attempt are not handed again
                self._handed.again()
            if self.store.fence is not None:
                self.store.fence.guard()  # Superseded (Redis restarted since the batch began): never retried
            try:
                return await self._apply_plan(plan_batch(msgs, self.settings, self.metrics, self._dead), committed)
            except Superseded:
                raise
            except REDIS_DOWN as exc:
                await self._store_failed()
                log.warning("Redis unavailable or contended (%r); retrying the batch in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except Exception as exc:
                if len(msgs) == 1:
                    self.rounds.forget()  # the failed attempt may have assembled ahead of Redis
                    return self._failed(msgs[0], exc)
                log.exception("batch failed; retrying message by message")
                total = BatchResult()
                for res in committed.values():
                    total.add(res)
                for m in msgs:  # each alone, skipping the pools an attempt at the whole batch committed
                    if self.halts and self.halts.held(m):  # its partition halted at an earlier message
                        continue
                    total.add(await self.process_safely([m], {pool: BatchResult() for pool in committed}))
                return total

    def _failed(self, m: Message, exc: Exception) -> BatchResult:
        """A message that fails alone: a rating system refusing it is the input's fault (a dead letter);
        anything else a bug, which halts its partition (``MMR_ON_RATING_BUG``: or dead-letters it)."""
        if isinstance(exc, RatingError):
            pool, event_id = peek_event(m.value)
            return BatchResult(dead=[self._dead(m, f"rating: {exc}", event_id, pool)])
        if self.settings.on_rating_bug == "dead-letter":
            pool, event_id = self.halts.dead_lettered(m, exc)
            return BatchResult(dead=[self._dead(m, "internal error (see worker log)", event_id, pool)])
        self.halts.halt(m, exc)
        return BatchResult()

    async def _apply_plan(self, plan: Plan, committed: dict[str, BatchResult]) -> BatchResult:
        """Per pool: assemble its rounds, then its atomic step; ``step_concurrency`` pools at a time.

        A pool in ``committed`` is skipped: an earlier attempt at this batch applied its ops,
        and its result is added once. When one pool fails, the others still finish (their
        results go to ``committed``) before the error propagates, so that a retry never runs
        beside a step of the failed attempt."""
        todo = {pool: ops for pool, ops in plan.ops.items() if pool not in committed}
        todo.update((pool, []) for pool in plan.results if pool not in committed and pool not in todo)
        outs = {pool: BatchResult(hand=self._handed) for pool in todo}
        failed: dict[str, Exception] = {}
        queue = iter(todo)

        async def work() -> None:  # takes the next pool until none is left
            for pool in queue:
                try:
                    items = plan.results.get(pool)
                    if items:
                        again = await self.rounds.assemble(pool, items, todo[pool], outs[pool])
                        if again:
                            await self.republish(pool, again, outs[pool])
                    await self.apply_pool(pool, todo[pool], outs[pool])
                except Exception as exc:
                    failed[pool] = exc
                else:
                    committed[pool] = outs[pool]

        steps = [asyncio.ensure_future(work()) for _ in range(min(self.step_concurrency, len(todo)))]
        self._steps.update(steps)
        try:
            await asyncio.gather(*steps)
        finally:
            self._steps.difference_update(t for t in steps if t.done())
        for pool in todo:
            if pool in failed:
                raise failed[pool]
        out = plan.out
        for pool in dict.fromkeys([*plan.ops, *plan.results]):
            out.add(committed[pool])
            committed[pool] = BatchResult()  # added once (a retry message by message adds nothing more)
        if self.store_down:
            await self.set_store_down(False)
        seconds = time.perf_counter() - plan.t0
        self.metrics.batch_latency.observe(seconds)
        self.metrics.batch_messages.observe(plan.n_msgs)
        self.metrics.ratings_out.inc(len(out.outputs))
        handed = 0 if self._handed is None else self._handed.count
        batch_done(plan.n_msgs, plan.types, len(out.outputs) + handed, len(out.dead),
                   len(dict.fromkeys([*plan.ops, *plan.results])), seconds)
        return out

    async def settle(self) -> int:
        """Cancel the pool steps still running and wait until every one has ended; how many were running.
        For a rewind, before the restarted Redis is accepted: no step of a batch taken back outlives it."""
        running = [t for t in self._steps if not t.done()]
        for t in running:
            t.cancel()
        if running:
            log.warning("%d pool step(s) of a batch taken back were still running; cancelled", len(running))
            await asyncio.wait(running)
        self._steps.clear()
        return len(running)

    def reset(self) -> None:
        """Drop everything held in memory that mirrors Redis (assembled rounds, beliefs, the index of
        applied ids, pool systems): the server restarted and may hold less than they say."""
        self.rounds.forget()
        self.cache.clear()
        self.store.forget_ids()
        self.engines.clear()
        self.unsaved.clear()

    async def _store_failed(self) -> None:
        self.metrics.store_retries.inc()
        if not self.store_down:
            await self.set_store_down(True)

    async def set_store_down(self, down: bool) -> None:
        """Redis unavailable (``down``; or lost acknowledged writes, stream.state.marks) or answering again:
        the gauge, and the worker's fetch pause."""
        self.store_down = down
        if self.on_store_down is not None:
            try:
                await self.on_store_down(down)
            except Exception:  # a fetch that is not paused only costs memory; the batch goes on
                log.exception("pausing or resuming the fetch failed")
        self.metrics.store_unavailable.set(1 if down else 0)

    async def expire(self, now_ms: int | None = None, sources: Sequence[str] | None = None,
                     stop: Callable[[], bool] | None = None,
                     publish: Callable[[list[DeadLetter]], Awaitable[None]] | None = None) -> list[DeadLetter]:
        """``RoundBook.expire`` of the input partitions ``sources`` (None: those round results came from but
        the halted ones, which hold back the rest of their partition, where the completions may be)."""
        if sources is None:
            sources = [src for src in sorted(self.rounds.sources)
                       if not self.halts.holds(src.rpartition("/")[0], int(src.rpartition("/")[2]), 2**62)]
        return await self.rounds.expire(now_ms, sources, stop, publish)

    async def engine(self, pool: str) -> PoolEngine:
        """Which system rates ``pool``: Redis meta (fixed at its first commit) > the pools file > the default."""
        eng = self.engines.get(pool)
        if eng is not None:
            return eng
        stored = await self.store.meta(pool)
        if stored is None:
            cfg = self.settings.system_for(pool)  # checked when the worker started
            eng = self.engines[pool] = PoolEngine.of_params(pool, cfg.system, cfg.params)
            self.unsaved[pool] = {"system": cfg.system, "params": cfg.params}
            return eng
        system, params = stored["system"], stored["params"]
        wanted = self.settings.pools.get(pool)
        if wanted is not None and (wanted.system, wanted.params) != (system, params):
            log.warning("pool %s: Redis holds %s %s; ignoring configured %s %s", pool, system, params,
                        wanted.system, wanted.params)
        eng = self.engines[pool] = PoolEngine.from_meta(pool, system, params)
        return eng

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
                self.executor, partial(rate, places=step, advantages=adv), engine, step.ops, stored, seen,
                self._dead)
            self.metrics.step_seconds.labels("rate").observe(time.perf_counter() - started)
            if stats.repeated:
                outputs = await self._explain_again(pool, outputs)
            if stats.applied or commit.done_rounds:  # else all re-delivered (or dead): nothing to write
                commit.offsets = step.offsets
                commit.published = outputs  # the players' history records (stream.state.history)
                try:
                    started = time.perf_counter()
                    new_gen = await self.store.commit(pool, gen, commit, self.unsaved.get(pool),
                                                      check_ids=not checked)
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
                    self.engines.pop(pool, None)
                    self.unsaved.pop(pool, None)
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
                self.cache.committed(pool, gen, new_gen, commit.beliefs, commit.advantages)
                out.gens[pool] = new_gen  # the pool's mark (stream.state.marks)
                if commit.advantages:
                    self.metrics.set_advantages(pool, commit.advantages)
                self.unsaved.pop(pool, None)
                self.metrics.batches.labels(step.kind).inc()
            self.rounds.committed(pool, step.rounds)
            self.metrics.duplicates.inc(stats.repeated)
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
            engine = await self.engine(pool)
        except PoolConfigError:  # its events are dead-lettered by the step
            return
        out.rated(republished(engine, await self.store.beliefs(pool, list(players)), players))

    async def _unavailable(self, pool: str, delay: float) -> float:
        """Wait before trying a step again after Redis failed it; the next, longer wait (up to 5 s)."""
        log.warning("pool %r: Redis unavailable at its commit; trying the step again in %.2f s", pool, delay)
        self.cache.drop(pool)
        await self._store_failed()  # an outage under a commit is reported as one before it
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
            return await self.engine(pool)
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
        return [self._dead(m, f"pool config: {exc}", eid, pool) for m, eid in msgs.values()]

