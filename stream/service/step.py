"""The atomic step of one pool: read, rate (on the numba thread), commit; again on a conflict.

Per pool and step: one read (a Lua script: the commit token ``gen``, which event ids were
applied already, the beliefs not cached), the rating math on the single numba thread, and
one atomic commit (Lua) that writes beliefs, leaderboard and event ids and marks assembled
rounds done, refused when anything committed to the pool in between; the step then starts
again from the read.
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import time
from collections.abc import Awaitable, Callable, Container, Iterable, Mapping, Sequence
from concurrent.futures import Executor, ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from itertools import repeat
from operator import attrgetter
from typing import TypeAlias, cast

import numpy as np
import orjson

from stream.engine.explain import (
    Explainer,
    performances_encoded,
    ratings_stored,
    round_numbers,
    round_template,
    round_text_column,
    round_texts,
)
from stream.engine.pool import Applied, PoolConfigError, PoolEngine
from stream.engine.rating_columns import RatingColumns
from stream.events.model import MatchBatch, MatchEvent, PlayerIndex, RatingOutput, index_players
from stream.ratings.base import FloatArray, IntArray, Rating, RatingError, rows_of_columns
from stream.runtime import thread_names
from stream.service.ahead import Chain, NextBatch, RatedAhead, StepEnd, rate_ahead
from stream.service.config import Settings
from stream.service.messages import BatchResult, DeadLetter, Message
from stream.service.metrics import Metrics
from stream.service.planning import DeadFn, MatchOp, Op, Places, RoundOp, StepInputs, split_steps, step_inputs
from stream.service.registry import PoolRegistry
from stream.service.round_book import RoundBook
from stream.state.cache import BeliefCache
from stream.state.fence import StoreRestarted
from stream.state.redis_client import StoreUnavailable
from stream.state.redis_store import AlreadyApplied, Commit, Conflict, MetaConflict, RedisStore
from stream.state.tagged_pool import TaggedFlat, TaggedPool
from stream.text_columns import Column, split

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20
_ROUNDS = attrgetter("rounds")
#: what rating a step gives: the commit, the outputs, the dead letters, the counts
Rated: TypeAlias = "tuple[Commit, Sequence[RatingOutput], list[DeadLetter], Counts]"


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
        #: the next batch, planned ahead by the processor when it is already taken (stream.service.ahead)
        self.next_batch: Callable[[], NextBatch | None] | None = None
        #: the thread that ends the steps rated ahead (``StepEnd``), made by the first chain, ended by ``close``
        self._ends: ThreadPoolExecutor | None = None
        #: told each time a step finds Redis unavailable and waits to try again (the processor's gauge, counter
        #: and fetch pause: a step retrying its commit by itself is an outage the worker must report)
        self.on_unavailable: Callable[[], Awaitable[None]] | None = None

    def close(self) -> None:
        """End the thread of the steps' ends (a step ending there ends unused)."""
        if self._ends is not None:
            self._ends.shutdown(wait=False, cancel_futures=True)
            self._ends = None

    async def apply_pool(self, pool: str, ops: list[Op], out: BatchResult, early: Chain | None = None) -> None:
        """A pool's ops as atomic steps in order: one, or several when together they touch
        more than ``max_step_players`` players (``split_steps``). With several, the steps after the
        one committing are rated meanwhile, one after another (``MMR_RATE_AHEAD``, a ``Chain``;
        stream.service.ahead), and on into the pool's steps of the next batch when the processor
        planned that batch already (``next_batch``; ``MMR_RATE_AHEAD_BATCHES``): what the chain
        holds of those at the end is kept there for that batch. ``early``: this batch's steps of the
        pool so rated, used if its ops are the very ops they were cut from."""
        if not ops:
            if early is not None:
                self._drop_chain(early)
            return
        by_offsets = self.settings.dedup == "offsets"
        chain: Chain | None = None
        if early is not None and early.cut is not None and early.cut[0] is ops:
            # the very ops planned ahead: their steps as cut then (cutting 100 rounds of the Codeforces
            # history again took 20-60 ms of the event loop: BENCHMARKS.md, "Service")
            steps = early.cut[1]
            chain = early
            chain.resume(self.next_batch)
        else:
            if early is not None:
                self._drop_chain(early)
            steps = [step_inputs(s, by_offsets) for s in split_steps(ops, self.settings.max_step_players)]
        async with self._locks.setdefault(pool, asyncio.Lock()):
            try:
                for i, step in enumerate(steps):
                    ahead: RatedAhead[Rated] | None = None
                    if chain is not None:
                        ahead = await chain.take(step)
                        if ahead is None:
                            self._drop_chain(chain)
                            chain = None
                    chain = await self._apply_step(pool, step, out, ahead, chain, steps[i + 1:])
            except BaseException:
                if chain is not None:
                    self._drop_chain(chain)
                raise
            if chain is not None:
                if chain.stash is not None and chain.holds_more():
                    dropped = chain.stash.keep(pool, chain)
                    if dropped:
                        self.metrics.rated_ahead.labels("dropped").inc(dropped)
                else:
                    self._drop_chain(chain)

    def _drop_chain(self, chain: Chain) -> None:
        """Drop ``chain``'s ratings ahead, counted as dropped."""
        n = chain.drop()
        if n:
            self.metrics.rated_ahead.labels("dropped").inc(n)

    def _chain(self, pool: str, kind: str, engine: PoolEngine, rate: Callable[..., Rated], gen: str,
               step: StepInputs, commit: Commit, rest: Sequence[StepInputs]) -> Chain | None:
        """A chain rating the steps after ``step`` (``rest``, then the next batch's) from the state its
        ``commit`` leaves; None when there is nothing to rate."""
        if not rest and self.next_batch is None:
            return None
        by_offsets, explain = self.settings.dedup == "offsets", self.settings.explain

        if self._ends is None:
            self._ends = thread_names.named_executor(thread_names.STEP_END)
        ends, ahead_rate = self._ends, rate_ops_ahead if rate is rate_ops else rate

        def rate_step(nxt: StepInputs, stored: dict[str, bytes | None],
                      on_beliefs: Callable[[Mapping[str, bytes]], None]) -> Awaitable[RatedAhead[Rated] | None]:
            return rate_ahead(self.executor, engine, ahead_rate, nxt, stored, explain, by_offsets, ends, on_beliefs)

        chain = Chain(self.store, self.cache, pool, kind, rate_step, gen, step, commit.beliefs, rest,
                      self.next_batch, self.settings.rate_ahead_depth)
        chain.start()
        return chain

    async def _apply_step(self, pool: str, step: StepInputs, out: BatchResult, ahead: RatedAhead[Rated] | None,
                          chain: Chain | None, rest: Sequence[StepInputs]) -> Chain | None:
        """One step: read, rate, commit, again from the read on a conflict. ``ahead``: this step
        already rated from the state the commit before left (its first attempt uses it), taken from
        ``chain``, which rates the steps after it meanwhile. Without a chain, one is started at this
        step's first commit (``rest``: the batch's steps after it). Returned, the commit landed, when it
        is this step's first commit that landed (None otherwise: the steps after are rated as usual)."""
        engine = await self._engine_or_refuse(pool, step.kind, step.ops, out)
        if engine is None:
            if chain is not None:
                self._drop_chain(chain)
            return None
        by_offsets = self.settings.dedup == "offsets"
        loop = asyncio.get_running_loop()
        rate = rate_ops
        optimistic = True
        attempt, delay = 0, 0.0
        while attempt < MAX_ATTEMPTS:
            attempt += 1
            from_ahead = ahead is not None and ahead.engine is engine and ahead.gen is not None
            if ahead is not None and from_ahead:
                gen, checked = cast(str, ahead.gen), False  # the commit checks the event ids (an optimistic step)
                commit, outputs, dead, stats = ahead.result
                dead = ahead.dead.made(dead, self.dead)
                self.metrics.step_seconds.labels("rate").observe(ahead.seconds)
                ahead = None
            else:
                if ahead is not None:
                    self.metrics.rated_ahead.labels("dropped").inc()
                ahead = None
                if chain is not None:  # rated from a rating of this step that is not used
                    self._drop_chain(chain)
                    chain = None
                try:
                    gen, stored, seen, upto, checked = await self._read(pool, step.players, step.ids,
                                                                         step.checked_offsets, optimistic)
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
                    self.executor, partial(rate, places=step.places), engine, step.ops, stored, seen,
                    upto if by_offsets else None, self.dead, self.settings.explain)
                self.metrics.step_seconds.labels("rate").observe(time.perf_counter() - started)
            if stats.repeated and self.settings.explain:
                outputs = await self._explain_again(pool, outputs)
            if not stats.applied and not commit.done_rounds:  # all re-delivered (or dead): nothing to write
                if chain is not None:  # (it holds this step's beliefs as a commit to land: none is sent)
                    self._drop_chain(chain)
                self.rounds.committed(pool, step.rounds)
                out.rated(outputs)
                out.dead.extend(dead)
                self.metrics.duplicates.inc(stats.repeated)
                return None
            commit.offsets = step.offsets
            commit.published = outputs  # the players' history records (stream.state.history)
            if chain is None and self.settings.rate_ahead and attempt == 1:
                chain = self._chain(pool, step.kind, engine, rate, gen, step, commit, rest)
            if chain is not None:
                # the reads it just started go to Redis before the commit (a read sent after the commit's
                # script waits until the script has run), but the commit does not wait for their replies:
                # commits are the run's critical path
                await asyncio.sleep(0)
            meta = self.registry.unsaved.get(pool)
            try:
                try:
                    started = time.perf_counter()
                    new_gen = await self.store.commit(pool, gen, commit, meta, check_ids=not checked)
                    self.metrics.step_seconds.labels("commit").observe(time.perf_counter() - started)
                except BaseException:
                    if from_ahead:  # rated again from what the handler below reads
                        self.metrics.rated_ahead.labels("refused").inc()
                    if chain is not None:  # rated from a state that will not be
                        self._drop_chain(chain)
                        chain = None
                    raise
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
                engine = await self._engine_or_refuse(pool, step.kind, step.ops, out)
                if engine is None:
                    return None
                continue
            except Conflict:
                self.cache.drop(pool)
                self.metrics.conflicts.inc()
                await asyncio.sleep(0.001 * attempt)
                continue
            self.rounds.committed(pool, step.rounds)
            self.cache.committed(pool, gen, new_gen, commit.beliefs)
            if chain is not None:
                chain.landed(new_gen)
            self.registry.unsaved.pop(pool, None)
            self.metrics.duplicates.inc(stats.repeated)
            self.metrics.batches.labels(step.kind).inc()
            out.rated(outputs)
            out.dead.extend(dead)
            if from_ahead:
                self.metrics.rated_ahead.labels("landed").inc()
            return chain
        # another writer keeps winning (two owners during a rebalance): contention, retried later, not a bug
        raise Conflict(f"pool {pool}: {MAX_ATTEMPTS} commit conflicts in a row")

    async def republish(self, pool: str, players: dict[str, tuple[str, int]], out: BatchResult) -> None:
        """The current ratings of ``players`` (-> the event id and time their output cites), published again:
        their events were applied before (a re-delivery) and their outputs may never have reached the topic.
        Same versions as before, or newer; consumers keep the highest."""
        try:
            engine = await self.registry.engine(pool, "rounds")
        except PoolConfigError:  # its events are dead-lettered by the step
            return
        stored = await self.store.beliefs(pool, list(players))
        outputs: list[RatingOutput] = []
        for p, (eid, t) in players.items():
            raw = stored.get(p)
            if raw is None:
                continue
            try:
                r = engine.rating_of(p, raw)
            except RatingError as exc:
                log.warning("pool %r: not re-publishing player %r: %s", pool, p, exc)
                continue
            if r.rounds:
                outputs.append(RatingOutput(pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, eid, t,
                                            engine.system.name))
        out.rated(outputs)

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

    async def _read(self, pool: str, players: dict[str, int], ids: list[str], watermarks: list[str],
                    optimistic: bool) -> tuple[str, dict[str, bytes | None], set[str], dict[str, int], bool]:
        """What a step of ``pool`` starts from: (gen, stored beliefs, applied event ids,
        applied offsets of ``watermarks`` (topic/partition fields), whether those were read).

        When every player is cached (and ``optimistic``), nothing is read: the commit then
        checks the event ids and offsets itself (``check_ids``) and its compare-and-set on
        ``gen`` proves the cached beliefs current. Otherwise one snapshot reads the event ids,
        watermarks and the players not cached; a snapshot at another ``gen`` than the cache's
        replaces it.
        """
        cache = self.cache
        entry = cache.pool(pool)
        missing = entry.missing(players)
        if optimistic and entry.gen is not None and not missing:
            return entry.gen, entry.get_many(players), set(), {}, False
        snap = await self.store.snapshot(pool, missing, ids, watermarks)
        if entry.gen is not None and snap.gen != entry.gen:  # someone else wrote the pool: read everything
            cache.drop(pool)
            snap = await self.store.snapshot(pool, list(players), ids, watermarks)
        if not cache.enabled:
            return snap.gen, snap.beliefs, snap.seen, snap.watermarks, True
        entry = cache.fill(pool, snap.gen, snap.beliefs)  # complete for ``players`` even if the budget drops it
        return snap.gen, entry.get_many(players), snap.seen, snap.watermarks, True

    async def _engine_or_refuse(self, pool: str, kind: str, ops: list[Op], out: BatchResult) -> PoolEngine | None:
        """The pool's engine, or None once ``ops`` are dead-lettered because its stored
        system cannot be built by this version (``_refuse``)."""
        try:
            return await self.registry.engine(pool, kind)
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

