"""Input partitions halted by a bug in the rating step.

An error in the rating step is one of three kinds, and each has its own answer:

* **the input** (a message that does not validate, a result a rating system refuses:
  ``InvalidEvent``, ``RatingError``): dead-lettered with its reason; the worker goes on;
* **the infrastructure** (Redis unreachable, slow, failing over; another writer winning the
  pool's commit again and again: ``REDIS_DOWN``): the batch is retried with back-off until it
  goes through; nothing is dead-lettered, nothing is skipped;
* **anything else** is a bug of ours (or a pool's Redis keys holding what this version cannot
  use, ``StateError``). The input is valid, so dead-lettering it would lose a user's event to
  our bug, and re-running it does not help, so crashing would only restart into the same
  message again and again while every other partition of the worker waits.

So a bug **halts the input partition** (topic, partition) of the message it happened on, at
that message: its offset and every later one of that partition are neither applied nor
acknowledged (the committed offset stays at the message), their fetching is paused, and the
worker's other partitions go on. The halt is loud: an error log line with the traceback, pool,
event id and topic/partition/offset; ``mmr_partitions_halted`` (gauge) and
``mmr_rating_bugs_total{kind, action}`` (counter); the list of halts on ``/healthz`` and
``/readyz``. Once a fixed version runs, it resumes from the committed offset: the message is
rated, nothing is lost and nothing applied twice (later messages are recognised as usual).
``MMR_ON_RATING_BUG=dead-letter`` dead-letters the message instead (reason ``internal error``).

A halt lasts until the partition is revoked (a rebalance, a stop): whoever owns it next starts
at the committed offset, the same message, and halts there again if it runs the same code.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import orjson
import redis.exceptions
from prometheus_client import CollectorRegistry, Counter, Gauge

from stream.service.messages import MAX_FIELD, Message
from stream.state.redis_store import Conflict, StateError

log = logging.getLogger(__name__)

#: errors of the infrastructure, not of the input nor of the code: the batch is retried with
#: back-off (Redis unreachable or too slow, ``StoreUnavailable`` included; a pool whose commit
#: another writer keeps winning, ``Conflict``)
REDIS_DOWN = (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError, OSError, Conflict)

#: the ``kind`` label of ``mmr_rating_bugs_total``: an unexpected exception, or a pool's keys
#: that this version cannot use (``StateError``)
BUG_KINDS = ("bug", "state")
#: its ``action`` label: what the worker did with the message (``MMR_ON_RATING_BUG``)
BUG_ACTIONS = ("halted", "dead_lettered")


def bug_kind(exc: BaseException) -> str:
    return "state" if isinstance(exc, StateError) else "bug"


@dataclass(frozen=True, slots=True)
class Halt:
    """Where a partition stopped, and why."""

    topic: str
    partition: int
    offset: int  # the offending message: the committed offset of the partition stays here
    pool: str | None
    event_id: str | None
    kind: str  # one of BUG_KINDS
    error: str  # the exception's type and text (the traceback is in the log)
    since: float  # seconds since the epoch

    def as_dict(self) -> dict[str, Any]:
        return {"topic": self.topic, "partition": self.partition, "offset": self.offset, "pool": self.pool,
                "event_id": self.event_id, "kind": self.kind, "error": self.error,
                "since_ms": int(self.since * 1000)}


class Halts:
    """The worker's halted partitions: which messages are held back, and the alert."""

    def __init__(self, registry: CollectorRegistry) -> None:
        self._by_tp: dict[tuple[str, int], Halt] = {}
        #: called with each new halt (the worker pauses the partition's fetching)
        self.on_halt: Callable[[Halt], None] | None = None
        self.bugs = Counter(
            "mmr_rating_bugs", "Messages whose rating step failed with a bug (neither bad input nor Redis "
            "unavailable; kind: bug, or state = a pool's Redis keys this version cannot use), by what was done "
            "with them (action: halted = their partition stopped at them, dead_lettered: MMR_ON_RATING_BUG)",
            ["kind", "action"], registry=registry)
        for kind in BUG_KINDS:  # every series exists from the start: an alert on increase() sees the first
            for action in BUG_ACTIONS:
                self.bugs.labels(kind, action)
        gauge = Gauge("mmr_partitions_halted", "Input partitions this worker stopped at a message whose rating "
                      "step failed with a bug (see /healthz for where and why); the others go on", registry=registry)
        gauge.set_function(lambda: len(self._by_tp))

    def __bool__(self) -> bool:
        return bool(self._by_tp)

    def holds(self, topic: str, partition: int, offset: int) -> bool:
        """Whether the message at ``offset`` of ``topic``/``partition`` is held back (at or after a halt)."""
        h = self._by_tp.get((topic, partition))
        return h is not None and offset >= h.offset

    def held(self, msg: Message) -> bool:
        return self.holds(msg.topic, msg.partition, msg.offset)

    def halt(self, msg: Message, exc: BaseException) -> Halt:
        """Stop ``msg``'s partition at ``msg``: log the traceback, count, pause (``on_halt``)."""
        pool, event_id = peek_event(msg.value)
        h = Halt(msg.topic, msg.partition, msg.offset, pool, event_id, bug_kind(exc),
                 _clip(f"{type(exc).__name__}: {exc}"), time.time())
        self._by_tp[(h.topic, h.partition)] = h
        self.bugs.labels(h.kind, "halted").inc()
        log.error("rating step failed with a bug on %s/%s@%s (pool %r, event %r): partition %s/%s HALTED at offset "
                  "%s -- nothing of it from there is rated or committed, the other partitions go on; deploy a fix "
                  "and restart (see docs/operator.md, \"A bug in the rating step\")", h.topic, h.partition, h.offset,
                  h.pool, h.event_id, h.topic, h.partition, h.offset, exc_info=exc)
        if self.on_halt is not None:
            try:
                self.on_halt(h)
            except Exception:  # fetching on is only wasted work: the halt itself holds the messages back
                log.exception("pausing %s/%s failed", h.topic, h.partition)
        return h

    def dead_lettered(self, msg: Message, exc: BaseException) -> tuple[str | None, str | None]:
        """Count and log a bug whose message is dead-lettered (``MMR_ON_RATING_BUG=dead-letter``);
        returns the message's (pool, event id)."""
        pool, event_id = peek_event(msg.value)
        self.bugs.labels(bug_kind(exc), "dead_lettered").inc()
        log.error("rating step failed with a bug on %s/%s@%s (pool %r, event %r); dead-lettered "
                  "(MMR_ON_RATING_BUG=dead-letter)", msg.topic, msg.partition, msg.offset, pool, event_id,
                  exc_info=exc)
        return pool, event_id

    def clear(self) -> None:
        """Forget every halt (partitions revoked: their next owner starts at the committed offset)."""
        self._by_tp.clear()

    def listing(self) -> list[dict[str, Any]]:
        """The halts, oldest first (``/healthz``)."""
        return [h.as_dict() for h in sorted(self._by_tp.values(), key=lambda h: h.since)]


def peek_event(raw: bytes) -> tuple[str | None, str | None]:
    """Best-effort (pool, event id) of a message that decoded (the first id of a batch of matches)."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None, None
    if not isinstance(obj, dict):
        return None, None
    pool = obj.get("pool")
    eid = obj.get("event_id")
    if isinstance(eid, list):  # match_columns
        eid = eid[0] if eid else None
    elif eid is None and isinstance(obj.get("matches"), list) and obj["matches"]:  # match_batch
        first = obj["matches"][0]
        eid = first.get("event_id") if isinstance(first, dict) else None
    return (_clip(pool) if isinstance(pool, str) else None), (_clip(eid) if isinstance(eid, str) else None)


def _clip(text: str) -> str:
    return text if len(text) <= MAX_FIELD else f"{text[:MAX_FIELD]}... ({len(text)} characters)"
