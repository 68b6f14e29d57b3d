"""What the processor takes and gives: input records, dead letters, a batch's results."""

from __future__ import annotations

import base64
import hashlib
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson

from stream.events.model import RatingOutput
from stream.events.validate import InvalidEvent

#: bytes of the original message a dead letter carries. The whole message stays in the input
#: topic at the recorded offset; a prefix is enough to see what was wrong, and the envelope
#: stays far below the producer's 1 MB message limit whatever arrived (a dead letter that
#: cannot be published would stop the partition).
ORIGINAL_PREFIX = 4096
#: characters kept of the reason, event id and pool of a dead letter (they may come straight from the input)
MAX_FIELD = 1024


@dataclass(slots=True)
class Message:
    """One input record: where it came from and its bytes; ``decoded``: what ``Processor.predecode`` made
    of it (``(type, value)`` or the InvalidEvent); ``timestamp``: the Kafka record's, in seconds."""

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
        """The pool (so a pool's dead letters stay in order), unless it is too long to be a pool name."""
        return self.pool.encode() if self.pool and len(self.pool) <= MAX_FIELD else None

    def encode(self) -> bytes:
        """JSON envelope with a bounded view of the original: its first ``ORIGINAL_PREFIX`` bytes
        (as text when they are UTF-8, else base64), its size and its SHA-256."""
        head = self.original[:ORIGINAL_PREFIX]
        text = _utf8_prefix(head, whole=len(head) == len(self.original))
        return orjson.dumps({
            "type": "dead_letter", "reason": clip(self.reason), "topic": self.topic, "partition": self.partition,
            "offset": self.offset, "event_id": self.event_id and clip(self.event_id),
            "pool": self.pool and clip(self.pool),
            "original": text, "original_b64": None if text is not None else base64.b64encode(head).decode(),
            "original_size": len(self.original), "original_truncated": len(head) < len(self.original),
            "original_sha256": hashlib.sha256(self.original).hexdigest(), "time": int(time.time() * 1000),
        })


def _utf8_prefix(head: bytes, whole: bool) -> str | None:
    """``head`` as text if it is UTF-8; a cut prefix may end inside a character (dropped)."""
    try:
        return head.decode("utf-8")
    except UnicodeDecodeError as exc:
        if whole or exc.reason != "unexpected end of data":
            return None
        return head[:exc.start].decode("utf-8")


def clip(text: str) -> str:
    """``text`` cut to ``MAX_FIELD`` characters, saying how long it was."""
    return text if len(text) <= MAX_FIELD else f"{text[:MAX_FIELD]}... ({len(text)} characters)"


def peek_event(raw: bytes) -> tuple[str | None, str | None]:
    """Best-effort (pool, event id) of a message (the first id of a batch of matches), for its dead letter or halt."""
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
    return (pool if isinstance(pool, str) else None), (eid if isinstance(eid, str) else None)


@dataclass(slots=True)
class BatchResult:
    outputs: list[RatingOutput] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    #: where the ratings of each step go once the step is committed (``Processor.start``'s ``hand``),
    #: instead of ``outputs``: so the worker publishes a step's ratings while the steps after it are rated
    hand: Callable[[Sequence[RatingOutput]], None] | None = field(default=None, repr=False, compare=False)
    #: pool -> its commit counter after its last commit of the batch (stream.state.marks: the pools' marks)
    gens: dict[str, int] = field(default_factory=dict)

    def add(self, other: BatchResult) -> None:
        self.outputs += other.outputs
        self.dead += other.dead
        for pool, gen in other.gens.items():
            self.gens[pool] = max(gen, self.gens.get(pool, 0))

    def rated(self, outputs: Sequence[RatingOutput]) -> None:
        """Ratings of a step that is committed (or found applied before): handed on, or kept in ``outputs``."""
        if self.hand is None:
            self.outputs.extend(outputs)
        elif outputs:
            self.hand(outputs)
