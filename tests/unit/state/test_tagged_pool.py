"""A worker step's values held in an arena (``stream.state.tagged_pool``) against the stored dict."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from stream.state.packed_pool import FlatBeliefs
from stream.state.tagged_pool import TaggedPool


def _belief(rng: np.random.Generator, length: int) -> bytes:
    return rng.normal(size=length).astype("<f8").tobytes()


def test_a_tagged_pool_reads_its_values_at_first_sight_and_answers_as_the_store_would_hold_it() -> None:
    """``TaggedPool``: values (tag + packed belief) read from the stored dict into the arena at the
    first round, all at once, in the dict's order; ``get`` gives the value as stored, then as
    rated; the stored dict itself is never written; the commit's values come from the arena."""
    rng = np.random.default_rng(2)
    tag = b"\x01"
    stored: dict[str, bytes | None] = {"a": tag + _belief(rng, 9), "b": tag + _belief(rng, 6), "gone": None}
    before = dict(stored)
    held = TaggedPool(stored, tag)
    assert held.get("a") == stored["a"] and held.get("gone") is None and held.get("x") is None
    idx = held.indices(["b", "new", "a"])
    assert idx is not None and idx.tolist() == [1, -1, 0]  # the stored dict's order; the newcomer has no value
    assert held["b"] == stored["b"] and held["a"] == stored["a"] and "new" not in held
    prior = np.arange(6, dtype=np.float64)
    flat, offsets = held.pool.gather(idx, prior)
    assert flat.tobytes() == stored["b"][1:] + prior.tobytes() + stored["a"][1:]  # type: ignore[index]
    out = np.concatenate([flat, [7.0, 8.0, 9.0]])  # "a" grew by a term
    out_offsets = np.array([0, 6, 12, 24], dtype=np.int64)
    changed = FlatBeliefs(["b", "new", "a"], idx, out, out_offsets, held.pool, tag)
    assert changed["a"] == tag + out[12:].tobytes()  # as the store holds it
    held.update(changed)
    assert held["a"] == tag + out[12:].tobytes() and held["new"] == tag + prior.tobytes()
    held.update({"c": tag + _belief(rng, 6)})  # a value of the per-belief path, one by one
    assert sorted(held) == ["a", "b", "c", "new"] and len(held) == 4
    assert stored == before
    players = ["new", "a", "c"]
    flat, offsets = held.encoded(players)
    assert [tag + flat[s:e].tobytes() for s, e in itertools.pairwise(offsets.tolist())] == \
        [held[p] for p in players]
    with pytest.raises(KeyError):
        held.encoded(["gone"])


@pytest.mark.parametrize("raw", [b"\x02" + bytes(48), b"\x01" + bytes(47), b""])
def test_a_tagged_pool_refuses_a_value_not_of_its_codec_and_reads_nothing(raw: bytes) -> None:
    """A value without the tag or not whole float64 values: ``indices`` is None (the per-belief
    path names it), and no player of that round was read into the arena."""
    stored: dict[str, bytes | None] = {"ok": b"\x01" + bytes(48), "bad": raw}
    held = TaggedPool(stored, b"\x01")
    assert held.indices(["ok", "bad"]) is None
    assert len(held.pool) == 0 and held["bad"] == raw
    idx = held.indices(["ok"])
    assert idx is not None and idx.tolist() == [0]


def test_a_tagged_pool_with_a_bad_value_reads_each_value_when_a_round_first_names_it() -> None:
    """One stored value not of the codec: nothing is read at once; rounds without its player
    read theirs when they first name them, a round with it is refused (None) and reads nothing."""
    tag = b"\x01"
    stored: dict[str, bytes | None] = {"a": tag + bytes(16), "bad": b"\x02" + bytes(16), "b": tag + bytes(8)}
    held = TaggedPool(stored, tag)
    idx = held.indices(["b"])
    assert idx is not None and idx.tolist() == [0] and list(held.pool.names) == ["b"]
    assert held.indices(["a", "bad"]) is None and list(held.pool.names) == ["b"]
    idx = held.indices(["a", "new"])
    assert idx is not None and idx.tolist() == [1, -1] and held["a"] == stored["a"]


def test_put_gives_the_indices_with_the_newcomers_registered() -> None:
    """``TaggedPool.put``: the round's new values taken in one copy, as ``update``, and each
    player's index in the arena, a newcomer's (−1 when gathered) the one it was given."""
    tag = b"\x01"
    stored: dict[str, bytes | None] = {"a": tag + bytes(16), "b": tag + bytes(8), "x": None}
    held = TaggedPool(stored, tag)
    idx = held.indices(["x", "b", "y"])
    assert idx is not None and idx.tolist() == [-1, 1, -1]
    flat = np.arange(6, dtype=np.float64)
    got = held.put(FlatBeliefs(["x", "b", "y"], idx, flat, np.array([0, 2, 3, 6], dtype=np.int64), held.pool, tag))
    assert got.tolist() == [2, 1, 3] and idx.tolist() == [-1, 1, -1]
    assert [held.pool.index[p] for p in ("x", "b", "y")] == got.tolist()
    assert held["y"] == tag + flat[3:].tobytes() and held["b"] == tag + flat[2:3].tobytes()
    with pytest.raises(ValueError):
        held.put(FlatBeliefs(["a"], np.array([0]), flat[:2], np.array([0, 2]), TaggedPool(stored, tag).pool, tag))


@pytest.mark.parametrize("tag", [b"\x01", b"\x02\x03"])
def test_values_are_read_without_their_tags_byte_for_byte(tag: bytes) -> None:
    """A step's values read at once (``_read``) hold exactly the bytes after each tag, in order,
    whatever the lengths; one value without the tag, or not whole float64 values, reads nothing."""
    rng = np.random.default_rng(5)
    lengths = [0, 1, 7, 300, 2, 0, 45]
    stored: dict[str, bytes | None] = {f"p{i}": tag + _belief(rng, n) for i, n in enumerate(lengths)}
    held = TaggedPool(stored, tag)
    idx = held.indices(list(stored))
    assert idx is not None and idx.tolist() == list(range(len(lengths)))
    assert all(held[p] == v for p, v in stored.items())
    flat, offsets = held.pool.gather(idx, np.empty(0))
    assert flat.tobytes() == b"".join(v[len(tag):] for v in stored.values() if v is not None)
    assert np.diff(offsets).tolist() == lengths
    for bad in (b"\x09" + _belief(rng, 3), tag + b"\x00" * 9, tag[:-1]):
        broken = dict(stored, p3=bad)
        assert TaggedPool(broken, tag).indices(list(broken)) is None  # the per-belief path then names it
