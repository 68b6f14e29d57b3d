"""The history lists through the real ``Processor`` and Redis: off with a limit of 0, capped, and a key
that holds another type skipped without refusing the commit."""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor

import orjson
import pytest

from stream.service.config import Settings
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _match(i: int, a: str, b: str) -> Message:
    return Message("in", 0, i, orjson.dumps({"type": "match", "event_id": f"e{i}", "pool": "h", "time": i,
                                             "a": a, "b": b, "score": 1.0}))


async def _rate(redis_url: str, limit: int, batches: int, before: bool = False) -> tuple[RedisStore, list[dict]]:
    s = Settings(redis_url=redis_url, key_prefix=f"hist{uuid.uuid4().hex[:6]}", system="elo",
                 redis_cluster=False)
    store = RedisStore.from_url(redis_url, prefix=s.key_prefix, history_limit=limit)
    if before:  # another program's value under a player's history key
        await store.r.set(store.keys.history_key("h", "bob"), b"not a list")
    outputs = []
    with ThreadPoolExecutor(1) as ex:
        proc = Processor(s, store, ex)
        for i in range(batches):
            res = await proc.process([_match(i, "ann", "bob")])
            assert res.dead == []
            outputs += [o for o in res.outputs if o.player == "ann"]
    return store, [{"version": o.version, "rating": o.rating, "event_id": o.event_id} for o in outputs]


def test_capped_off_and_foreign_keys(redis_url: str) -> None:
    async def check() -> None:
        store, ann = await _rate(redis_url, 4, 7)
        raw, hist = await store.history("h", "ann")
        assert raw is not None
        assert [{k: h[k] for k in ("version", "rating", "event_id")} for h in hist] == ann[-4:]
        await store.close()

        store, ann = await _rate(redis_url, 0, 3)
        assert (await store.history("h", "ann"))[1] == []
        assert not await store.r.exists(store.keys.history_key("h", "ann"))
        await store.close()

        store, ann = await _rate(redis_url, 5, 2, before=True)
        assert [h["version"] for h in (await store.history("h", "ann"))[1]] == [1, 2]
        assert await store.r.get(store.keys.history_key("h", "bob")) == b"not a list"
        assert (await store.beliefs("h", ["bob"]))["bob"] is not None  # the commit landed
        await store.close()

    asyncio.run(check())
