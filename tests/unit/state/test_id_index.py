"""The worker's index of applied event ids (stream.state.id_index) against a plain Python set."""

from __future__ import annotations

import numpy as np
import pytest
import xxhash
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.state.id_index import DIGEST, DigestSet, PoolIds, digests, keys_of

ids_strategy = st.lists(st.text(min_size=1, max_size=12), max_size=60)


def test_digests_are_xxh3_128_of_the_utf8_bytes_in_order() -> None:
    ids = ["m1", "ü-2", "x" * 128]
    blob = digests(ids)
    assert blob == b"".join(xxhash.xxh3_128_digest(i.encode()) for i in ids)
    assert len(blob) == DIGEST * len(ids) and keys_of(blob).shape == (3, 2)
    assert digests([]) == b"" and keys_of(b"").shape == (0, 2)


def test_a_log_that_is_not_whole_digests_is_refused() -> None:
    with pytest.raises(ValueError, match="not a whole number"):
        keys_of(b"\x00" * 17)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.tuples(st.booleans(), ids_strategy), max_size=12))
def test_digest_set_answers_like_a_python_set(steps: list[tuple[bool, list[str]]]) -> None:
    """Any sequence of adds and membership queries, across the table's growth."""
    table, oracle = DigestSet(), set()
    for add, ids in steps:
        keys = keys_of(digests(ids))
        if add:
            table.add(keys)
            oracle.update(ids)
        assert table.contains(keys).tolist() == [i in oracle for i in ids]
        assert table.count == len(oracle)


def test_digest_set_grows_and_keeps_every_member() -> None:
    table = DigestSet()
    ids = [f"e{i}" for i in range(50_000)]
    for k in range(0, len(ids), 7_000):
        table.add(keys_of(digests(ids[k:k + 7_000])))
    assert table.count == 50_000 and len(table.hi) >= 50_000 / 0.7
    assert table.contains(keys_of(digests(ids))).all()
    assert not table.contains(keys_of(digests([f"f{i}" for i in range(50_000)]))).any()


def test_the_all_zero_digest_is_a_member_like_any_other() -> None:
    """(0, 0) marks an empty slot; the digest that is all zeros must still be stored and found."""
    zero = np.zeros((1, 2), dtype=np.uint64)
    table = DigestSet()
    assert not table.contains(zero).any()
    table.add(zero)
    assert table.contains(zero).all() and table.count == 1
    assert table.contains(np.array([[0, 1]], dtype=np.uint64)).all()  # its stand-in (documented alias)
    assert not table.contains(np.array([[1, 0]], dtype=np.uint64)).any()
    table.add(keys_of(digests(["a"])))
    assert table.count == 2


@settings(max_examples=40, deadline=None)
@given(st.lists(ids_strategy, max_size=10), st.integers(min_value=1, max_value=20))
def test_pool_ids_mirror_a_rotating_log(batches: list[list[str]], cap: int) -> None:
    """``PoolIds`` fed as the commit script rotates the log (append, then rotate once it holds
    ``cap`` ids) answers for exactly the ids of both generations, and its length is the log's."""
    idx = PoolIds(0)
    log: list[str] = []
    old: list[str] = []
    for ids in batches:
        idx.append(digests(ids))
        log += ids
        if ids and len(log) >= cap:
            old, log = log, []
            idx.rotate(idx.epoch + 1)
        assert idx.length == DIGEST * len(log)
        probe = [*ids, *old[:3], "never-recorded"]
        assert idx.contains(keys_of(digests(probe))).tolist() == [p in set(log) | set(old) for p in probe]
    rebuilt = PoolIds(idx.epoch, digests(log), digests(old))  # what a full read rebuilds
    everything = [*log, *old, "never-recorded"]
    assert rebuilt.contains(keys_of(digests(everything))).tolist() == idx.contains(
        keys_of(digests(everything))).tolist()
    assert rebuilt.length == idx.length