@dataclass(slots=True)
class Counts:
    applied: int = 0  # events rated in this batch
    repeated: int = 0  # events skipped as applied before (re-deliveries)


@dataclass(slots=True)
class _Tally:
    """What ``rate_ops`` and ``rate_rounds`` add up over a step's ops, and the rounds' part they share."""

    seen: set[str]  # event ids applied before the step
    done_ids: set[str]  # ``seen`` and those applied in the step so far
    dead_fn: DeadFn
    counts: Counts
    commit: Commit
    dead: list[DeadLetter]
    republish: dict[str, tuple[str, int]]  # players of events applied before (a re-delivery)

    @classmethod
    def of(cls, seen: set[str], dead_fn: DeadFn) -> _Tally:
        return cls(seen, set(seen), dead_fn, Counts(), Commit(), [], {})

    def rate_round(self, engine: PoolEngine, op: RoundOp, stored: Mapping[str, bytes | None], before: bool,
                   columns: bool = False, at: IntArray | None = None,
                   ) -> tuple[Applied, dict[str, Rating] | None] | None:
        """Rate the round of ``op`` on ``stored`` (which the caller updates with it) and note it in the
        commit: its event ids, its round done. None when nothing more is to be done with it: applied
        before (a re-delivery: its players' ratings are published again, ``republished``) or earlier in
        the step, or its rating failed (dead-lettered whole, its round done). ``before``: also the
        summaries of its players before it (``ratings_stored``, else None), read before the rating so
        that the rating reuses what that read decoded. ``at``: the round's players' places in the step
        (``PoolEngine.apply_round``)."""
        ev = op.event
        if ev.event_id in self.done_ids:
            if ev.event_id in self.seen:
                self.counts.repeated += 1
                self.republish.update(dict.fromkeys(ev.players, (ev.event_id, ev.time)))
            return None
        summaries = ratings_stored(engine, stored, ev.players) if before else None
        try:
            applied = engine.apply_round(ev, stored, columns=columns, at=at)
        except RatingError as exc:
            self.dead.append(self.dead_fn(op.msg, f"rating: {exc}", ev.event_id, ev.pool))
            if op.round_done is not None:  # dead-lettered whole: its late results are late, not a new round
                self.commit.done_rounds.append(op.round_done)
            return None
        self.done_ids.add(ev.event_id)
        self.counts.applied += 1
        self.commit.event_ids.append(ev.event_id)
        self.commit.event_ids.extend(i for i in op.extra_ids if i != ev.event_id)
        if op.round_done is not None:
            self.commit.done_rounds.append(op.round_done)
        return applied, summaries

    def republished(self, engine: PoolEngine, stored: Mapping[str, bytes | None],
                    changed: Container[str]) -> list[RatingOutput]:
        """The current ratings of the players of events applied before (``republish``) but for those
        ``changed`` in the step. A batch re-delivered after a crash between the Redis commit and the
        publish may never have had its ratings reach the topic, so they are published again (same
        versions as before, or newer; consumers keep the highest version)."""
        outputs = []
        for p, c in self.republish.items():
            raw = stored.get(p)
            if p in changed or raw is None:
                continue
            try:
                r = engine.rating_of(p, raw)
            except RatingError as exc:  # corrupt since it was applied: its later events dead-letter
                log.warning("pool %r: not re-publishing player %r: %s", engine.pool, p, exc)
                continue
            if not r.rounds:  # only registered (see PoolEngine._changed): never published
                continue
            outputs.append(RatingOutput(engine.pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, c[0], c[1],
                                        engine.system.name))
        return outputs


