"""A bug in the rating step halts the partition of its message; it is neither dead-lettered nor a crash.

The processor on a real Redis (no broker): ``faults.rating_bug`` (tests/faults.py) makes
one pool's rating step raise on the numba thread, as a bug in a kernel would; a pool whose Redis
key holds another type (``StateError``) is the other kind of error that is neither the input's
nor the infrastructure's. The worker end to end (pause, acks, /healthz, restart with a fix) is
tests/integration/test_rating_bug_worker.py.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
from faults import rating_bug

from stream.service.config import Settings
from stream.service.processor import MAX_ATTEMPTS, Message, Processor
from stream.state.redis_store import Commit, Conflict, RedisStore

pytestmark = pytest.mark.integration

SETTINGS = Settings(system="elo")


def _match(offset: int, partition: int, pool: str, eid: str, a: str = "x", b: str = "y") -> Message:
    return Message("in", partition, offset, orjson.dumps({"type": "match", "pool": pool, "event_id": eid,
                                                           "time": offset, "a": a, "b": b, "score": 1.0}))


def _sample(proc: Processor, name: str, labels: dict[str, str] | None = None) -> float | None:
    return proc.metrics.registry.get_sample_value(name, labels or {})


async def _rounds(store: RedisStore, pool: str) -> dict[str, int]:
    from stream.service.export import export_rows

    return {r["player"]: r["rounds"] for r in await export_rows(store) if r["pool"] == pool}


def test_a_bug_halts_its_partition_at_its_message_and_the_rest_goes_on(redis_url: str) -> None:
    # partition 0: pool a only; partition 1: pool c, then the bug's pool (offset 11), then more of both
    first = [_match(0, 0, "a", "a0"), _match(10, 1, "c", "c0"), _match(11, 1, "bug", "b0"),
             _match(1, 0, "a", "a1"), _match(12, 1, "bug", "b1")]
    later = [_match(2, 0, "a", "a2"), _match(13, 1, "c", "c1"), _match(14, 1, "d", "d0")]

    async def run() -> dict[str, Any]:
        store = RedisStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(SETTINGS, store, ex)
            paused: list[tuple[str, int, int]] = []
            proc.halts.on_halt = lambda h: paused.append((h.topic, h.partition, h.offset))
            with rating_bug("bug"):
                res = await proc.start(first)
                res2 = await proc.start(later)
            out = {"res": res, "res2": res2, "paused": paused, "halts": proc.halts.listing(),
                   "held": [proc.halts.held(m) for m in first + later],
                   "halted": _sample(proc, "mmr_partitions_halted"),
                   "bugs": _sample(proc, "mmr_rating_bugs_total", {"kind": "bug", "action": "halted"}),
                   "a": await _rounds(store, "a"), "c": await _rounds(store, "c"), "d": await _rounds(store, "d"),
                   "bug": await _rounds(store, "bug")}
        await store.close()
        return out

    out = asyncio.run(run())
    assert out["res"].dead == [] and out["res2"].dead == []  # valid input: never a dead letter
    assert out["paused"] == [("in", 1, 11)]
    [halt] = out["halts"]
    assert (halt["topic"], halt["partition"], halt["offset"], halt["pool"], halt["event_id"], halt["kind"]) == (
        "in", 1, 11, "bug", "b0", "bug")
    assert "injected bug" in halt["error"]
    assert out["held"] == [False, False, True, False, True, False, True, True]
    assert out["halted"] == 1 and out["bugs"] == 1
    assert out["bug"] == {} and out["d"] == {}  # nothing of the halted partition from the bug's message on
    assert out["c"] == {"x": 1, "y": 1}  # c0 (before it) applied, c1 (after it, a later batch) not
    assert out["a"] == {"x": 3, "y": 3}  # the other partition goes on
    assert {o.pool for o in out["res2"].outputs} == {"a"}


def test_a_fixed_processor_resumes_at_the_halted_message_and_ends_as_without_the_bug(redis_url: str) -> None:
    """What a restart with a fix does: the messages from the committed offset (the halted one) are
    delivered again, together with the ones the halted processor had applied and not acked; the
    end state is that of a processor that never had the bug, each event applied once."""
    first = [_match(0, 1, "c", "c0"), _match(1, 1, "bug", "b0"), _match(2, 1, "c", "c1", "y", "z"),
             _match(3, 1, "bug", "b1", "y", "x")]
    redelivered = first[1:]

    async def run() -> tuple[dict[str, int], dict[str, int], dict[str, int], dict[str, int]]:
        halted = RedisStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        clean = RedisStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        with ThreadPoolExecutor(1) as ex:
            buggy = Processor(SETTINGS, halted, ex)
            with rating_bug("bug"):
                await buggy.start(first)
            assert buggy.halts.listing()[0]["offset"] == 1
            fixed = Processor(SETTINGS, halted, ex)
            res = await fixed.start(redelivered)
            assert res.dead == []
            await Processor(SETTINGS, clean, ex).start(first)
        out = (await _rounds(halted, "c"), await _rounds(halted, "bug"), await _rounds(clean, "c"),
               await _rounds(clean, "bug"))
        await halted.close()
        await clean.close()
        return out

    c, bug, c_clean, bug_clean = asyncio.run(run())
    assert (c, bug) == (c_clean, bug_clean) == ({"x": 1, "y": 2, "z": 1}, {"x": 2, "y": 2})


def test_dead_letter_mode_and_a_pool_whose_keys_are_unusable(redis_url: str) -> None:
    """``MMR_ON_RATING_BUG=dead-letter``: the message is dead-lettered as an internal error (and
    counted as a bug), its partition goes on. A pool whose leaderboard key holds a string
    (``StateError``: the events are not at fault, an operator must look) halts like a bug, kind "state"."""
    batch = [_match(0, 0, "bug", "b0"), _match(1, 0, "c", "c0"), _match(2, 0, "bug", "b1")]

    async def run() -> tuple[Any, ...]:
        store = RedisStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(SETTINGS.with_(on_rating_bug="dead-letter"), store, ex)
            with rating_bug("bug"):
                res = await proc.start(batch)
            dl = (res, proc.halts.listing(), _sample(proc, "mmr_rating_bugs_total",
                                                     {"kind": "bug", "action": "dead_lettered"}),
                  _sample(proc, "mmr_dead_letters_total", {"reason": "internal"}), await _rounds(store, "c"))
            await store.r.set(store.key("broken", "lb"), b"not a sorted set")
            proc2 = Processor(SETTINGS, store, ex)
            res2 = await proc2.start([_match(5, 3, "c", "c1"), _match(6, 3, "broken", "k0"),
                                      _match(7, 3, "c", "c2", "y", "z")])
            st = (res2, proc2.halts.listing(), _sample(proc2, "mmr_rating_bugs_total",
                                                        {"kind": "state", "action": "halted"}))
        await store.close()
        return dl, st

    (res, halts, bugs, internal, c), (res2, halts2, state_bugs) = asyncio.run(run())
    assert [(d.offset, d.reason, d.pool, d.event_id) for d in res.dead] == [
        (0, "internal error (see worker log)", "bug", "b0"), (2, "internal error (see worker log)", "bug", "b1")]
    assert halts == [] and bugs == 2 and internal == 2 and c == {"x": 1, "y": 1}
    assert res2.dead == []
    [h] = halts2
    assert (h["partition"], h["offset"], h["pool"], h["kind"]) == (3, 6, "broken", "state")
    assert state_bugs == 1


def test_an_open_round_of_the_halted_partition_does_not_time_out_while_it_waits(redis_url: str) -> None:
    """Round ``R`` of pool ``y`` is open (its results arrived) when a bug halts its partition; its
    completion comes after the halt. However long the halt lasts, ``R`` is not expired (its
    completion is held, not late); the fixed processor rates it once."""

    def rr(offset: int, body: dict[str, Any]) -> Message:
        return Message("res", 1, offset, orjson.dumps({"pool": "y", "round_id": "R", "time": 5, **body}))

    results = [rr(0, {"type": "round_result", "event_id": "r1", "player": "p", "rank": 1}),
               rr(1, {"type": "round_result", "event_id": "r2", "player": "q", "rank": 2})]
    bug = Message("res", 1, 2, orjson.dumps({"type": "round", "pool": "bug", "event_id": "k", "round_id": "K",
                                             "time": 6, "standings": [{"player": "p", "rank": 1},
                                                                      {"player": "q", "rank": 2}]}))
    completed = rr(3, {"type": "round_completed", "event_id": "rc", "participants": 2})
    settings = SETTINGS.with_(system="elo-mmr")

    async def run() -> tuple[Any, ...]:
        store = RedisStore.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(settings, store, ex)
            with rating_bug("bug"):
                await proc.start(results)
                await proc.start([bug])
                held = await proc.start([completed])
                expired = await proc.expire(10**15 // 2)  # far in the future: any open round the worker holds is due
            fixed = Processor(settings, store, ex)
            res = await fixed.start([bug, completed])
            out = (proc.halts.listing(), held, expired, res, await _rounds(store, "y"), await _rounds(store, "bug"))
        await store.close()
        return out

    halts, held, expired, res, y, bug_pool = asyncio.run(run())
    assert [(h["offset"], h["pool"]) for h in halts] == [(2, "bug")]
    assert held.outputs == [] and held.dead == [] and expired == []
    assert res.dead == [] and y == {"p": 1, "q": 1} and bug_pool == {"p": 1, "q": 1}


class Contended(RedisStore):
    """A real store whose commits another writer wins ``lost`` times first (as a second owner of the pool would)."""

    lost = 0

    async def commit(self, pool: str, gen: str, c: Commit, *args: Any, **kwargs: Any) -> int:
        if self.lost > 0:
            self.lost -= 1
            raise Conflict(pool)
        return await super().commit(pool, gen, c, *args, **kwargs)


def test_a_pool_whose_commit_another_writer_keeps_winning_is_retried_not_halted(redis_url: str) -> None:
    """Contention is the infrastructure's, not a bug: more conflicts in a row than one step tries
    (``MAX_ATTEMPTS``) retry the batch later; nothing is halted or dead-lettered."""

    async def run() -> tuple[Any, ...]:
        store = Contended.from_url(redis_url, prefix=f"t{uuid.uuid4().hex[:8]}")
        assert isinstance(store, Contended)
        store.lost = 3 * MAX_ATTEMPTS + 3  # more than the batch, its retry and each message alone would try
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(SETTINGS, store, ex)
            res = await proc.start([_match(0, 0, "c", "c0"), _match(1, 0, "c", "c1", "y", "z")])
            out = (res, proc.halts.listing(), store.lost, await _rounds(store, "c"))
        await store.close()
        return out

    res, halts, left, c = asyncio.run(run())
    assert res.dead == [] and halts == [] and left == 0
    assert c == {"x": 1, "y": 2, "z": 1}
