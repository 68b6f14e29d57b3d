"""Rounds that never complete: small in memory, expired oldest first in bounded slices, each
marked done in Redis; a slice whose Redis write fails is written by the next expiry.

Real Redis; the store subclass only records (or, once, refuses) what reaches it.
"""

from __future__ import annotations

import asyncio
import gc
import tracemalloc
import uuid
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
import redis.exceptions

from stream.service.config import Settings
from stream.service.processor import Message, Processor
from stream.service.round_book import EXPIRE_SLICE
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

T0 = 1_700_000_000_000  # the clock the rounds open at (ms)
TIMEOUT_MS = 300_000


class RecordingStore(RedisStore):
    """A real store that records each ``expire_rounds`` call, and refuses the first ``fail`` of them."""

    slices: list[list[tuple[str, str]]]
    fail = 0

    async def expire_rounds(self, rounds: Sequence[tuple[str, str]]) -> dict[str, tuple[list[str], int | None]]:
        self.slices.append(list(rounds))
        if self.fail:
            self.fail -= 1
            raise redis.exceptions.ConnectionError("refused by the test")
        return await super().expire_rounds(rounds)


def _store(redis_url: str) -> RecordingStore:
    store = RecordingStore.from_url(redis_url, prefix=f"rx{uuid.uuid4().hex[:6]}")
    assert isinstance(store, RecordingStore)
    store.slices = []
    return store


def _result(i: int, player: str = "a", rank: int = 1) -> dict[str, Any]:
    return {"type": "round_result", "event_id": f"r{i}-{player}", "pool": f"pool{i % 3}", "round_id": f"R{i}",
            "time": 5, "player": player, "rank": rank}


def _completed(i: int, n: int) -> dict[str, Any]:
    return {"type": "round_completed", "event_id": f"r{i}-done", "pool": f"pool{i % 3}", "round_id": f"R{i}",
            "time": 9, "participants": n}


def _msgs(bodies: list[dict[str, Any]], first: int = 0) -> list[Message]:
    return [Message("results", 0, first + k, orjson.dumps(b)) for k, b in enumerate(bodies)]


async def _open_rounds(proc: Processor, n: int) -> None:
    """``n`` rounds with one result each, opened in the order of their index (one batch each, so
    the clock the round book reads moves on; the test expires with a clock far past all)."""
    for k in range(0, n, 200):
        res = await proc.process(_msgs([_result(i) for i in range(k, min(n, k + 200))], k))
        assert not res.dead and not res.outputs


