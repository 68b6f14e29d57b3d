"""The worker's logic without Faust: raw Kafka messages in; Redis commits, rating outputs and dead letters out.

Why separate from the Faust agents: this is everything that must be right (validation,
ordering, idempotence, the atomic step) and it is testable against a real Redis without a
broker; the agents in stream.service.agents only move bytes between topics and here.

Per take batch:
1. every message is parsed and validated (``decode_event``); anything wrong becomes a
   dead letter with the original bytes, reason and source topic/partition/offset;
2. events are grouped per pool, keeping message order, into *ops*: a run of consecutive
   matches is one MatchBatch, a round is one op, ``round_result``/``round_completed``
   go through the RoundAssembler (its state mirrored in Redis) and become a round op
   when complete;
3. per pool: one read (a Lua script: commit token, which event ids were applied already,
   beliefs), the rating math on the single numba thread, one atomic commit (Lua) that
   writes beliefs + leaderboard + event ids, retried from the read on a conflict;
4. the caller publishes the returned outputs and dead letters, and only then acks.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from concurrent.futures import Executor
from dataclasses import dataclass, field
from itertools import repeat
from typing import Any

import orjson
import redis.exceptions

from stream.engine.pool import PoolConfigError, PoolEngine
from stream.events.model import MatchBatch, MatchEvent, PlayerIndex, RatingOutput, RoundEvent, index_players
from stream.events.rounds import RoundAssembler
from stream.events.validate import MATCH_LISTS, InvalidEvent, decode_event, fast_matches, parse_json
from stream.ratings import make_system
from stream.ratings.base import Rating, RatingError
from stream.service.config import PoolConfig, Settings
from stream.service.metrics import Metrics, reason_label
from stream.state.cache import BeliefCache
from stream.state.redis_store import AlreadyApplied, Commit, Conflict, MetaConflict, RedisStore

log = logging.getLogger(__name__)

MAX_ATTEMPTS = 20


@dataclass(slots=True)
class Message:
    """One input record: where it came from and its bytes.

    ``decoded``: what ``Processor.predecode`` made of it (``(type, value)`` or the
    InvalidEvent), so that ``process`` need not decode it again. ``timestamp``: the Kafka
    record's timestamp (seconds since the epoch; the producer's clock unless the topic uses
    LogAppendTime), for ``mmr_input_age_seconds``."""

    topic: str
    partition: int
    offset: int
    value: bytes
    decoded: tuple[str, Any] | InvalidEvent | None = None
    timestamp: float | None = None


@dataclass(slots=True)
class DeadLetter:
    reason: str
    topic: str = ""
    partition: int = -1
    offset: int = -1
    original: bytes = b""
    event_id: str | None = None
    pool: str | None = None

    def key(self) -> bytes | None:
        return self.pool.encode() if self.pool else None

    def encode(self) -> bytes:
        """JSON envelope; the original bytes as text when they are UTF-8, always as base64."""
        import base64

        try:
            text: str | None = self.original.decode("utf-8")
        except UnicodeDecodeError:
            text = None
        return orjson.dumps({
            "type": "dead_letter", "reason": self.reason, "topic": self.topic, "partition": self.partition,
            "offset": self.offset, "event_id": self.event_id, "pool": self.pool, "original": text,
            "original_b64": base64.b64encode(self.original).decode(), "time": int(time.time() * 1000),
        })


@dataclass(slots=True)
class BatchResult:
    outputs: list[RatingOutput] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)


@dataclass(slots=True)
class _RoundOp:
    event: RoundEvent
    msg: Message
    extra_ids: list[str] = field(default_factory=list)  # result ids of an assembled round
    round_done: str | None = None  # round id to mark done (assembled rounds)


@dataclass(slots=True)
class _MatchOp:
    batch: MatchBatch
    msgs: list[Message]  # per match
    sources: list[Message]  # the distinct messages, in order
    index: PlayerIndex | None = None  # built once the batch is final (after merging)


Op = _RoundOp | _MatchOp


@dataclass(slots=True)
class _Plan:
    """One take batch decoded and grouped (``Processor._plan``)."""

    t0: float
    n_msgs: int
    out: BatchResult = field(default_factory=BatchResult)
    ops: dict[str, list[Op]] = field(default_factory=dict)
    results: dict[str, list[tuple[str, dict[str, Any], Message]]] = field(default_factory=dict)


@dataclass(slots=True, eq=False)
class _Ahead:
    """One pool's batch rated ahead of its commit (``Processor._speculate``).

    ``base``: the ``gen`` it was rated at, or the batch ahead of it whose beliefs it was
    rated from; ``new_gen`` is set once it landed exactly as rated."""

    pool: str
    ops: list[Op]
    base: str | _Ahead
    commit: Commit
    outputs: list[RatingOutput]
    dead: list[DeadLetter]
    stats: _Counts
    new_gen: int | None = None


@dataclass(slots=True)
class _Chain:
    """A pool's batches rated ahead and not yet settled: the last one, and the beliefs they
    write (what the next batch of the pool is rated from, over the cache)."""

    last: _Ahead | None = None
    overlay: dict[str, bytes] = field(default_factory=dict)
    broken: bool = False  # one did not land as rated: until the chain drains, batches wait their turn


_ABSENT: Any = object()


def rating_key(pool: str, player: str) -> bytes:
    """Output key: unambiguous for any pool/player strings; compaction keeps the last per player."""
    return orjson.dumps([pool, player])


class PoolRegistry:
    """Which system rates which pool: Redis meta (fixed at first commit) > config > defaults."""

    def __init__(self, settings: Settings, store: RedisStore) -> None:
        self.settings = settings
        self.store = store
        self.engines: dict[str, PoolEngine] = {}
        self.unsaved: dict[str, dict[str, Any]] = {}  # pools whose meta is not in Redis yet

    def forget(self, pool: str) -> None:
        self.engines.pop(pool, None)
        self.unsaved.pop(pool, None)

    def allowed(self, pool: str) -> bool:
        return not self.settings.pools or pool in self.settings.pools

    async def engine(self, pool: str, kind: str) -> PoolEngine:
        eng = self.engines.get(pool)
        if eng is not None:
            return eng
        stored = await self.store.meta(pool)
        if stored is None:
            cfg = self.settings.system_for(pool, kind)  # checked when the worker started
            eng = self.engines[pool] = PoolEngine(pool, make_system(cfg.system, cfg.params))
            self.unsaved[pool] = {"system": cfg.system, "params": cfg.params}
            return eng
        cfg = PoolConfig(stored["system"], stored["params"])
        wanted = self.settings.pools.get(pool)
        if wanted is not None and (wanted.system, wanted.params) != (cfg.system, cfg.params):
            log.warning("pool %s: Redis holds %s %s; ignoring configured %s %s", pool, cfg.system,
                        cfg.params, wanted.system, wanted.params)
        eng = self.engines[pool] = PoolEngine.from_meta(pool, cfg.system, cfg.params)
        return eng


class Processor:
    """Stateless apart from the round assembler (mirrored in Redis) and caches.

    Overlapped commits (``Settings.overlap_commits``, MMR_OVERLAP_COMMITS): a pool's commit
    is a round trip in which Redis does most of the work (with ``MMR_DEDUP=ids`` it records
    every event id: ~90 ms of a 50k-match batch, about as long as rating it). So a match-only
    batch whose pools are loaded and whose players are all cached is rated at once, from the
    cache overlaid with the beliefs of the batches still committing (``_Chain.overlay``), and
    its commit then waits for theirs. It commits at the ``gen`` the batch before it reached
    only if that batch landed exactly as rated; otherwise (a re-delivered event, another
    writer, another system) it is rated again from a read, like any batch, and so is every
    batch rated on top of it. Redis therefore only ever holds states of one-at-a-time
    processing, and batches commit, publish and ack in input order. Anything else (rounds,
    round results, an unknown player) waits until every batch before it is committed.

    Opt-in, because measured in the worker on 2 vCPUs (BENCHMARKS.md, "Service", seventh
    session) it was slower: most of a batch's work holds the GIL, so only Redis's own time
    overlaps, and since the rate stage no longer waits for the commit, fewer take batches
    queue and merge meanwhile; smaller batches write each player more often per match (with
    10,000 players, a 50k-match batch writes each once). It can pay where per-batch work does
    not shrink with batch size or a commit's round trip is long (a remote Redis); measure.
    """

    def __init__(self, settings: Settings, store: RedisStore, executor: Executor,
                 metrics: Metrics | None = None) -> None:
        self.settings = settings
        self.store = store
        self.executor = executor
        self.metrics = metrics or Metrics()
        self.registry = PoolRegistry(settings, store)
        self.assembler = RoundAssembler(max_participants=settings.max_participants)
        self._loaded_rounds: set[tuple[str, str]] = set()
        #: event ids accepted into each open round (recorded as applied when the round is rated)
        self._round_ids: dict[tuple[str, str], list[str]] = {}
        self._pool_locks: dict[str, asyncio.Lock] = {}
        #: beliefs as last read or committed (exact while the pool's gen is unchanged; see stream.state.cache)
        self.cache = BeliefCache(settings.belief_cache_mb << 20)
        self._tail: asyncio.Future[BatchResult] | None = None  # the batch started last
        self._started: deque[asyncio.Future[BatchResult]] = deque()  # batches rated ahead, maybe not committed
        #: batches rated ahead that may be committing while the next one is rated. Measured
        #: (BENCHMARKS.md, "Service", seventh session): unbounded, the rate stage no longer
        #: waited for Redis, merged less, and ``match_columns`` got slower
        self.max_ahead = 1
        self._starting = asyncio.Lock()
        self._chains: dict[str, _Chain] = {}  # per pool: batches rated ahead of their commit

    # --- decoding ------------------------------------------------------------------
    def _decode(self, msg: Message) -> tuple[str, Any]:
        obj = parse_json(msg.value)
        batch = fast_matches(obj)
        if batch is not None:  # the hot path: a valid match/match_batch straight into columns
            if not self.registry.allowed(batch.pool):
                raise InvalidEvent(f"unknown pool {batch.pool!r}", obj.get("event_id"))
            return obj["type"], batch
        etype, value = decode_event(obj)
        pool = obj["pool"]
        if not self.registry.allowed(pool):
            raise InvalidEvent(f"unknown pool {pool!r}", obj.get("event_id"))
        if etype == "match" or etype in MATCH_LISTS:  # unusual but valid (e.g. an integral float time): same columns
            batch = MatchBatch(pool)
            for m in [value] if etype == "match" else value:
                batch.add(m)
            return etype, batch
        if etype == "round" and len(value.players) > self.settings.max_participants:
            raise InvalidEvent(f"field standings: {len(value.players)} participants exceed the maximum "
                               f"{self.settings.max_participants}", value.event_id)
        if etype == "round_completed" and obj["participants"] > self.settings.max_participants:
            raise InvalidEvent(f"field participants: {obj['participants']} exceed the maximum "
                               f"{self.settings.max_participants}", obj["event_id"])
        return etype, value

    def predecode(self, msgs: Sequence[Message]) -> None:
        """Decode and validate ``msgs`` ahead of ``process`` (which then skips that step).

        Why: the worker calls this as it takes messages, while the previous batch waits on
        the numba thread or on Redis -- decoding needs no state, so it need not wait its
        turn in the batch pipeline (~1.2 µs a match of ``match_batch``, ~0.6 µs of
        ``match_columns``). Never raises: anything unexpected is left to ``process``.
        """
        for msg in msgs:
            try:
                msg.decoded = self._decode(msg)
            except InvalidEvent as exc:
                msg.decoded = exc
            except Exception:  # process() decodes it again and handles the error
                msg.decoded = None

    def _dead(self, msg: Message, reason: str, event_id: str | None = None, pool: str | None = None) -> DeadLetter:
        self.metrics.dead_letters.labels(reason_label(reason)).inc()
        return DeadLetter(reason, msg.topic, msg.partition, msg.offset, msg.value, event_id, pool)

    async def _refuse(self, pool: str, ops: list[Op], exc: PoolConfigError) -> list[DeadLetter]:
        """Dead letters for ``ops`` of a pool whose stored system this version cannot build:
        one per source message (each carries its original bytes). Assembled rounds are marked
        done, as a timed-out round is, so that their late results are not collected again."""
        msgs: dict[tuple[str, int, int], tuple[Message, str | None]] = {}
        for op in ops:
            if isinstance(op, _RoundOp):
                if op.round_done is not None:
                    await self.store.expire_round(pool, op.round_done)
                    self._loaded_rounds.discard((pool, op.round_done))
                msgs.setdefault((op.msg.topic, op.msg.partition, op.msg.offset), (op.msg, op.event.event_id))
            else:
                for m in op.sources:
                    msgs.setdefault((m.topic, m.partition, m.offset), (m, None))
        log.error("%s; dead-lettering %d message(s)", exc, len(msgs))
        return [self._dead(m, f"pool config: {exc}", eid, pool) for m, eid in msgs.values()]

    async def _engine_or_refuse(self, pool: str, kind: str, ops: list[Op], out: BatchResult) -> PoolEngine | None:
        """The pool's engine, or None once ``ops`` are dead-lettered because its stored
        system cannot be built by this version (``_refuse``)."""
        try:
            return await self.registry.engine(pool, kind)
        except PoolConfigError as exc:
            out.dead.extend(await self._refuse(pool, ops, exc))
            return None

    # --- the batch -----------------------------------------------------------------
    async def process(self, msgs: Sequence[Message]) -> BatchResult:
        """One take batch (any mix of input topics and pools), committed when this returns.

        Runs after every batch started before it; errors propagate (the worker uses
        ``start(..., safe=True)``, which retries and dead-letters instead)."""
        return await (await self.start(msgs, safe=False))

    async def start(self, msgs: Sequence[Message], safe: bool = True) -> asyncio.Future[BatchResult]:
        """Begin one take batch; the returned future resolves once it is committed.

        Batches are committed strictly in the order they were started. A match-only batch
        whose pools and players are all cached is rated *now*, from the beliefs the batches
        still committing will write, and its commit waits for theirs (see "Overlapped
        commits" in the class docstring); any other batch first waits for every batch before
        it and is then rated and committed as one step. With ``safe``, the future never
        fails on input or Redis errors (``process_safely``).
        """
        msgs = list(msgs)
        async with self._starting:  # one at a time, so that ``_tail`` is the order of starts
            # at most ``max_ahead`` batches commit while the next is rated: waiting here lets the
            # pipeline merge what queued meanwhile (a bigger batch writes each player once)
            started = self._started
            while started and (started[0].done() or len(started) > self.max_ahead):
                await _settled(started.popleft())
            prev = self._tail
            plan: _Plan | None = None
            ahead = None
            try:
                plan = self._plan(msgs)
            except Exception:
                if not safe:
                    raise
                log.exception("preparing the batch failed; retrying it after the batches before it")
                plan, ahead = None, None
            if ahead is not None and plan is not None:
                task = asyncio.ensure_future(self._land(prev, ahead, plan, msgs, safe))
                self._tail = task
                started.append(task)
                return task
            task = asyncio.ensure_future(self._after(prev, plan, msgs, safe))
            self._tail = task
            await asyncio.wait([task])  # a barrier: the next batch starts from this one's state
            return task

    async def _after(self, prev: asyncio.Future[BatchResult] | None, plan: _Plan | None, msgs: list[Message],
                     safe: bool) -> BatchResult:
        """Rate and commit ``plan`` once every batch started before it is committed."""
        await _settled(prev)
        if plan is None:
            return await self.process_safely(msgs)
        try:
            return await self._apply_plan(plan)
        except Exception:
            if not safe:
                raise
            return await self.process_safely(msgs)

    async def process_safely(self, msgs: Sequence[Message]) -> BatchResult:
        """Process one batch now; never lets an input error escape (the worker must not die on input).

        Redis being unreachable is retried with back-off; any other error is retried message
        by message, and a message that still fails is dead-lettered. Called only from inside
        the chain of started batches (it does not wait for the others)."""
        delay = 0.1
        while True:
            try:
                return await self._apply_plan(self._plan(msgs))
            except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError) as exc:
                log.warning("Redis unavailable (%r); retrying the batch in %.1f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, 5.0)
            except Exception:
                if len(msgs) == 1:
                    m = msgs[0]
                    log.exception("internal error on %s/%s@%s; dead-lettered", m.topic, m.partition, m.offset)
                    return BatchResult(dead=[DeadLetter("internal error (see worker log)", m.topic, m.partition,
                                                        m.offset, m.value)])
                log.exception("batch failed; retrying message by message")
                total = BatchResult()
                for m in msgs:
                    one = await self.process_safely([m])
                    total.outputs += one.outputs
                    total.dead += one.dead
                return total

    def _plan(self, msgs: Sequence[Message]) -> _Plan:
        """Decode and group one take batch: ops per pool (message order kept), round results
        per pool, and the dead letters of invalid messages."""
        plan = _Plan(time.perf_counter(), len(msgs))
        out, ops, results = plan.out, plan.ops, plan.results
        topics: dict[str, int] = {}
        types: dict[str, int] = {}
        for msg in msgs:
            topics[msg.topic] = topics.get(msg.topic, 0) + 1
            decoded, msg.decoded = msg.decoded, None  # consumed: a retry decodes again
            try:
                if decoded is None:
                    decoded = self._decode(msg)
                elif isinstance(decoded, InvalidEvent):
                    raise decoded
                etype, value = decoded
            except InvalidEvent as exc:
                pool = _peek_pool(msg.value)
                out.dead.append(self._dead(msg, exc.reason, exc.event_id, pool))
                continue
            types[etype] = types.get(etype, 0) + 1
            if etype == "match" or etype in MATCH_LISTS:
                batch: MatchBatch = value
                if etype != "match":
                    types["match"] = types.get("match", 0) + len(batch)
                pool_ops = ops.setdefault(batch.pool, [])
                prev = pool_ops[-1] if pool_ops else None
                if isinstance(prev, _MatchOp):  # consecutive matches of a pool: one kernel call (see _merge_matches)
                    pb = prev.batch
                    pb.event_ids += batch.event_ids
                    pb.a += batch.a
                    pb.b += batch.b
                    pb.scores += batch.scores
                    pb.times += batch.times
                    prev.msgs += [msg] * len(batch)
                    prev.sources.append(msg)
                else:
                    pool_ops.append(_MatchOp(batch, [msg] * len(batch), [msg]))
                continue
            if etype == "round":
                ops.setdefault(value.pool, []).append(_RoundOp(value, msg))
            else:
                results.setdefault(value["pool"], []).append((etype, value, msg))
        for topic, n in topics.items():  # one labelled inc per batch, not per message (~2 µs each)
            self.metrics.messages_in.labels(topic).inc(n)
        for etype, n in types.items():
            self.metrics.events_in.labels(etype).inc(n)
        return plan

    async def _apply_plan(self, plan: _Plan) -> BatchResult:
        """Assemble rounds, then the atomic step per pool (all pools at once)."""
        out, ops = plan.out, plan.ops
        for pool, items in plan.results.items():
            await self._assemble(pool, items, ops.setdefault(pool, []), out)
        await asyncio.gather(*(self._apply_pool(pool, pool_ops, out) for pool, pool_ops in ops.items() if pool_ops))
        return self._finished(plan)

    def _finished(self, plan: _Plan) -> BatchResult:
        self.metrics.batch_latency.observe(time.perf_counter() - plan.t0)
        self.metrics.batch_messages.observe(plan.n_msgs)
        self.metrics.ratings_out.inc(len(plan.out.outputs))
        return plan.out

    # --- overlapped commits ------------------------------------------------------------
    async def _speculate(self, plan: _Plan) -> list[_Ahead] | None:
        """Rate a match-only batch now, on top of the batches still committing; None when
        it cannot be (rounds or round results, a pool not loaded yet or whose last batch
        ahead did not land, a player not cached): the batch then waits its turn."""
        if plan.results or not self.cache.enabled:
            return None
        todo = []
        for pool, pool_ops in plan.ops.items():
            ops = _merge_matches(pool_ops)
            engine = self.registry.engines.get(pool)
            chain = self._chains.get(pool)
            if len(ops) != 1 or not isinstance(ops[0], _MatchOp) or engine is None or (chain and chain.broken):
                return None
            op = ops[0]
            op.index = index_players(op.batch)
            entry = self.cache.pool(pool)
            base: str | _Ahead
            overlay: dict[str, bytes]
            if chain is not None and chain.last is not None:
                base, overlay = chain.last, chain.overlay
            elif entry.gen is not None:
                base, overlay = entry.gen, {}
            else:
                return None
            cached = entry.values
            stored: dict[str, bytes | None] = {}
            for p in op.index.players:
                v = overlay.get(p, _ABSENT)
                if v is _ABSENT:
                    v = cached.get(p, _ABSENT)
                    if v is _ABSENT:
                        return None
                stored[p] = v
            todo.append((pool, engine, ops, stored, base))
        by_offsets = self.settings.dedup == "offsets"
        loop = asyncio.get_running_loop()
        ahead = []
        for pool, engine, ops, stored, base in todo:
            commit, outputs, dead, stats = await loop.run_in_executor(
                self.executor, _compute, engine, ops, stored, set(), {} if by_offsets else None, self._dead)
            offsets: dict[str, tuple[int | None, int]] = {}
            for msg in ops[0].sources:  # type: ignore[union-attr]  # match ops only (checked above)
                _note_offset(offsets, msg, by_offsets)
            commit.offsets = offsets
            ahead.append(_Ahead(pool, ops, base, commit, outputs, dead, stats))
        for a in ahead:  # only once every pool is rated: a failure above leaves no trace
            chain = self._chains.setdefault(a.pool, _Chain())
            chain.last = a
            chain.overlay.update(a.commit.beliefs)
        return ahead

    async def _land(self, prev: asyncio.Future[BatchResult] | None, ahead: list[_Ahead], plan: _Plan,
                    msgs: list[Message], safe: bool) -> BatchResult:
        """Commit a batch rated ahead, once every batch started before it is committed."""
        await _settled(prev)
        try:
            try:
                await asyncio.gather(*(self._land_pool(a, plan.out) for a in ahead))
            finally:
                for a in ahead:
                    self._landed(a)
            return self._finished(plan)
        except Exception:
            if not safe:
                raise
            return await self.process_safely(msgs)  # pools that landed: recognised as applied

    async def _land_pool(self, a: _Ahead, out: BatchResult) -> None:
        """Commit one pool's batch rated ahead, if what it was rated from is what Redis holds
        (else rate it again from a read, like any batch)."""
        base = a.base if isinstance(a.base, str) else (str(a.base.new_gen) if a.base.new_gen is not None else None)
        async with self._pool_locks.setdefault(a.pool, asyncio.Lock()):
            if base is not None and not a.stats.applied:  # all dead letters: nothing to write
                a.new_gen = int(base)
            elif base is not None:
                try:
                    new_gen = await self.store.commit(a.pool, base, a.commit, self.registry.unsaved.get(a.pool),
                                                      check_ids=True)
                except Conflict:  # re-delivered, another writer, or another system: the usual path sorts it out
                    pass
                else:
                    a.new_gen = new_gen
                    self.cache.committed(a.pool, base, new_gen, a.commit.beliefs)
                    self.registry.unsaved.pop(a.pool, None)
                    self.metrics.duplicates.inc(a.stats.repeated)
                    self.metrics.batches.labels("matches").inc()
            if a.new_gen is not None:
                out.outputs.extend(a.outputs)
                out.dead.extend(a.dead)
                return
            chain = self._chains.get(a.pool)
            if chain is not None:
                chain.broken = True  # later batches rated ahead on this one: rated again too
        self.metrics.recomputed.inc()
        await self._apply_pool(a.pool, a.ops, out)

    def _landed(self, a: _Ahead) -> None:
        """``a`` is settled: its beliefs leave the overlay (the cache has them if it landed)."""
        a.base = ""  # the batch after it needs only ``new_gen``: no chain of every batch rated ahead in memory
        chain = self._chains.get(a.pool)
        if chain is None:
            return
        if chain.last is a:  # nothing of this pool is in flight any more
            del self._chains[a.pool]
            return
        overlay = chain.overlay
        for p, v in a.commit.beliefs.items():
            if overlay.get(p) is v:
                del overlay[p]

    # --- round assembly ----------------------------------------------------------------
    async def _assemble(self, pool: str, items: list[tuple[str, dict[str, Any], Message]], ops: list[Op],
                        out: BatchResult) -> None:
        """Feed round_result/round_completed to the assembler; its open state is persisted in Redis."""
        ids = [v["event_id"] for _, v, _ in items]
        snap = await self.store.snapshot(pool, (), ids)
        fresh = [(t, v, m) for t, v, m in items if v["event_id"] not in snap.seen]
        self.metrics.duplicates.inc(len(items) - len(fresh))
        unknown = sorted({v["round_id"] for _, v, _ in fresh if (pool, v["round_id"]) not in self._loaded_rounds})
        if unknown:
            done, pend = await self.store.round_state(pool, unknown)
            for rid in unknown:
                key = (pool, rid)
                self._loaded_rounds.add(key)
                if rid in done:
                    self.assembler._finish(key)
                elif rid in pend:
                    self._rehydrate(pool, rid, pend[rid])
        now = int(time.time() * 1000)
        to_save: dict[str, dict[str, bytes]] = {}
        for etype, value, msg in fresh:
            rid = value["round_id"]
            try:
                if etype == "round_result":
                    ev = self.assembler.add_result(value, now)
                else:
                    ev = self.assembler.add_completed(value, now)
            except InvalidEvent as exc:
                out.dead.append(self._dead(msg, exc.reason, exc.event_id, pool))
                if (pool, rid) in self.assembler.done and (pool, rid) in self._round_ids:
                    to_save.pop(rid, None)  # the whole round was invalidated
                    self._round_ids.pop((pool, rid), None)
                    await self.store.expire_round(pool, rid)
                continue
            self._round_ids.setdefault((pool, rid), []).append(value["event_id"])
            if ev is None:
                to_save.setdefault(rid, {})[value["event_id"]] = orjson.dumps({"o": msg.offset, "e": value})
            else:
                to_save.pop(rid, None)
                ops.append(_RoundOp(ev, msg, extra_ids=self._round_ids.pop((pool, rid), []), round_done=rid))
                self._loaded_rounds.discard((pool, rid))  # late events re-read its done flag from Redis
        self.metrics.pending_rounds.set(len(self.assembler.pending))
        await self.store.save_pending(pool, to_save, ())

    def _rehydrate(self, pool: str, rid: str, entries: dict[str, bytes]) -> None:
        """Replay the persisted entries of an open round into the assembler, in offset order."""
        rows = sorted((orjson.loads(v) for v in entries.values()), key=lambda r: r["o"])
        for row in rows:
            value = row["e"]
            try:
                if value["type"] == "round_result":
                    self.assembler.add_result(value, int(time.time() * 1000))
                else:
                    self.assembler.add_completed(value, int(time.time() * 1000))
            except InvalidEvent:
                continue
            self._round_ids.setdefault((pool, rid), []).append(value["event_id"])

    def forget_rounds(self) -> None:
        """Drop the in-memory round assembly state (on partition revocation).

        Another worker may take over the pools and continue their open rounds from Redis;
        if they come back here, they are re-read from Redis too. Without this, a stale
        in-memory round could time out here and expire a round another worker is filling.
        """
        self.assembler.pending.clear()
        self.assembler.done.clear()
        self._loaded_rounds.clear()
        self._round_ids.clear()
        self.metrics.pending_rounds.set(0)

    async def expire(self, now_ms: int | None = None) -> list[DeadLetter]:
        """Dead-letter the rounds whose results waited longer than the timeout."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        dead = []
        for pool, rid, reason in self.assembler.expire(now, int(self.settings.round_timeout_s * 1000)):
            await self.store.expire_round(pool, rid)
            self._round_ids.pop((pool, rid), None)
            self._loaded_rounds.discard((pool, rid))
            self.metrics.dead_letters.labels("round timeout").inc()
            dead.append(DeadLetter(f"round {rid!r}: {reason}", pool=pool,
                                   original=orjson.dumps({"pool": pool, "round_id": rid})))
        self.metrics.pending_rounds.set(len(self.assembler.pending))
        return dead

    # --- the atomic step per pool --------------------------------------------------------
    async def _apply_pool(self, pool: str, ops: list[Op], out: BatchResult) -> None:
        """A pool's ops as atomic steps in order: one, or several when together they touch
        more than ``max_step_players`` players (``_steps``)."""
        for step in _steps(ops, self.settings.max_step_players):
            await self._apply_step(pool, step, out)

    async def _apply_step(self, pool: str, ops: list[Op], out: BatchResult) -> None:
        kind = "rounds" if isinstance(ops[0], _RoundOp) else "matches"
        engine = await self._engine_or_refuse(pool, kind, ops, out)
        if engine is None:
            return
        ops = _merge_matches(ops)
        by_offsets = self.settings.dedup == "offsets"
        ids: list[str] = []
        players: dict[str, None] = {}
        offsets: dict[str, tuple[int | None, int]] = {}
        for op in ops:
            if isinstance(op, _RoundOp):
                ids.append(op.event.event_id)
                players.update(dict.fromkeys(op.event.players))
                _note_offset(offsets, op.msg, False)
            else:
                if not by_offsets:
                    ids.extend(op.batch.event_ids)
                op.index = index_players(op.batch)
                players.update(dict.fromkeys(op.index.players))
                for msg in op.sources:
                    _note_offset(offsets, msg, by_offsets)
        checked_offsets = [tp for tp, (first, _) in offsets.items() if first is not None]
        lock = self._pool_locks.setdefault(pool, asyncio.Lock())
        async with lock:
            optimistic = True
            for attempt in range(MAX_ATTEMPTS):
                gen, stored, seen, upto, checked = await self._read(pool, players, ids, checked_offsets, optimistic)
                loop = asyncio.get_running_loop()
                commit, outputs, dead, stats = await loop.run_in_executor(
                    self.executor, _compute, engine, ops, stored, seen, upto if by_offsets else None, self._dead)
                if not stats.applied:  # all re-delivered (or dead): nothing to write
                    out.outputs.extend(outputs)
                    out.dead.extend(dead)
                    self.metrics.duplicates.inc(stats.repeated)
                    return
                commit.offsets = offsets
                meta = self.registry.unsaved.get(pool)
                try:
                    new_gen = await self.store.commit(pool, gen, commit, meta, check_ids=not checked)
                except AlreadyApplied:  # a re-delivery: read which ids were applied, recompute without them
                    optimistic = False
                    continue
                except MetaConflict:  # another worker fixed the pool's system first: rate with that one
                    self.cache.drop(pool)
                    self.registry.forget(pool)
                    engine = await self._engine_or_refuse(pool, kind, ops, out)
                    if engine is None:
                        return
                    continue
                except Conflict:
                    self.cache.drop(pool)
                    self.metrics.conflicts.inc()
                    await asyncio.sleep(0.001 * attempt)
                    continue
                self.cache.committed(pool, gen, new_gen, commit.beliefs)
                self.registry.unsaved.pop(pool, None)
                self.metrics.duplicates.inc(stats.repeated)
                self.metrics.batches.labels(kind).inc()
                out.outputs.extend(outputs)
                out.dead.extend(dead)
                return
            raise RuntimeError(f"pool {pool}: {MAX_ATTEMPTS} commit conflicts in a row")

    async def _read(self, pool: str, players: dict[str, None], ids: list[str], watermarks: list[str],
                    optimistic: bool) -> tuple[str, dict[str, bytes | None], set[str], dict[str, int], bool]:
        """What a batch of ``pool`` starts from: (gen, stored beliefs, applied event ids,
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


def _steps(ops: list[Op], max_players: int) -> list[list[Op]]:
    """``ops`` cut into runs that each touch at most ``max_players`` distinct players
    (a run ends before the op that would pass it; one op alone may pass it).

    Why: a Redis step reads and writes every player it touches, and Redis runs nothing
    else meanwhile. A replay's take of whole rounds made one step of 191k Codeforces
    players, a 73 MB script that held Redis 1.7 s (BENCHMARKS.md, "Service"). Players,
    not input bytes, are the cost: in a pool of 10k players a take of 500k matches still
    writes 10k (cutting takes by input bytes halved ``match_batch`` throughput).
    The usual batch is counted without a set: its ops name fewer player slots than that."""
    if max_players <= 0 or sum(len(op.event.players) if isinstance(op, _RoundOp) else 2 * len(op.batch)
                                for op in ops) <= max_players:
        return [ops]
    steps: list[list[Op]] = [[]]
    seen: set[str] = set()
    for op in ops:
        names = set(op.event.players) if isinstance(op, _RoundOp) else {*op.batch.a, *op.batch.b}
        fresh = names - seen
        if steps[-1] and len(seen) + len(fresh) > max_players:
            steps.append([])
            seen, fresh = set(), names
        seen |= fresh
        steps[-1].append(op)
    return steps


def _merge_matches(ops: list[Op]) -> list[Op]:
    """Consecutive match messages of a pool as one batch (one kernel call, one encode per player).

    Safe because every system's ``rate_matches`` has exact sequential meaning *including*
    its stored form: results do not depend on where batches are cut (Cowan's lossy codec is
    applied as a fixed point after every match; tests/unit/test_replay_embedded.py checks
    batch_size=1 == batch_size=4096 per system, and the integration tests compare the service
    against the embedded replay with different batch sizes).
    """
    out: list[Op] = []
    for op in ops:
        prev = out[-1] if out else None
        if isinstance(op, _MatchOp) and isinstance(prev, _MatchOp):
            merged = _MatchOp(MatchBatch(prev.batch.pool), [*prev.msgs, *op.msgs], [*prev.sources, *op.sources])
            for src in (prev.batch, op.batch):
                merged.batch.event_ids += src.event_ids
                merged.batch.a += src.a
                merged.batch.b += src.b
                merged.batch.scores += src.scores
                merged.batch.times += src.times
            out[-1] = merged
        else:
            out.append(op)
    return out


@dataclass(slots=True)
class _Counts:
    applied: int = 0  # events rated in this batch
    repeated: int = 0  # events skipped as applied before (re-deliveries)


def _compute(engine: PoolEngine, ops: list[Op], stored_in: dict[str, bytes | None], seen: set[str],
             upto: dict[str, int] | None, dead_fn: Callable[..., DeadLetter],
             ) -> tuple[Commit, list[RatingOutput], list[DeadLetter], _Counts]:
    """Apply the ops in order to a copy of the snapshot (runs on the numba thread).

    Events already applied (``seen``) or repeated inside the batch are skipped, exactly
    as the embedded pipeline skips them. With ``upto`` (MMR_DEDUP=offsets: the pool's
    applied offset per "topic/partition"), matches are skipped by their message's offset
    instead, and their ids are neither checked nor recorded.
    """
    stored: dict[str, bytes | None] = dict(stored_in)
    done_ids: set[str] = set(seen)
    counts = _Counts()
    commit = Commit()
    ratings: dict[str, Rating] = {}
    cause: dict[str, tuple[str, int]] = {}
    dead: list[DeadLetter] = []
    republish: dict[str, tuple[str, int]] = {}  # players of events applied before (a re-delivery)
    registered = False  # a round stored a newcomer at the prior (rounds 0): not published
    system = engine.system.name
    for op in ops:
        if isinstance(op, _RoundOp):
            ev = op.event
            if ev.event_id in done_ids:
                if ev.event_id in seen:
                    counts.repeated += 1
                    republish.update(dict.fromkeys(ev.players, (ev.event_id, ev.time)))
                continue
            try:
                applied = engine.apply_round(ev, stored)
            except RatingError as exc:
                dead.append(dead_fn(op.msg, f"rating: {exc}", ev.event_id, ev.pool))
                continue
            done_ids.add(ev.event_id)
            counts.applied += 1
            commit.event_ids.append(ev.event_id)
            commit.event_ids.extend(i for i in op.extra_ids if i != ev.event_id)
            if op.round_done is not None:
                commit.done_rounds.append(op.round_done)
            stored.update(applied.updates)
            commit.beliefs.update(applied.updates)
            ratings.update(applied.ratings)
            for p, r in applied.ratings.items():
                cause[p] = (ev.event_id, ev.time)
                registered |= not r.rounds
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
            try:
                parts = [(batch, msgs, engine.apply_matches(batch, stored, op.index if batch is op.batch else None))]
            except RatingError:
                parts = []  # find the culprit(s): one match at a time is the same sequential meaning
                for i in range(len(batch)):
                    one = MatchBatch(batch.pool)
                    one.add(MatchEvent(batch.event_ids[i], batch.pool, batch.times[i], batch.a[i], batch.b[i],
                                       batch.scores[i]))
                    try:
                        res = engine.apply_matches(one, stored)
                    except RatingError as exc:
                        dead.append(dead_fn(msgs[i], f"rating: {exc}", batch.event_ids[i], batch.pool))
                        continue
                    stored.update(res.updates)
                    parts.append((one, [msgs[i]], res))
            for part, _, applied in parts:
                stored.update(applied.updates)
                commit.beliefs.update(applied.updates)
                ratings.update(applied.ratings)
                counts.applied += len(part)
                if upto is None:
                    commit.event_ids.extend(part.event_ids)
                cause.update(_last_match_per_player(part, op.index if part is op.batch else None))
    outputs = []
    # A batch re-delivered after a crash between the Redis commit and the publish: its ratings
    # may never have reached the topic, so publish the players' current ratings again
    # (same versions as before, or newer; consumers keep the highest version).
    for p, c in republish.items():
        raw = stored.get(p)
        if p in ratings or raw is None:
            continue
        try:
            r = engine.rating_of(p, raw)
        except RatingError as exc:  # corrupt since it was applied: its later events dead-letter
            log.warning("pool %r: not re-publishing player %r: %s", engine.pool, p, exc)
            continue
        if not r.rounds:  # only registered (see PoolEngine._changed): never published
            continue
        outputs.append(RatingOutput(engine.pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, c[0], c[1], system))
    if ratings:  # one output per changed player, built by columns (C-level zip/map, no loop body per player)
        players = list(ratings)
        rating, mu, sigma, rounds = zip(*ratings.values(), strict=True)
        commit.scores.update(zip(players, rating, strict=True))
        eids, times = zip(*map(cause.__getitem__, players), strict=True)
        outputs.extend(map(RatingOutput, repeat(engine.pool), players, rating, mu, sigma, rounds, rounds, eids, times,
                           repeat(system)))
        if registered:  # players a round only stored at their prior (rounds 0): not published
            outputs = [o for o in outputs if o.rounds]
    return commit, outputs, dead, counts


def _last_match_per_player(batch: MatchBatch, index: PlayerIndex | None = None) -> dict[str, tuple[str, int]]:
    """Each player's last match in the batch as (event id, time): what their output cites."""
    idx = index if index is not None else index_players(batch)
    last = idx.last_match().tolist()
    ids, times = batch.event_ids, batch.times
    cited = zip(map(ids.__getitem__, last), map(times.__getitem__, last), strict=True)
    return dict(zip(idx.players, cited, strict=True))


def _keep_matches(op: _MatchOp, keep: list[bool], republish: dict[str, tuple[str, int]],
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
        batch.add(MatchEvent(eid, batch.pool, src.times[i], src.a[i], src.b[i], src.scores[i]))
        msgs.append(op.msgs[i])
    return batch, msgs


def _note_offset(offsets: dict[str, tuple[int | None, int]], msg: Message, check: bool) -> None:
    """Record ``msg`` in the batch's offsets per topic/partition (see Commit.offsets).

    Messages of one partition arrive in offset order, so the first checked one is the lowest."""
    tp = f"{msg.topic}/{msg.partition}"
    first, last = offsets.get(tp, (None, msg.offset))
    if check and first is None:
        first = msg.offset
    offsets[tp] = (first, max(last, msg.offset))


async def _settled(fut: asyncio.Future[Any] | None) -> None:
    """Wait until ``fut`` is done, whatever its outcome (its owner reads the result)."""
    if fut is not None and not fut.done():
        await asyncio.wait([fut])


def _peek_pool(raw: bytes) -> str | None:
    """Best-effort pool of an invalid message (keys its dead letter)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    pool = obj.get("pool") if isinstance(obj, dict) else None
    return pool if isinstance(pool, str) else None
