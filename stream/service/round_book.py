"""Rounds reported player by player: the assembler's state, mirrored in Redis.

An open round's results and completion are saved in its pool's ``pend:<round id>`` hash as they
arrive (keyed by event id: saving again is harmless), and the commit that stores a round's ratings
marks it done (or its expiry does), so the in-memory assembler is a cache of Redis. A dispatched
round is closed in memory only once its commit returned (``committed``): a retry of the batch
assembles and rates it again, and the event ids dedup what had landed.

Expiry is found in Redis, not in memory (a failed batch, a rewind, a rebalance or a restart drops
the memory, and a round whose completion was lost would stay open for good): each open round is in
its pool's ``open`` sorted set, each pool with open rounds in a sorted set of its input partition
(the hint, written first). ``expire`` sweeps the partitions it is given, the worker's own, so no two
workers expire one pool's rounds.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any

import orjson

from stream.events.model import RoundEvent
from stream.events.rounds import RoundAssembler
from stream.events.validate import InvalidEvent
from stream.service.config import Settings
from stream.service.messages import BatchResult, DeadLetter, Message
from stream.service.metrics import Metrics, reason_label
from stream.service.planning import DeadFn, Op, RoundOp
from stream.state.redis_store import RedisStore

#: rounds expired per slice (closed in memory, marked done in Redis in one round trip, dead-lettered)
#: before the event loop runs anything else: many rounds due never hold a batch up longer than one slice
EXPIRE_SLICE = 500

#: locks striped by pool name: a pool's round assembly and the sweep of its open rounds take turns
#: (a sweep that finds a pool's last round closed removes the pool's hint; a round saved meanwhile
#: must not lose it)
LOCK_STRIPES = 64


class RoundBook:
    def __init__(self, settings: Settings, store: RedisStore, metrics: Metrics, dead: DeadFn) -> None:
        self.settings = settings
        self.store = store
        self.metrics = metrics
        self.dead = dead
        #: the rounds whose Redis state (done flag, saved entries) was read: those it ``knows``
        self.assembler = RoundAssembler(max_participants=settings.max_participants, close_on_dispatch=False)
        #: (pool, round id) -> reason: rounds expired (closed in memory) whose done flag has not
        #: reached Redis yet; written by the next ``expire``, and done for ``assemble`` meanwhile
        self._expiring: dict[tuple[str, str], str | None] = {}
        #: pool -> the input partitions ("topic/partition") whose hint of it the sweep of ``_expiring`` updates
        self._expiring_sources: dict[str, set[str]] = {}
        #: the dead letters of ``_expiring`` are on the broker (``expire`` with ``publish``): not published again
        self._published = False
        self._locks = [asyncio.Lock() for _ in range(LOCK_STRIPES)]
        #: (source, pool) -> the earliest open time this worker knows the pool's hint holds (writes skipped)
        self._hinted: dict[tuple[str, str], int] = {}
        #: input partitions round results came from: what ``expire`` sweeps when not told
        self.sources: set[str] = set()

    def _lock(self, pool: str) -> asyncio.Lock:
        return self._locks[hash(pool) % LOCK_STRIPES]

    async def assemble(self, pool: str, items: list[tuple[str, dict[str, Any], Message]], ops: list[Op],
                       out: BatchResult) -> dict[str, tuple[str, int]]:
        """Feed a batch's round_result/round_completed of ``pool`` to the assembler; a round they
        complete is appended to ``ops`` (to be marked done by its commit); the others are saved.
        Returns the players of results applied before (player -> (event id, time)), whose ratings the
        caller publishes again (a re-delivery: they may never have reached the topic)."""
        async with self._lock(pool):
            return await self._assemble(pool, items, ops, out)

    async def _assemble(self, pool: str, items: list[tuple[str, dict[str, Any], Message]], ops: list[Op],
                        out: BatchResult) -> dict[str, tuple[str, int]]:
        ids = [v["event_id"] for _, v, _ in items]
        snap = await self.store.snapshot(pool, (), ids)
        fresh = [(t, v, m) for t, v, m in items if v["event_id"] not in snap.seen]
        again = {v["player"]: (v["event_id"], v["time"]) for t, v, _ in items
                 if t == "round_result" and v["event_id"] in snap.seen}
        self.metrics.duplicates.inc(len(items) - len(fresh))
        unknown = sorted({v["round_id"] for _, v, _ in fresh if not self.assembler.knows(pool, v["round_id"])})
        await self._read_rounds(pool, unknown)
        now = int(time.time() * 1000)
        to_save: dict[str, dict[str, bytes]] = {}
        for etype, value, msg in fresh:
            rid = value["round_id"]
            was_open = self.assembler.is_open(pool, rid)
            try:
                ev = self._feed(etype, value, now)
            except InvalidEvent as exc:
                out.dead.append(self.dead(msg, exc.reason, exc.event_id, pool))
                if was_open and self.assembler.is_closed(pool, rid):  # the whole round was invalidated
                    to_save.pop(rid, None)
                    await self.store.expire_round(pool, rid)
                continue
            if ev is None:
                to_save.setdefault(rid, {})[value["event_id"]] = orjson.dumps({"o": msg.offset, "e": value})
            else:
                to_save.pop(rid, None)
                ops.append(RoundOp(ev, msg, extra_ids=self.assembler.dispatched_ids(pool, rid), round_done=rid))
        self.metrics.pending_rounds.set(len(self.assembler))
        opened = {rid: t for rid in to_save if (t := self.assembler.first_seen(pool, rid)) is not None}
        if opened:
            await self._hint(pool, {f"{m.topic}/{m.partition}" for _, v, m in fresh if v["round_id"] in opened},
                             min(opened.values()))
        await self.store.save_pending(pool, to_save, (), opened)
        return again

    async def _hint(self, pool: str, sources: set[str], first: int) -> None:
        """The pool has rounds open since ``first`` from these input partitions: its hints, written before the
        rounds' ``open`` entries (rounds without a hint would not be found), unless written already."""
        self.sources |= sources
        todo = [src for src in sorted(sources) if self._hinted.get((src, pool), first + 1) > first]
        if todo:
            await self.store.hint_open(pool, todo, first)
            self._hinted.update(((src, pool), first) for src in todo)

    def _feed(self, etype: str, value: dict[str, Any], now: int) -> RoundEvent | None:
        if etype == "round_result":
            return self.assembler.add_result(value, now)
        return self.assembler.add_completed(value, now)

    async def _read_rounds(self, pool: str, rids: list[str]) -> None:
        """Rounds the assembler does not know, as Redis has them: done (or expiring) ones closed, open ones
        replayed from their saved entries in offset order."""
        if not rids:
            return
        done, pend = await self.store.round_state(pool, rids)
        for rid in rids:
            if rid in done or (pool, rid) in self._expiring:
                self.assembler.close(pool, rid)
            elif rid in pend:
                for row in sorted((orjson.loads(v) for v in pend[rid].values()), key=lambda r: r["o"]):
                    with contextlib.suppress(InvalidEvent):
                        self._feed(row["e"]["type"], row["e"], int(time.time() * 1000))

    def committed(self, pool: str, round_ids: list[str]) -> None:
        """These dispatched rounds are done in Redis: later events of theirs are late."""
        for rid in round_ids:
            self.assembler.close(pool, rid)  # a late event re-reads the done flag once memory forgot it

    async def refuse(self, pool: str, round_id: str) -> None:
        """A dispatched round that will not be rated (its pool's system cannot be built):
        done, as a timed-out round is, so that its late results are not collected again."""
        await self.store.expire_round(pool, round_id)
        self.committed(pool, [round_id])

    def forget(self) -> None:
        """Drop the in-memory state; every round is read from Redis again when next touched (partitions
        revoked: another worker may fill their rounds; a failed batch: memory may be ahead of Redis)."""
        self.assembler.clear()
        self._hinted.clear()  # a restarted Redis may have lost them
        self.metrics.pending_rounds.set(0)

    async def expire(self, now_ms: int | None, sources: Sequence[str], stop: Callable[[], bool] | None = None,
                     publish: Callable[[list[DeadLetter]], Awaitable[None]] | None = None) -> list[DeadLetter]:
        """Dead-letter the rounds of the input partitions ``sources`` ("topic/partition") whose first result
        was saved longer than the timeout ago, found in Redis, ``EXPIRE_SLICE`` at a time. A round whose
        commit is under way is left to its commit.

        A slice is closed in memory before it is marked done in Redis, so a batch running meanwhile finds
        its events late; if that write fails, the next call writes the slice first. Once ``stop()`` is
        true no further slice is begun. With ``publish`` (returning once the broker holds them) a slice's
        dead letters are published before its write, and only the rest are returned: a round marked done
        exists nowhere else, so a sweep cancelled between the write and the publish would lose them."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        before = now - int(self.settings.round_timeout_s * 1000)
        dead: list[DeadLetter] = []
        while stop is None or not stop():
            if not self._expiring and not await self._next_slice(list(sources), before):
                break
            due, srcs = self._expiring, self._expiring_sources
            if publish is not None and not self._published:
                await publish([self._dead_letter(pool, rid, reason) for (pool, rid), reason in due.items()
                               if reason is not None])
                self._published = True
            async with self._locked(list(srcs)):
                closed = await self.store.expire_rounds(list(due)) if due else {}
                # each pool's hint moves to its earliest round left (or goes): under the locks, so that no round
                # of the pool is saved between the script's answer and this write
                await self._set_hints([(src, pool, closed[pool][1]) for pool, ss in srcs.items() if pool in closed
                                       for src in sorted(ss)])
            published, self._published = self._published, False
            self._expiring, self._expiring_sources = {}, {}
            timed_out = [(pool, rid) for pool, (rids, _) in closed.items() for rid in rids]
            self.metrics.dead_letters.labels(reason_label("round timed out")).inc(len(timed_out))
            dead += [self._dead_letter(pool, rid, due.get((pool, rid))) for pool, rid in timed_out
                     if not (published and due.get((pool, rid)) is not None)]
            await asyncio.sleep(0)
        self.metrics.pending_rounds.set(len(self.assembler))
        return dead

    @staticmethod
    def _dead_letter(pool: str, rid: str, reason: str | None) -> DeadLetter:
        return DeadLetter(f"round {rid!r}: {reason or 'round timed out'}", pool=pool,
                          original=orjson.dumps({"pool": pool, "round_id": rid}))

    async def _set_hints(self, hints: list[tuple[str, str, int | None]]) -> None:
        await self.store.set_hints(hints)
        for src, pool, first in hints:
            if first is None:
                self._hinted.pop((src, pool), None)
            else:
                self._hinted[(src, pool)] = first

    @contextlib.asynccontextmanager
    async def _locked(self, pools: list[str]) -> Any:
        """The locks of ``pools`` (in one order, so two sweeps could not deadlock; assembly takes one)."""
        async with contextlib.AsyncExitStack() as stack:
            for k in sorted({hash(p) % LOCK_STRIPES for p in pools}):
                await stack.enter_async_context(self._locks[k])
            yield

    async def _next_slice(self, sources: list[str], before: int) -> bool:
        """Find the next slice of due rounds in Redis, close it in memory and keep it in ``_expiring``
        (with the hints to update). False: nothing left to do (no pool of ``sources`` has a due round
        that is not under way)."""
        hinted = await self.store.due_pools(sources, before, EXPIRE_SLICE)
        srcs: dict[str, set[str]] = {}
        for src, pools in hinted.items():
            for pool in pools:
                srcs.setdefault(pool, set()).add(src)
        if not srcs:
            return False
        pools = list(srcs)[:EXPIRE_SLICE]
        per_pool = max(1, EXPIRE_SLICE // len(pools))
        expiring: dict[tuple[str, str], str | None] = {}
        async with self._locked(pools):  # no assembly of these pools meanwhile: memory and Redis agree
            due = await self.store.due_rounds(pools, before, per_pool)
            for pool, (rows, _) in due.items():
                unknown = [rid for rid, _ in rows if not self.assembler.knows(pool, rid)]
                await self._read_rounds(pool, unknown)  # forgotten (a failed batch, a restart): for the dead letter
                for rid, _ in rows:
                    if self.assembler.is_held(pool, rid):  # complete: its commit (or the batch's retry) rates it
                        if rid in unknown:  # complete in Redis but not being committed: the retry of its batch will
                            self.assembler.forget(pool, rid)
                        continue
                    if self.assembler.is_open(pool, rid):
                        expiring[(pool, rid)] = self.assembler.close_expired(pool, rid)
                    elif self.assembler.is_closed(pool, rid):
                        expiring[(pool, rid)] = None  # done already: the script only cleans up
                    else:  # an open entry without results (its results were never saved)
                        self.assembler.close(pool, rid)
                        expiring[(pool, rid)] = "round timed out with 0/? results"
            # pools whose hint was due without a due round: their hint moves to their earliest round (or goes)
            stale = [(src, pool, first) for pool, (rows, first) in due.items() if not rows
                     for src in sorted(srcs[pool])]
            await self._set_hints(stale)
        self._expiring = expiring
        self._expiring_sources = {pool: srcs[pool] for pool, _ in expiring}
        self.metrics.pending_rounds.set(len(self.assembler))
        return bool(expiring or stale)  # progress: a round left the open set, or a hint moved past ``before``
