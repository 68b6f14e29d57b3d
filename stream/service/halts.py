"""Input partitions halted by a bug in the rating step (docs/operator.md, "A bug in the rating step").

An error in the rating step is the input's (``InvalidEvent``, ``RatingError``: dead-lettered with its
reason), the infrastructure's (``REDIS_DOWN``: the batch retried with back-off until it goes through),
or a bug of ours (anything else, a pool's keys this version cannot use included). A bug's input is
valid, so dead-lettering it would lose a user's event to our bug, and crashing would restart into the
same message while the worker's other partitions wait. So a bug **halts the input partition** of its
message at that message: nothing of it from there is applied or acknowledged, its fetching is paused,
the other partitions go on, and the halt is loud (an error with the traceback, metrics, ``/healthz``).
A fixed version resumes from the committed offset. A halt lasts until the partition is revoked.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from typing import Any

import redis.exceptions
from prometheus_client import CollectorRegistry, Counter, Gauge

from stream.service.messages import Message, clip, peek_event
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
        return {**{k: v for k, v in asdict(self).items() if k != "since"}, "since_ms": int(self.since * 1000)}


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
        h = Halt(msg.topic, msg.partition, msg.offset, pool and clip(pool), event_id and clip(event_id), bug_kind(exc),
                 clip(f"{type(exc).__name__}: {exc}"), time.time())
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