def rate_ops(engine: PoolEngine, ops: list[Op], stored_in: dict[str, bytes | None], seen: set[str],
             upto: dict[str, int] | None, dead_fn: DeadFn, explain: bool = True, by_columns: bool = True,
             places: Places | None = None) -> tuple[Commit, Sequence[RatingOutput], list[DeadLetter], Counts]:
    """Apply the ops in order to a copy of the snapshot (runs on the numba thread).

    Events already applied (``seen``) or repeated inside the batch are skipped, exactly
    as the embedded pipeline skips them. With ``upto`` (MMR_DEDUP=offsets: the pool's
    applied offset per "topic/partition"), matches are skipped by their message's offset
    instead, and their ids are neither checked nor recorded. ``explain`` (MMR_EXPLAIN): the
    outputs explain each change (``stream.engine.explain``) and the commit stores it.
    ``by_columns``: a step of rounds only, of a system rating them packed, goes through
    ``rate_rounds`` (the same results; False: the general path, for tests comparing them).
    ``places``: where the ops name their players among the step's (``StepInputs.places``), by which
    ``rate_rounds`` finds them (the same results as by name).
    """
    if by_columns and _rounds_by_columns(engine, ops):
        return cast(Rated, rate_rounds(engine, cast("list[RoundOp]", ops), stored_in, seen, dead_fn, explain, places))
    stored: dict[str, bytes | None] = dict(stored_in)
    tally = _Tally.of(seen, dead_fn)
    done_ids, counts, commit, dead, republish = tally.done_ids, tally.counts, tally.commit, tally.dead, tally.republish
    ratings: dict[str, Rating] = {}
    cause: dict[str, tuple[str, int]] = {}
    explainer = Explainer()
    registered = False  # a round stored a newcomer at the prior (rounds 0): not published
    system = engine.system.name
    for op in ops:
        if isinstance(op, RoundOp):
            rated = tally.rate_round(engine, op, stored, explain)
            if rated is None:
                continue
            ev = op.event
            applied, before = rated
            if explain:
                explainer.round(ev, before, applied.ratings, performances_encoded(engine, applied.updates))
            stored.update(applied.updates)
            # per player, but in C (``dict.fromkeys``, ``map``): a loop body per player here was ~10 % of
            # the numba thread's time on the Codeforces history (BENCHMARKS.md, "Service"); the first op's
            # ratings and causes are taken as they are (this call's own dicts), not merged into empty ones
            commit.beliefs.update(applied.updates)
            if ratings:
                ratings.update(applied.ratings)
            else:
                ratings = applied.ratings
            caused = dict.fromkeys(applied.ratings, (ev.event_id, ev.time))
            if cause:
                cause.update(caused)
            else:
                cause = caused
            registered = registered or not all(map(_ROUNDS, applied.ratings.values()))
        else:
            if upto is not None:
                stale = [m.offset <= upto.get(f"{m.topic}/{m.partition}", m.offset - 1) for m in op.sources]
                if not any(stale):  # the usual case: no message applied before
                    batch, msgs = op.batch, op.msgs
                else:
                    old = {id(m) for m, st in zip(op.sources, stale, strict=True) if st}
                    batch, msgs = _keep_matches(op, [id(m) not in old for m in op.msgs], republish)
                    counts.repeated += len(op.batch) - len(batch)
            else:
                ids = op.batch.event_ids
                fresh = set(ids)
                if len(fresh) == len(ids) and done_ids.isdisjoint(fresh):  # the usual case: nothing seen before
                    done_ids |= fresh
                    batch, msgs = op.batch, op.msgs
                else:
                    counts.repeated += sum(1 for e in ids if e in seen)
                    keep = []
                    for e in ids:
                        keep.append(e not in done_ids)
                        done_ids.add(e)
                    batch, msgs = _keep_matches(op, keep, republish, seen)
            if not len(batch):
                continue
            idx = op.index if batch is op.batch and op.index is not None else index_players(batch)
            before = ratings_stored(engine, stored, idx.players) if explain else None
            try:
                parts = [(batch, idx, before, engine.apply_matches(batch, stored, idx))]
            except RatingError:
                parts = []  # find the culprit(s): one match at a time is the same sequential meaning
                for i in range(len(batch)):
                    one = MatchBatch(batch.pool)
                    one.add(MatchEvent(event_id=batch.event_ids[i], pool=batch.pool, time=batch.times[i],
                                       a=batch.a[i], b=batch.b[i], score=batch.scores[i]))
                    one_idx = index_players(one)
                    one_before = ratings_stored(engine, stored, one_idx.players) if explain else None
                    try:
                        res = engine.apply_matches(one, stored, one_idx)
                    except RatingError as exc:
                        dead.append(dead_fn(msgs[i], f"rating: {exc}", batch.event_ids[i], batch.pool))
                        continue
                    stored.update(res.updates)
                    parts.append((one, one_idx, one_before, res))
            for part, part_idx, part_before, applied in parts:
                if explain:
                    explainer.matches(part, part_idx, part_before, applied.ratings)
                stored.update(applied.updates)
                commit.beliefs.update(applied.updates)
                ratings.update(applied.ratings)
                counts.applied += len(part)
                if upto is None:
                    commit.event_ids.extend(part.event_ids)
                cause.update(_last_match_per_player(part, part_idx))
    outputs = tally.republished(engine, stored, ratings)
    if ratings:  # one output per changed player, built by columns (C-level zip/map, no loop body per player)
        players = list(ratings)
        rating, mu, sigma, rounds = zip(*ratings.values(), strict=True)
        commit.scores.update(zip(players, rating, strict=True))
        eids, times = zip(*map(cause.__getitem__, players), strict=True)
        texts = list(map(explainer.of.get, players)) if explain else None
        made = list(rows_of_columns(RatingOutput, repeat(engine.pool), players, rating, mu, sigma, rounds, rounds,
                                    eids, times, repeat(system), repeat(None) if texts is None else texts))
        if registered:  # players a round only stored at their prior (rounds 0): not published
            made = [o for o in made if o.rounds]
        if texts is not None:  # (a player of rounds 0 has no explanation: no record)
            commit.changes = change_records(players, rounds, eids, times, texts)
        outputs.extend(made)
    return commit, outputs, dead, counts


