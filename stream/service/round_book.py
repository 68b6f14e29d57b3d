"""Rounds reported player by player: the assembler's state, mirrored in Redis.

The results and the completion of an open round are saved in the pool's ``pend:<round id>``
hash as they arrive (keyed by event id, so saving again is harmless), and a round is marked
done in Redis by the same atomic commit that stores its ratings (or when it expires). So Redis
always knows which rounds are open, with what, and which are done; the in-memory assembler is
a cache of it. A dispatched round is closed in memory only once its commit returned
(``committed``): until then a retry of the batch (after a Redis error, say) assembles and
rates it again, and the ids of its events dedup whatever had landed.
"""

from __future__ import annotations

import asyncio
import time
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

#: rounds expired per slice: closed in memory, marked done in Redis in one round trip and
#: dead-lettered, before the event loop runs anything else again. A tick that finds tens of
#: thousands of rounds due (rounds that never complete) thus never holds a batch up for
#: longer than one slice.
EXPIRE_SLICE = 500


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
        self._expiring: dict[tuple[str, str], str] = {}

    async def assemble(self, pool: str, items: list[tuple[str, dict[str, Any], Message]], ops: list[Op],
                       out: BatchResult) -> dict[str, tuple[str, int]]:
        """Feed a batch's round_result/round_completed of ``pool`` to the assembler; a round they
        complete is appended to ``ops`` (to be marked done by its commit); the others are saved.

        Returns the players of results applied before (player -> (event id, time)): a re-delivery
        of a round whose commit landed while its ratings may not have reached the topic (a crash
        or a rewind between the commit and the publish); the caller publishes their ratings again,
        as the step does for re-delivered whole rounds and matches."""
        ids = [v["event_id"] for _, v, _ in items]
        snap = await self.store.snapshot(pool, (), ids)
        fresh = [(t, v, m) for t, v, m in items if v["event_id"] not in snap.seen]
        again = {v["player"]: (v["event_id"], v["time"]) for t, v, _ in items
                 if t == "round_result" and v["event_id"] in snap.seen}
        self.metrics.duplicates.inc(len(items) - len(fresh))
        unknown = sorted({v["round_id"] for _, v, _ in fresh if not self.assembler.knows(pool, v["round_id"])})
        if unknown:
            done, pend = await self.store.round_state(pool, unknown)
            for rid in unknown:
                if rid in done or (pool, rid) in self._expiring:
                    self.assembler.close(pool, rid)
                elif rid in pend:
                    self._rehydrate(pool, rid, pend[rid])
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
        await self.store.save_pending(pool, to_save, ())
        return again

    def _feed(self, etype: str, value: dict[str, Any], now: int) -> RoundEvent | None:
        if etype == "round_result":
            return self.assembler.add_result(value, now)
        return self.assembler.add_completed(value, now)

    def _rehydrate(self, pool: str, rid: str, entries: dict[str, bytes]) -> None:
        """Replay the persisted entries of an open round into the assembler, in offset order."""
        rows = sorted((orjson.loads(v) for v in entries.values()), key=lambda r: r["o"])
        for row in rows:
            value = row["e"]
            try:
                self._feed(value["type"], value, int(time.time() * 1000))
            except InvalidEvent:
                continue

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
        """Drop the in-memory state; every round is read from Redis again when next touched.

        On partition revocation: another worker may take over the pools and continue their
        open rounds from Redis (a stale round here could time out and expire a round another
        worker is filling). After a failed batch: memory may be ahead of Redis (a round
        dispatched whose commit did not land)."""
        self.assembler.clear()
        self.metrics.pending_rounds.set(0)

    async def expire(self, now_ms: int | None = None) -> list[DeadLetter]:
        """Dead-letter the rounds whose results waited longer than the timeout, oldest first,
        ``EXPIRE_SLICE`` at a time (other tasks run between slices).

        A slice is closed in memory before it is marked done in Redis (so that a batch running
        meanwhile finds its events late, as Redis will say). If that write fails, the error
        propagates and the next call writes the slice again first; its dead letters are
        returned once it is written. ``forget`` keeps such a slice: its rounds did time out."""
        now = int(time.time() * 1000) if now_ms is None else now_ms
        timeout = int(self.settings.round_timeout_s * 1000)
        dead: list[DeadLetter] = []
        while True:
            if not self._expiring:
                self._expiring = {(pool, rid): reason
                                  for pool, rid, reason in self.assembler.expire(now, timeout, EXPIRE_SLICE)}
                self.metrics.pending_rounds.set(len(self.assembler))
            due = self._expiring
            if not due:
                break
            await self.store.expire_rounds(list(due))
            self._expiring = {}
            self.metrics.dead_letters.labels(reason_label("round timed out")).inc(len(due))
            dead += [DeadLetter(f"round {rid!r}: {reason}", pool=pool,
                                original=orjson.dumps({"pool": pool, "round_id": rid}))
                     for (pool, rid), reason in due.items()]
            if len(due) < EXPIRE_SLICE:
                break
            await asyncio.sleep(0)
        self.metrics.pending_rounds.set(len(self.assembler))
        return dead
