"""Assembling a round from per-player ``round_result`` events and a ``round_completed``.

Semantics (documented in the README):
* Results are collected per (pool, round_id). The round is dispatched when its
  ``round_completed`` has arrived *and* exactly ``participants`` distinct players have
  reported; it then takes the completion's ``event_id``, ``time`` and ``weight``.
* A result with an ``event_id`` already seen for that round is a duplicate: ignored.
* A second result for the same player under another ``event_id`` is invalid (DLQ).
* More results than ``participants`` makes the round invalid (DLQ); it is dropped.
* A result or completion for a round already dispatched is *late*: invalid (DLQ),
  never re-rates the round. The assembler remembers the last ``remember`` rounds; the
  worker also keeps a round's done flag in Redis, written with the round's rating.
* A round whose completion (or last result) has waited longer than the timeout is
  expired by ``expire(now)``: the caller dead-letters it; its results are dropped.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any, NamedTuple

import numpy as np

from stream.events.model import RoundEvent
from stream.events.validate import InvalidEvent


@dataclass(slots=True)
class _Pending:
    results: dict[str, int] = field(default_factory=dict)  # player -> rank
    result_ids: set[str] = field(default_factory=set)
    completed: dict[str, Any] | None = None
    first_seen: int = 0


class OpenRound(NamedTuple):
    """A round still being assembled: ``expected`` is None until its completion arrived."""

    pool: str
    round_id: str
    results: int
    expected: int | None
    first_seen: int


class RoundAssembler:
    """Pure state machine; the worker feeds it in partition order.

    A round leaves the open set when it is dispatched (returned by ``add_result`` /
    ``add_completed``), expired or found invalid; from then on its events are late. With
    ``close_on_dispatch`` false a dispatched round is only *held* until the caller either
    ``close``s it (its rating is durable) or ``forget``s it (the rating failed: the caller
    feeds its events again), so that a rating that fails after dispatch does not leave the
    round marked as rated.
    """

    def __init__(self, max_participants: int = 1_000_000, remember: int = 100_000,
                 close_on_dispatch: bool = True) -> None:
        self.max_participants = max_participants
        self.remember = remember
        self.close_on_dispatch = close_on_dispatch
        self._open: dict[tuple[str, str], _Pending] = {}
        self._held: set[tuple[str, str]] = set()  # dispatched, neither closed nor forgotten yet
        self._closed: OrderedDict[tuple[str, str], None] = OrderedDict()

    def __len__(self) -> int:
        """Rounds being assembled."""
        return len(self._open)

    def open_rounds(self) -> list[OpenRound]:
        """The rounds being assembled, in first-seen order."""
        return [OpenRound(key[0], key[1], len(p.results),
                          int(p.completed["participants"]) if p.completed is not None else None, p.first_seen)
                for key, p in self._open.items()]

    def is_closed(self, pool: str, round_id: str) -> bool:
        return (pool, round_id) in self._closed

    def _get(self, key: tuple[str, str], now: int, event_id: str) -> _Pending:
        if key in self._closed or key in self._held:
            raise InvalidEvent(f"field round_id: round {key[1]!r} was already rated (late event)", event_id)
        pend = self._open.get(key)
        if pend is None:
            pend = self._open[key] = _Pending(first_seen=now)
        return pend

    def add_result(self, obj: dict[str, Any], now: int) -> RoundEvent | None:
        key = (obj["pool"], obj["round_id"])
        eid = obj["event_id"]
        pend = self._get(key, now, eid)
        if eid in pend.result_ids:
            return None  # duplicate delivery
        player = obj["player"]
        if player in pend.results:
            raise InvalidEvent(f"field player: {player!r} already has a result in round {key[1]!r}", eid)
        pend.results[player] = int(obj["rank"])
        pend.result_ids.add(eid)
        return self._maybe_dispatch(key, pend)

    def add_completed(self, obj: dict[str, Any], now: int) -> RoundEvent | None:
        key = (obj["pool"], obj["round_id"])
        eid = obj["event_id"]
        pend = self._get(key, now, eid)
        if pend.completed is not None:
            if pend.completed["event_id"] == eid:
                return None
            raise InvalidEvent(f"field round_id: round {key[1]!r} completed twice", eid)
        if obj["participants"] > self.max_participants:
            self._open.pop(key, None)
            raise InvalidEvent(
                f"field participants: {obj['participants']} exceeds the maximum {self.max_participants}", eid
            )
        pend.completed = obj
        return self._maybe_dispatch(key, pend)

    def _maybe_dispatch(self, key: tuple[str, str], pend: _Pending) -> RoundEvent | None:
        comp = pend.completed
        n = len(pend.results)
        if comp is None:
            if n > self.max_participants:
                self.close(*key)
                raise InvalidEvent(f"round {key[1]!r} has more results than the maximum {self.max_participants}")
            return None
        expected = int(comp["participants"])
        if n < expected:
            return None
        if n > expected:
            self.close(*key)
            raise InvalidEvent(
                f"field participants: round {key[1]!r} got {n} results, expected {expected}", comp["event_id"]
            )
        if self.close_on_dispatch:
            self.close(*key)
        else:
            self._open.pop(key, None)
            self._held.add(key)
        players = list(pend.results)
        return RoundEvent(
            event_id=comp["event_id"],
            pool=key[0],
            round_id=key[1],
            time=int(comp["time"]),
            players=players,
            ranks=np.fromiter(pend.results.values(), dtype=np.int64, count=n),
            weight=float(comp.get("weight", 1.0)),
            perf_ceiling=float(comp.get("perf_ceiling", math.inf)),
        )

    def close(self, pool: str, round_id: str) -> None:
        """The round is finished (rated durably, expired or invalid): its later events are late."""
        key = (pool, round_id)
        self._open.pop(key, None)
        self._held.discard(key)
        self._closed[key] = None
        while len(self._closed) > self.remember:
            self._closed.popitem(last=False)

    def forget(self, pool: str, round_id: str) -> None:
        """Drop everything known of the round (its events may be fed again)."""
        key = (pool, round_id)
        self._open.pop(key, None)
        self._held.discard(key)
        self._closed.pop(key, None)

    def clear(self) -> None:
        self._open.clear()
        self._held.clear()
        self._closed.clear()

    def expire(self, now: int, timeout_ms: int) -> list[tuple[str, str, str]]:
        """Close the rounds open longer than ``timeout_ms``: ``[(pool, round_id, reason)]``."""
        out = []
        for key, pend in list(self._open.items()):
            if now - pend.first_seen > timeout_ms:
                have = len(pend.results)
                want = pend.completed["participants"] if pend.completed else "?"
                self.close(*key)
                out.append((key[0], key[1], f"round timed out with {have}/{want} results"))
        return out
