"""Assembling a round from per-player ``round_result`` events and a ``round_completed``.

Semantics (the first as docs/interface.md states it):
* Results are collected per (pool, round_id). The round is dispatched when its
  ``round_completed`` has arrived *and* exactly ``participants`` distinct players have
  reported; it then takes the completion's ``event_id``, ``time`` and ``weight``.
* A result with an ``event_id`` already seen for that round is a duplicate: ignored.
* A second result for the same player under another ``event_id`` is invalid (DLQ).
* More results than ``participants`` makes the round invalid (DLQ); it is dropped.
* A result or completion for a round already dispatched is *late*: invalid (DLQ),
  never re-rates the round. The assembler remembers the last ``remember`` rounds; the
  worker also keeps a round's done flag in Redis, written with the round's rating.
* A round still open longer than the timeout after its first event is expired by
  ``expire(now)``: the caller dead-letters it; its results are dropped.
"""

from __future__ import annotations

import math
import sys
from collections import OrderedDict
from typing import Any, NamedTuple

import numpy as np

from stream.events.model import RoundEvent
from stream.events.validate import InvalidEvent

RoundKey = tuple[str, str]  # (pool, round id)

#: bits of ``_Pending.ids``: what an accepted event id was accepted as
RESULT, COMPLETION = 1, 2


class _Completion(NamedTuple):
    """The fields of a ``round_completed`` the round takes (converted at dispatch), not the whole event."""

    event_id: str
    participants: Any
    time: Any
    weight: Any
    perf_ceiling: Any


class _Pending:
    """An open round. Small on purpose: a worker may hold hundreds of thousands of rounds that
    never complete until they time out, so each keeps only what dispatching it needs."""

    __slots__ = ("completed", "first_seen", "ids", "results")

    def __init__(self, first_seen: int) -> None:
        self.results: dict[str, int] = {}  # player -> rank, in arrival order
        #: accepted event ids (results and the completion) in arrival order -> RESULT | COMPLETION
        #: bits: what a dispatched round records as applied, and what tells a repeated result
        self.ids: dict[str, int] = {}
        self.completed: _Completion | None = None
        self.first_seen = first_seen


class OpenRound(NamedTuple):
    """A round still being assembled: ``expected`` is None until its completion arrived."""

    pool: str
    round_id: str
    results: int
    expected: int | None
    first_seen: int