def test_due_rounds_are_expired_oldest_first_in_bounded_slices(redis_url: str) -> None:
    n = 2 * EXPIRE_SLICE + 7

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            await _open_rounds(proc, n)
            opened = [(r.pool, r.round_id) for r in proc.rounds.assembler.open_rounds()]
            assert sorted(opened) == sorted((f"pool{i % 3}", f"R{i}") for i in range(n))
            opened_at = {(pool, rid.decode()): int(t) for pool in ("pool0", "pool1", "pool2")
                         for rid, t in await store.r.zrange(store.key(pool, "open"), 0, -1, withscores=True)}
            assert sorted(opened_at) == sorted(opened)  # every open round is in Redis's index of open rounds
            assert await proc.expire(10**15 // 2) != []  # far in the future: every round is due
            assert len(store.slices) > 2 and all(len(s) <= EXPIRE_SLICE for s in store.slices)
            swept = [key for s in store.slices for key in s]
            assert sorted(swept) == sorted(opened)  # each once
            for pool in ("pool0", "pool1", "pool2"):  # oldest first
                times = [opened_at[key] for key in swept if key[0] == pool]
                assert times == sorted(times)
            assert len(proc.rounds.assembler) == 0
            assert [await store.r.exists(store.key(pool, "open")) for pool in ("pool0", "pool1", "pool2")] == [0] * 3
            assert await store.r.exists(store.keys.open_rounds_key("results/0")) == 0  # no pool left with open rounds
            for pool in ("pool0", "pool1", "pool2"):
                done = {m.decode() for m in await store.r.smembers(store.key(pool, "done"))}
                assert done == {f"R{i}" for i in range(n) if f"pool{i % 3}" == pool}
            assert [k async for k in store.r.scan_iter(match=f"{store.prefix}:*:pend:*")] == []
            late = await proc.process(_msgs([_completed(5, 1)], n))  # a completion after its round expired
            assert [d.reason for d in late.dead] == ["field round_id: round 'R5' was already rated (late event)"]
            assert late.outputs == []
        await store.close()

    asyncio.run(run())


def test_expiry_returns_one_dead_letter_per_due_round_and_keeps_the_others(redis_url: str) -> None:
    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            await _open_rounds(proc, 10)
            assert await proc.expire(0) == []  # nothing is due yet
            dead = await proc.expire(10**15 // 2)
            assert sorted((d.pool, d.reason) for d in dead) == sorted(
                (f"pool{i % 3}", f"round 'R{i}': round timed out with 1/? results") for i in range(10))
            assert await proc.expire(10**15 // 2) == []
        await store.close()

    asyncio.run(run())


def test_a_slice_whose_redis_write_fails_is_written_by_the_next_expiry(redis_url: str) -> None:
    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            await _open_rounds(proc, 4)
            store.fail = 1
            with pytest.raises(redis.exceptions.ConnectionError):
                await proc.expire(10**15 // 2)
            assert not await store.r.sismember(store.key("pool1", "done"), "R1")
            proc.rounds.forget()  # a failed batch drops the round memory: the expired rounds stay expired
            late = await proc.process(_msgs([_result(1, "b", 2), _completed(1, 2)], 100))
            assert [d.reason for d in late.dead] == ["field round_id: round 'R1' was already rated (late event)"] * 2
            assert late.outputs == []
            dead = await proc.expire(0)  # written now, whatever the clock says
            assert sorted((d.pool, d.reason) for d in dead) == sorted(
                (f"pool{i % 3}", f"round 'R{i}': round timed out with 1/? results") for i in range(4))
            assert [len(s) for s in store.slices] == [4, 4]
            assert await store.r.sismember(store.key("pool1", "done"), "R1")
            assert await proc.expire(10**15 // 2) == []
        await store.close()

    asyncio.run(run())


def test_an_open_round_costs_the_worker_less_than_a_kilobyte(redis_url: str) -> None:
    """Rounds that never complete stay in memory until they time out (MMR_ROUND_TIMEOUT), so
    each keeps only what dispatching it needs: its ids once, not a second copy per layer."""
    n = 5000

    async def run() -> None:
        store = _store(redis_url)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            await _open_rounds(proc, 200)  # the pools' state (engines, id indexes) outside the measure
            msgs = _msgs([_result(i) for i in range(200, 200 + n)], 200)
            gc.collect()
            tracemalloc.start()
            try:
                base = tracemalloc.get_traced_memory()[0]
                for k in range(0, n, 500):
                    await proc.process(msgs[k:k + 500])
                gc.collect()
                held = tracemalloc.get_traced_memory()[0] - base
            finally:
                tracemalloc.stop()
            assert len(proc.rounds.assembler) == 200 + n
            assert held / n < 1000, held / n
        await store.close()

    asyncio.run(run())


def test_with_publish_a_slice_is_published_before_its_write_and_once_when_the_write_is_retried(
        redis_url: str) -> None:
    async def run() -> None:
        store = _store(redis_url)
        published: list[tuple[str, str, int]] = []  # (pool, reason, expire_rounds calls made when published)

        async def publish(dead: Sequence[Any]) -> None:
            published.extend((d.pool, d.reason, len(store.slices)) for d in dead)

        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            await _open_rounds(proc, 4)
            store.fail = 1
            with pytest.raises(redis.exceptions.ConnectionError):
                await proc.expire(10**15 // 2, publish=publish)
            expected = sorted((f"pool{i % 3}", f"round 'R{i}': round timed out with 1/? results", 0)
                              for i in range(4))
            assert sorted(published) == expected  # on the broker before the slice was marked done
            assert await proc.expire(0, publish=publish) == []  # the slice written, not published again
            assert sorted(published) == expected
            assert [len(s) for s in store.slices] == [4, 4]
            assert await store.r.sismember(store.key("pool1", "done"), "R1")
        await store.close()

    asyncio.run(run())
