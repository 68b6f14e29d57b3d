"""The state marks (stream.state.marks) against a real Redis: raised only, read back, and the check that a
restarted server holds what was acknowledged -- waiting, with one ERROR line, until a rebuild covers it."""

from __future__ import annotations

import asyncio
import logging
import uuid
from dataclasses import dataclass

import pytest
from conftest import in_loop

from stream.state.marks import (
    Lost,
    LostPool,
    LostWrites,
    clear_pool_marks,
    highest_offsets,
    lost,
    read_marks,
    write_marks,
)
from stream.state.redis_store import RedisStore


@dataclass
class Rec:
    topic: str
    partition: int
    offset: int


class Calls:
    """What the guard's wait called back, in order (``wait_until_whole``'s ``on_lost`` / ``on_whole``)."""

    def __init__(self) -> None:
        self.events: list[str] = []

    async def lost(self) -> None:
        self.events.append("lost")

    async def whole(self) -> None:
        self.events.append("whole")


def test_highest_offsets_per_partition() -> None:
    recs = [Rec("m", 0, 3), Rec("m", 1, 7), Rec("m", 0, 9), Rec("r", 0, 1), Rec("m", 0, 4)]
    assert highest_offsets(recs) == {"m/0": 9, "m/1": 7, "r/0": 1}


def test_lost_names_every_partition_not_covered() -> None:
    acked = {"m/0": 10, "m/1": 5, "r/0": 2}
    assert lost(acked, {"m/0": 10, "m/1": 7, "r/0": 2}) == []
    assert lost(acked, {"m/0": 9, "m/1": 7}) == [Lost("m/0", 10, 9), Lost("r/0", 2, None)]
    assert lost({}, {}) == []  # nothing acknowledged: nothing to lose
    assert "no mark" in str(Lost("r/0", 2, None)) and "up to offset 9" in str(Lost("m/0", 10, 9))


@in_loop
async def test_marks_are_raised_never_lowered(redis_url: str) -> None:
    store = RedisStore.from_url(redis_url, prefix=f"mk{uuid.uuid4().hex[:6]}", cluster=False)
    try:
        assert await write_marks(store, {"m/0": 5, "m/1": 2}) == 2
        assert await write_marks(store, {"m/0": 3, "m/1": 4, "r/0": 0}) == 2  # m/0 stays at 5
        assert await read_marks(store.r, store.prefix) == {"m/0": 5, "m/1": 4, "r/0": 0}
        assert await write_marks(store, {}) == 0
    finally:
        await store.close()


@in_loop
async def test_the_check_waits_for_a_rebuild_with_one_error_line(redis_url: str,
                                                                  caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="stream.state.marks")
    store = RedisStore.from_url(redis_url, prefix=f"mk{uuid.uuid4().hex[:6]}", cluster=False)
    guard = LostWrites(store, store.r, poll_s=0.05)
    calls = Calls()
    events, on_lost, on_whole = calls.events, calls.lost, calls.whole

    try:
        await guard.mark([Rec("m", 0, 4), Rec("m", 1, 2)])
        guard.acked([Rec("m", 0, 4), Rec("m", 1, 2)])
        await guard.wait_until_whole(on_lost, on_whole)  # every acknowledged offset covered: at once
        assert events == [] and guard.reason is None

        await store.r.delete(f"{store.prefix}:marks")  # the server lost its writes
        waiting = asyncio.ensure_future(guard.wait_until_whole(on_lost, on_whole))
        await asyncio.sleep(0.3)
        assert not waiting.done() and events == ["lost"]
        assert guard.reason is not None and "m/0: acknowledged up to offset 4, Redis holds no mark" in guard.reason
        await write_marks(store, {"m/0": 4})  # a rebuild covering one partition only: still waiting
        await asyncio.sleep(0.2)
        assert not waiting.done() and [str(x) for x in guard.missing] == [str(Lost("m/1", 2, None))]
        await write_marks(store, {"m/1": 9})  # and the other
        await asyncio.wait_for(waiting, 5)
        assert events == ["lost", "whole"] and guard.missing == [] and guard.reason is None
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "Redis lost acknowledged writes" in errors[0].getMessage()

        guard.forget([("m", 1)])
        assert guard.acknowledged == {"m/0": 4}
    finally:
        await store.close()