class RoundAssembler:
    """Pure state machine; the worker feeds it in partition order.

    A round leaves the open set when it is dispatched (returned by ``add_result`` / ``add_completed``),
    expired or found invalid; from then on its events are late. With ``close_on_dispatch`` false a
    dispatched round is only *held* until the caller ``close``s it (its rating is durable) or
    ``forget``s it (the rating failed: its events come again), so that a failed rating does not leave
    the round marked as rated.

    A round's ``first_seen`` is the latest ``now`` given when it opened (a clock stepping back does not
    move it earlier), so the open rounds, kept in opening order, are in deadline order.
    """

    def __init__(self, max_participants: int = 1_000_000, remember: int = 100_000,
                 close_on_dispatch: bool = True) -> None:
        self.max_participants = max_participants
        self.remember = remember
        self.close_on_dispatch = close_on_dispatch
        self._open: dict[RoundKey, _Pending] = {}  # in opening order (= first_seen order)
        self._held: dict[RoundKey, list[str]] = {}  # dispatched, neither closed nor forgotten yet: its event ids
        self._closed: OrderedDict[RoundKey, None] = OrderedDict()
        self._clock = -(2**63)  # the latest ``now`` seen

    def __len__(self) -> int:
        """Rounds being assembled."""
        return len(self._open)

    def open_rounds(self) -> list[OpenRound]:
        """The rounds being assembled, in first-seen order."""
        return [OpenRound(key[0], key[1], len(p.results),
                          int(p.completed.participants) if p.completed is not None else None, p.first_seen)
                for key, p in self._open.items()]

    def is_closed(self, pool: str, round_id: str) -> bool:
        return (pool, round_id) in self._closed

    def is_open(self, pool: str, round_id: str) -> bool:
        """Being assembled (some of its events accepted, not dispatched)."""
        return (pool, round_id) in self._open

    def knows(self, pool: str, round_id: str) -> bool:
        """Open, held or (among the last ``remember``) closed: its state is in memory."""
        key = (pool, round_id)
        return key in self._open or key in self._held or key in self._closed

    def is_held(self, pool: str, round_id: str) -> bool:
        """Dispatched, neither closed nor forgotten yet (its rating is under way)."""
        return (pool, round_id) in self._held

    def first_seen(self, pool: str, round_id: str) -> int | None:
        """When an open round opened (the ``now`` given with its first event); None: not open."""
        pend = self._open.get((pool, round_id))
        return None if pend is None else pend.first_seen

    def close_expired(self, pool: str, round_id: str) -> str:
        """Close an open round that timed out; the reason of its dead letter."""
        pend = self._open[(pool, round_id)]
        self.close(pool, round_id)
        return _timed_out(pend)

    def dispatched_ids(self, pool: str, round_id: str) -> list[str]:
        """The event ids (results and completion, in arrival order) of a held round."""
        return list(self._held.get((pool, round_id), ()))

    def _get(self, key: RoundKey, now: int, event_id: str) -> _Pending:
        if key in self._closed or key in self._held:
            raise InvalidEvent(f"field round_id: round {key[1]!r} was already rated (late event)", event_id)
        pend = self._open.get(key)
        if pend is None:
            self._clock = max(self._clock, now)
            # one string per pool name, not one per open round (each decoded event has its own copy)
            key = (sys.intern(key[0]), key[1])
            pend = self._open[key] = _Pending(self._clock)
        return pend

    def add_result(self, obj: dict[str, Any], now: int) -> RoundEvent | None:
        key = (obj["pool"], obj["round_id"])
        eid = obj["event_id"]
        pend = self._get(key, now, eid)
        seen = pend.ids.get(eid, 0)
        if seen & RESULT:
            return None  # duplicate delivery
        player = obj["player"]
        if player in pend.results:
            raise InvalidEvent(f"field player: {player!r} already has a result in round {key[1]!r}", eid)
        pend.results[player] = int(obj["rank"])
        pend.ids[eid] = seen | RESULT
        return self._maybe_dispatch(key, pend)

    def add_completed(self, obj: dict[str, Any], now: int) -> RoundEvent | None:
        key = (obj["pool"], obj["round_id"])
        eid = obj["event_id"]
        pend = self._get(key, now, eid)
        if pend.completed is not None:
            if pend.completed.event_id == eid:
                return None
            raise InvalidEvent(f"field round_id: round {key[1]!r} completed twice", eid)
        if obj["participants"] > self.max_participants:
            self._open.pop(key, None)
            raise InvalidEvent(f"field participants: {obj['participants']} exceeds the maximum "
                               f"{self.max_participants}", eid)
        pend.completed = _Completion(eid, obj["participants"], obj["time"], obj.get("weight", 1.0),
                                     obj.get("perf_ceiling", math.inf))
        pend.ids[eid] = pend.ids.get(eid, 0) | COMPLETION
        return self._maybe_dispatch(key, pend)

    def _maybe_dispatch(self, key: RoundKey, pend: _Pending) -> RoundEvent | None:
        comp = pend.completed
        n = len(pend.results)
        if comp is None:
            if n > self.max_participants:
                self.close(*key)
                raise InvalidEvent(f"round {key[1]!r} has more results than the maximum {self.max_participants}")
            return None
        expected = int(comp.participants)
        if n < expected:
            return None
        if n > expected:
            self.close(*key)
            raise InvalidEvent(f"field participants: round {key[1]!r} got {n} results, expected {expected}",
                               comp.event_id)
        if self.close_on_dispatch:
            self.close(*key)
        else:
            self._open.pop(key, None)
            self._held[key] = list(pend.ids)
        return RoundEvent(event_id=comp.event_id, pool=key[0], round_id=key[1], time=int(comp.time),
                          players=list(pend.results), ranks=np.fromiter(pend.results.values(), dtype=np.int64, count=n),
                          weight=float(comp.weight), perf_ceiling=float(comp.perf_ceiling))

    def close(self, pool: str, round_id: str) -> None:
        """The round is finished (rated durably, expired or invalid): its later events are late."""
        key = (sys.intern(pool), round_id)
        self._open.pop(key, None)
        self._held.pop(key, None)
        self._closed[key] = None
        while len(self._closed) > self.remember:
            self._closed.popitem(last=False)

    def forget(self, pool: str, round_id: str) -> None:
        """Drop everything known of the round (its events may be fed again)."""
        key = (pool, round_id)
        self._open.pop(key, None)
        self._held.pop(key, None)
        self._closed.pop(key, None)

    def clear(self) -> None:
        self._open.clear()
        self._held.clear()
        self._closed.clear()


def _timed_out(pend: _Pending) -> str:
    want = pend.completed.participants if pend.completed is not None else "?"
    return f"round timed out with {len(pend.results)}/{want} results"