def _rounds_by_columns(engine: PoolEngine, ops: list[Op]) -> bool:
    """Whether a step is rounds only, without teams, of a pool whose rounds take the packed path: what
    ``rate_rounds`` rates by columns in one arena."""
    return engine.rounds_packed and all(isinstance(op, RoundOp) and op.event.teams is None for op in ops)


def rate_ops_ahead(engine: PoolEngine, ops: list[Op], stored_in: dict[str, bytes | None], seen: set[str],
                   upto: dict[str, int] | None, dead_fn: DeadFn, explain: bool = True,
                   places: Places | None = None) -> Rated | StepEnd[Rated]:
    """``rate_ops`` of a step rated ahead (stream.service.ahead): a step of rounds by columns comes back
    with its beliefs encoded and the rest of its end to make (``StepEnd``), which the chain makes on
    another thread while the numba thread rates the next step from those beliefs; any other step whole."""
    if _rounds_by_columns(engine, ops):
        return rate_rounds(engine, cast("list[RoundOp]", ops), stored_in, seen, dead_fn, explain, places, split=True)
    return rate_ops(engine, ops, stored_in, seen, upto, dead_fn, explain, places=places)


@dataclass(slots=True)
class _Block:
    """One rated round of ``rate_rounds``: its players and their new ratings as columns, what
    their outputs cite, and their explanations (as numbers and a template, or as texts)."""

    players: list[str]
    rating: FloatArray
    mu: FloatArray
    sigma: FloatArray
    rounds: IntArray
    event_id: str
    time: int
    template: bytes = b""
    round_id: str = ""  # (explained by columns)
    numbers: FloatArray | None = None  # ``round_numbers`` (explained by columns)
    texts: list[bytes | None] | None = None  # per player (explained from the summaries)
    idx: IntArray | None = None  # the players' indices in the step's arena (rated there)


