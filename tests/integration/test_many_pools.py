"""Many pools in one batch never exhaust the store's Redis connection pool.

A take batch holds one atomic step per pool; every step needs Redis connections (meta,
snapshot, commit). One batch of single matches from thousands of distinct pools, through the
store's default connection pool (redis-py's 100 connections), must be rated whole.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from stream.service.config import Settings
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

POOLS = 4000


def test_a_batch_of_thousands_of_pools_is_rated_through_the_default_connection_pool(redis_url: str) -> None:
    msgs = [Message("in", 0, i, orjson.dumps({"type": "match", "event_id": f"e{i}", "pool": f"pool{i}", "time": i,
                                               "a": "a", "b": "b", "score": 1.0}))
            for i in range(POOLS)]

    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"mp{uuid.uuid4().hex[:6]}")
        try:
            with ThreadPoolExecutor(1) as ex:
                res = await Processor(Settings(system="elo"), store, ex).process(msgs)
            assert res.dead == []
            assert sorted((o.pool, o.player) for o in res.outputs) == sorted(
                (f"pool{i}", p) for i in range(POOLS) for p in "ab")
            assert len(await store.pools()) == POOLS
            rated = {o.player: o.rating for o in res.outputs if o.pool == "pool17"}
            assert dict((await store.page("pool17", 0, 2))[0]) == rated
        finally:
            await store.close()

    asyncio.run(run())
