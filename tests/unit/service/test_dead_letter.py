"""Dead letters stay small whatever arrived: a prefix of the original, its size and digest.

The producer refuses messages over 1 MB; a dead letter that cannot be published stops the
partition, so its envelope must be bounded for any input."""

from __future__ import annotations

import asyncio
import base64
import hashlib
import os
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from stream.service.config import Settings
from stream.service.messages import MAX_FIELD, ORIGINAL_PREFIX, DeadLetter
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

LIMIT = 64 << 10  # "well under" the producer's 1 MB


def _check(original: bytes) -> dict[str, object]:
    d = DeadLetter("bad JSON: x", "in", 2, 7, original, None, "p")
    raw = d.encode()
    assert len(raw) < LIMIT, len(raw)
    obj = orjson.loads(raw)
    assert obj["original_size"] == len(original)
    assert obj["original_sha256"] == hashlib.sha256(original).hexdigest()
    assert obj["original_truncated"] == (len(original) > ORIGINAL_PREFIX)
    assert (obj["topic"], obj["partition"], obj["offset"], obj["reason"]) == ("in", 2, 7, "bad JSON: x")
    return obj


@pytest.mark.parametrize("size", [300_000, 8 << 20])
def test_an_oversized_control_byte_message_gives_a_small_dead_letter(size: int) -> None:
    obj = _check(b"\x01" * size)
    assert obj["original"] == "\x01" * ORIGINAL_PREFIX and obj["original_b64"] is None


@pytest.mark.parametrize("size", [300_000, 8 << 20])
def test_an_oversized_binary_message_carries_a_base64_prefix(size: int) -> None:
    original = os.urandom(size)
    obj = _check(original)
    assert obj["original"] is None
    assert isinstance(obj["original_b64"], str) and base64.b64decode(obj["original_b64"]) == original[:ORIGINAL_PREFIX]


def test_a_text_prefix_cut_inside_a_character_drops_the_partial_character() -> None:
    original = ("a" + "é" * 300_000).encode()  # the prefix ends on the first byte of an "é"
    obj = _check(original)
    assert obj["original"] == "a" + "é" * ((ORIGINAL_PREFIX - 1) // 2)


def test_a_small_message_is_carried_whole() -> None:
    obj = _check(b'{"type": "match"')
    assert obj["original"] == '{"type": "match"' and not obj["original_truncated"]
    obj = _check(b"\xff{oops")
    assert obj["original"] is None and base64.b64decode(str(obj["original_b64"])) == b"\xff{oops"


def test_an_oversized_pool_name_is_clipped_and_not_used_as_key() -> None:
    """Fields that come from an invalid message (its pool, event id, a reason quoting it) are bounded too."""
    raw = orjson.dumps({"type": "match", "pool": "x" * (8 << 20), "event_id": "e" * (1 << 20)})
    with ThreadPoolExecutor(1) as ex:  # invalid input: no Redis is asked
        proc = Processor(Settings(), RedisStore.from_url("redis://127.0.0.1:1", cluster=False), ex)
        res = asyncio.run(proc.process([Message("in", 0, 5, raw)]))
    (d,) = res.dead
    assert d.key() is None
    enc = d.encode()
    assert len(enc) < LIMIT
    obj = orjson.loads(enc)
    assert obj["original_size"] == len(raw) and obj["offset"] == 5
    assert all(v is None or len(v) <= MAX_FIELD + 40 for v in (obj["pool"], obj["event_id"], obj["reason"]))