def rate_rounds(engine: PoolEngine, ops: list[RoundOp], stored_in: dict[str, bytes | None], seen: set[str],
                dead_fn: DeadFn, explain: bool = True, places: Places | None = None, split: bool = False,
                ) -> Rated | StepEnd[Rated]:
    """``rate_ops`` of a step of rounds only, by columns: the same commit, outputs (in the same
    order) and dead letters, byte for byte (tests/unit/test_step_columns.py).

    Why: a step of the Codeforces history is ~20 rounds of ~3,000 players, and a player's output
    and explanation show only their last round of the step. Each round keeps its new ratings as
    the packed path's columns (``Applied.change``: no ``Rating`` per player and round), and its
    explanations as numbers; once, at the end, each player's last round is found (one dict), and
    only those rows become outputs and explanation texts. The outputs stay columns
    (``RatingColumns``: their messages and ``:chg`` records are joined from the columns' texts, no
    tuple per rating), and the texts one column (``round_text_column``), when every round was
    explained by columns. A round the packed path cannot give as columns keeps its summaries'
    values and explanations.

    The beliefs are held as the embedded replay holds them, in one arena (``PoolEngine.held_rounds``,
    a ``TaggedPool``): a player's stored value is read once, each round is gathered by index and its
    output taken back in one copy, and each changed player's value is encoded once, at the end, for
    the commit (a player is in ~4.5 rounds of a step of the Codeforces history: a ``bytes`` per
    player and round to read, cut and store was more of the step's time than the kernel's).

    The commit comes back sealed (``Commit.seal``): its blobs, the players' written from the arena,
    are made here on the numba thread, so the event loop sends it as soon as the commit before it
    lands instead of building tens of MB of arguments first (BENCHMARKS.md, "Service").

    With ``places`` (the step's players numbered by the event loop as it planned the step), each
    round's players are found in the arena by their places, not looked up by name one by one."""
    held = engine.held_rounds(stored_in, None if places is None else places.order)
    stored: dict[str, bytes | None] | TaggedPool = dict(stored_in) if held is None else held
    tally = _Tally.of(seen, dead_fn)
    commit, dead, counts = tally.commit, tally.dead, tally.counts
    blocks: list[_Block] = []
    op_places: list[IntArray | None] = [None] * len(ops) if places is None else places.at
    for op, op_at in zip(ops, op_places, strict=True):
        rated = tally.rate_round(engine, op, stored, False, columns=True, at=op_at)
        if rated is None:
            continue
        ev = op.event
        applied = rated[0]
        ch = applied.change
        if ch is not None:
            block = _Block(ev.players, ch.rating, ch.mu, ch.sigma, ch.rounds, ev.event_id, ev.time)
            if explain:
                block.template = round_template(ev.round_id, ch.performance is not None)
                block.round_id = ev.round_id
                block.numbers = round_numbers(ch)
        elif not applied.ratings:  # a round that changes nothing and has no newcomer (ratings and updates alike)
            continue
        else:  # its summaries, and its explanations as ``Explainer.round`` writes them
            players = list(applied.ratings)
            r_col, mu_col, sigma_col, rounds_col = zip(*applied.ratings.values(), strict=True)
            wide = not all(abs(x) < 2**62 for x in rounds_col)  # a corrupt belief's count: kept as Python ints
            block = _Block(players, np.array(r_col, dtype=np.float64), np.array(mu_col, dtype=np.float64),
                           np.array(sigma_col, dtype=np.float64),
                           np.array(rounds_col, dtype=object if wide else np.int64), ev.event_id, ev.time)
            if explain:
                one = Explainer()
                one.round(ev, ratings_stored(engine, stored, players), applied.ratings,
                          performances_encoded(engine, applied.updates))
                block.texts = list(map(one.of.get, players))
        blocks.append(block)
        # (a round's updates are its ratings' players: the commit's, below)
        if held is not None and isinstance(applied.updates, TaggedFlat) and applied.updates.pool is held.pool:
            block.idx = held.put(applied.updates)
        else:
            stored.update(applied.updates)
    if not blocks:
        return commit, tally.republished(engine, stored, ()), dead, counts
    # each player's last row of all blocks' (``at``), players in the order of their first row
    players, at, held_at = _last_rows(blocks, held)
    outputs: Sequence[RatingOutput] = tally.republished(engine, stored, set(players) if tally.republish else ())
    arena: tuple[FloatArray, IntArray] | None = None
    if held is None:
        values: Iterable[bytes] = map(cast("dict[str, bytes]", stored).__getitem__, players)
    else:
        values, flat, offsets = engine.encode_held(held, players, held_at)
        arena = (flat, offsets)  # the arena's gather buffer: nothing gathers from ``held`` after this
        held.release()  # (the gather buffer is an array of its own, not a view of the arena)
    commit.beliefs = dict(zip(players, values, strict=True))
    tag = b"" if held is None else held.tag
    end = partial(_rounds_end, engine, blocks, players, at, commit, outputs, dead, counts, arena, tag, explain)
    return StepEnd(commit.beliefs, end) if split else end()