@in_loop
async def test_partitions_taken_up_are_checked_against_their_committed_offsets(
        redis_url: str, caplog: pytest.LogCaptureFixture) -> None:
    """The first record of a partition the worker got stands for the group's committed offset: the records
    before it were acknowledged, so the server must hold their marks (or be a state from before the marks)."""
    caplog.set_level(logging.WARNING, logger="stream.state.marks")
    store = RedisStore.from_url(redis_url, prefix=f"mk{uuid.uuid4().hex[:6]}", cluster=False)
    guard = LostWrites(store, store.r, poll_s=0.05)
    asked: list[list[tuple[str, int]]] = []

    async def earliest(tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        asked.append(tps)
        return {("m", 0): 0, ("m", 1): 5, ("m", 2): 0}

    try:
        await guard.taken_up([Rec("m", 0, 0), Rec("m", 0, 1), Rec("m", 1, 5)], earliest)  # from the start: fresh
        assert guard.acknowledged == {} and asked == [[("m", 0), ("m", 1)]]
        await guard.taken_up([Rec("m", 0, 2)], earliest)  # taken up already: not asked again
        assert len(asked) == 1

        await store.r.sadd(store.keys.pools_key(), "p")  # a state written before the marks
        await guard.taken_up([Rec("m", 2, 7)], earliest)
        assert await read_marks(store.r, store.prefix) == {"m/2": 6} and guard.acknowledged == {"m/2": 6}
        assert any("no state marks" in r.getMessage() for r in caplog.records)

        guard.forget([("m", 0)])  # revoked, then got again where the group committed 10: marks say 6 at most
        waiting = asyncio.ensure_future(guard.taken_up([Rec("m", 0, 11)], earliest))
        await asyncio.sleep(0.2)
        assert not waiting.done() and [str(x) for x in guard.missing] == [str(Lost("m/0", 10, None))]
        await write_marks(store, {"m/0": 10})
        await asyncio.wait_for(waiting, 5)
        assert guard.missing == []
    finally:
        await store.close()


@in_loop
async def test_a_pool_whose_node_lost_its_commits_is_found_by_its_counter(redis_url: str,
                                                                         caplog: pytest.LogCaptureFixture) -> None:
    """The pools' marks: a pool's commit counter acknowledged (and written with the next batch's marks) against
    the server's. A pool whose counter is gone -- its Redis Cluster node restarted empty while the partition marks,
    on another node, are intact -- is a loss: reported, recorded for every worker, waited out until a rebuild."""
    caplog.set_level(logging.WARNING, logger="stream.state.marks")
    store = RedisStore.from_url(redis_url, prefix=f"mk{uuid.uuid4().hex[:6]}", cluster=False)
    guard = LostWrites(store, store.r, poll_s=0.05)
    calls = Calls()
    events, on_lost, on_whole = calls.events, calls.lost, calls.whole

    gen = {p: store.keys.key(p, "gen") for p in ("p", "q")}
    try:
        await store.r.mset({gen["p"]: 3, gen["q"]: 2})
        guard.committed([Rec("m", 0, 4), Rec("m", 1, 1)], {"p": 3, "q": 2})
        assert guard.gens == {}  # not acknowledged yet: a crash may lose these commits without losing anything
        guard.acked([Rec("m", 1, 1)])  # a batch is acknowledged whole: any of its records stands for it
        assert guard.gens == {"p": 3, "q": 2}
        await guard.mark([Rec("m", 0, 5), Rec("m", 1, 2)])  # the next batch's marks carry them
        assert await read_marks(store.r, store.prefix) == {"m/0": 5, "m/1": 2, "pool:p": 3, "pool:q": 2}
        await guard.wait_until_whole(on_lost, on_whole)
        assert events == [] and guard.reason is None

        await store.r.delete(gen["p"])  # the node of p's slot restarted empty; the marks are intact
        waiting = asyncio.ensure_future(guard.wait_until_whole(on_lost, on_whole))
        await asyncio.sleep(0.3)
        assert not waiting.done() and events == ["lost"] and guard.missing == [LostPool("p", 3, 0)]
        assert guard.lost_pools == 1 and guard.lost_partitions == 0
        assert guard.reason is not None and "pool 'p': acknowledged up to commit 3, Redis holds none of its commits" \
            in guard.reason
        assert (await read_marks(store.r, store.prefix))["lost:p"] == 3  # recorded for every worker

        fresh = LostWrites(store, store.r)  # a worker started since: nothing in memory, the marks say it
        assert await fresh.check() == [LostPool("p", 3, 0)]
        await store.r.set(gen["p"], 1)  # counters below the acknowledged one are not enough: the loss is recorded
        await asyncio.sleep(0.2)
        assert not waiting.done() and guard.missing == [LostPool("p", 3, 1)]

        assert await clear_pool_marks(store) == 3  # `mmr rebuild`, at its end (p rebuilt in one commit)
        await asyncio.wait_for(waiting, 5)
        assert events == ["lost", "whole"] and guard.missing == [] and guard.gens == {}
        assert await read_marks(store.r, store.prefix) == {"m/0": 5, "m/1": 2}
        assert await fresh.check() == []
        errors = [r for r in caplog.records if r.levelno == logging.ERROR]
        assert len(errors) == 1 and "Redis lost acknowledged writes" in errors[0].getMessage()
    finally:
        await store.close()


@in_loop
async def test_counters_not_acknowledged_never_count(redis_url: str) -> None:
    """Counters of batches taken back (a restart) or of partitions revoked are never acknowledged; a marks hash
    without pool fields (a version before them) and pools with counters check as whole; a counter acknowledged
    with no batch after it is written by ``flush``."""
    store = RedisStore.from_url(redis_url, prefix=f"mk{uuid.uuid4().hex[:6]}", cluster=False)
    guard = LostWrites(store, store.r)
    try:
        await store.r.set(store.keys.key("p", "gen"), 7)
        await write_marks(store, {"m/0": 9, "m/1": 3})
        guard.committed([Rec("m", 0, 9)], {"p": 9})  # a commit a crash lost before it was on disk
        guard.rewound()
        guard.committed([Rec("m", 1, 3)], {"p": 8})
        guard.forget([("m", 1)])
        guard.committed([Rec("m", 0, 9)], {})  # nothing committed: nothing kept
        guard.acked([Rec("m", 0, 9), Rec("m", 1, 3)])
        assert guard.gens == {} and guard.unacknowledged_batches == 0
        assert await guard.check() == []
        guard.committed([Rec("m", 0, 10)], {"p": 7})
        guard.acked([Rec("m", 0, 10)])
        await guard.flush()  # no batch came to carry it: the housekeeping tick writes it
        assert (await read_marks(store.r, store.prefix))["pool:p"] == 7
    finally:
        await store.close()