def _rounds_end(engine: PoolEngine, blocks: list[_Block], players: list[str], at: IntArray, commit: Commit,
                outputs: Sequence[RatingOutput], dead: list[DeadLetter], counts: Counts,
                arena: tuple[FloatArray, IntArray] | None, tag: bytes, explain: bool) -> Rated:
    """The end of ``rate_rounds`` once its beliefs are encoded (``commit.beliefs``): the outputs by columns,
    their explanations and ``:chg`` records, the commit's rows. Nothing here reads the step's arena but
    the encoded beliefs' buffer (``arena``), so the next step may be rated meanwhile (``StepEnd``)."""
    sizes = [len(b.players) for b in blocks]
    of_block = np.repeat(np.arange(len(blocks)), sizes)[at]
    rating = np.concatenate([b.rating for b in blocks])[at].tolist()
    commit.scores.update(zip(players, rating, strict=True))
    rounds = np.concatenate([b.rounds for b in blocks])[at]
    shown = np.flatnonzero(rounds)  # rounds 0: only registered, not published
    if len(shown) < len(players):
        players, rating = [players[i] for i in shown.tolist()], [rating[i] for i in shown.tolist()]
        at, of_block, rounds = at[shown], of_block[shown], rounds[shown]
    bl = of_block.tolist()
    eids = list(map([b.event_id for b in blocks].__getitem__, bl))
    times = list(map([b.time for b in blocks].__getitem__, bl))
    ver = rounds.tolist()
    mu = np.concatenate([b.mu for b in blocks])[at]
    sigma = np.concatenate([b.sigma for b in blocks])[at]
    texts = _block_texts(blocks, at, of_block, bl, sizes) if explain else None
    # by columns: no tuple per rating unless something reads them so; their messages written by columns
    columns = RatingColumns(engine.pool, engine.system.name, players, rating, mu, sigma, ver, ver, eids, times, texts)
    if texts is not None:
        commit.changes = _change_records_of(columns)
    outputs = [*outputs, *columns] if outputs else columns
    if arena is None:
        commit.seal()
    else:
        commit.seal(*arena, tag=tag)
    return commit, outputs, dead, counts


def _last_rows(blocks: list[_Block], held: TaggedPool | None) -> tuple[list[str], IntArray, IntArray | None]:
    """Each player's last row of all ``blocks``' rows (``at``), the players in the order of their
    first row, and (when every block was rated in ``held``'s arena) their indices there.

    With the arena's indices this is two ``ufunc.at`` passes over the rows and one name per
    player; otherwise one dict of every row's player (a dict keeps a key's first place and its
    last value)."""
    if held is not None and all(b.idx is not None for b in blocks):
        idx = np.concatenate([cast("IntArray", b.idx) for b in blocks])
        rows = np.arange(idx.shape[0], dtype=np.int64)
        n = len(held.pool.names)
        first = np.full(n, idx.shape[0], dtype=np.int64)
        np.minimum.at(first, idx, rows)
        last = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last, idx, rows)
        rated = np.flatnonzero(last >= 0)
        order = rated[np.argsort(first[rated], kind="stable")]
        return list(map(held.pool.names.__getitem__, order.tolist())), last[order], order
    by_player = dict(zip(itertools.chain.from_iterable(b.players for b in blocks), itertools.count()))
    return list(by_player), np.fromiter(by_player.values(), dtype=np.int64, count=len(by_player)), None


def _block_texts(blocks: list[_Block], at: IntArray, of_block: IntArray, bl: list[int], sizes: list[int],
                 ) -> list[bytes | None] | Column:
    """The explanation of each of the rows ``at`` (of all blocks', in order; ``of_block``, as a list
    ``bl``: each one's block): a column rendered from the numbers when every block was explained by
    columns (``round_text_column``), else one each, as the blocks have them."""
    if all(b.numbers is not None for b in blocks):
        numbers = np.concatenate([cast("FloatArray", b.numbers) for b in blocks])[at]
        return round_text_column([orjson.dumps(b.round_id) for b in blocks], of_block, numbers)
    starts = np.cumsum([0, *sizes]).tolist()
    out: list[bytes | None] = []
    for row, k in zip(at.tolist(), bl, strict=True):  # rare (a round off the packed path): row by row
        b = blocks[k]
        i = row - starts[k]
        if b.numbers is not None:
            out.append(round_texts([b.template], b.numbers[i:i + 1])[0])
        else:
            out.append(cast("list[bytes | None]", b.texts)[i])
    return out


def _change_records_of(columns: RatingColumns) -> Mapping[str, bytes]:
    """``change_records`` of a step's ratings by columns: by columns where their explanations are a
    column and their versions and times fit int64 (``RatingColumns.records``), else one by one."""
    texts = columns.explain
    if isinstance(texts, tuple):
        try:
            return columns.records()
        except OverflowError:
            texts = split(texts)
    return change_records(columns.players, columns.version, columns.event_ids, columns.times,
                          cast("Sequence[bytes | None]", texts))


def change_records(players: Sequence[str], versions: Sequence[int], event_ids: Sequence[str],
                   times: Sequence[int], texts: Sequence[bytes | None]) -> dict[str, bytes]:
    """Per published player (by columns), the explanation of their latest change as the commit
    stores it (``RedisStore`` ``:chg``): ``orjson.dumps([version, event_id, time, {the
    explanation's fields}])`` byte for byte, around the explanation's JSON text as the message
    carries it (not encoded again); each distinct event id is encoded once (a round's players
    share one). A player without an explanation (None) has no record."""
    if None in texts:
        kept = [i for i, x in enumerate(texts) if x is not None]
        players, versions, event_ids, times = ([players[i] for i in kept], [versions[i] for i in kept],
                                               [event_ids[i] for i in kept], [times[i] for i in kept])
        texts = [texts[i] for i in kept]
    eid_text = {e: orjson.dumps(e) for e in set(event_ids)}
    return dict(zip(players, map(b"[%d,%b,%d,%b]".__mod__,
                                 zip(versions, map(eid_text.__getitem__, event_ids), times, texts, strict=True)),
                    strict=True))


def _last_match_per_player(batch: MatchBatch, index: PlayerIndex | None = None) -> dict[str, tuple[str, int]]:
    """Each player's last match in the batch as (event id, time): what their output cites."""
    idx = index if index is not None else index_players(batch)
    last = idx.last_match().tolist()
    ids, times = batch.event_ids, batch.times
    cited = zip(map(ids.__getitem__, last), map(times.__getitem__, last), strict=True)
    return dict(zip(idx.players, cited, strict=True))


def _keep_matches(op: MatchOp, keep: list[bool], republish: dict[str, tuple[str, int]],
                  seen: set[str] | None = None) -> tuple[MatchBatch, list[Message]]:
    """The matches of ``op`` marked in ``keep`` (in order); the players of the others go to
    ``republish`` -- all of them, or with ``seen`` only those of events applied before this
    batch (a repeat inside the batch is not a re-delivery)."""
    src = op.batch
    batch = MatchBatch(src.pool)
    msgs: list[Message] = []
    for i, k in enumerate(keep):
        eid = src.event_ids[i]
        if not k:
            if seen is None or eid in seen:
                republish[src.a[i]] = republish[src.b[i]] = (eid, src.times[i])
            continue
        batch.add(MatchEvent(event_id=eid, pool=batch.pool, time=src.times[i], a=src.a[i], b=src.b[i],
                             score=src.scores[i]))
        msgs.append(op.msgs[i])
    return batch, msgs


