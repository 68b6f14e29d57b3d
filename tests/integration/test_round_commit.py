"""A round is done only when its commit is: a Redis connection lost at the commit loses no round.

A private ``redis-server`` (AOF, fsync always, so a restart keeps every acknowledged write) is
SIGKILLed just before the commit of an assembled round and started again; the batch is
retried. The round must be rated once, none of its events dead-lettered, no event id recorded
twice, and a pool of the same batch whose commit landed before the kill must publish its
ratings once -- exactly what the same batches give without the fault.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from local_servers import RedisServer

from stream.service.config import Settings
from stream.service.processor import BatchResult, Message, Processor
from stream.state.id_index import DIGEST
from stream.state.redis_store import Commit, RedisStore

pytestmark = pytest.mark.integration


class KilledAtCommit(RedisStore):
    """A real store whose Redis is SIGKILLed right before the first commit that marks a round done
    (after ``wait_pool``'s commit landed), and started again once that commit failed."""

    server: RedisServer
    wait_pool = ""
    landed: asyncio.Event
    kills = 0

    async def commit(self, pool: str, gen: str, c: Commit, *args: Any, **kwargs: Any) -> int:
        if self.kills or not c.done_rounds or pool == self.wait_pool:
            new_gen = await super().commit(pool, gen, c, *args, **kwargs)
            if pool == self.wait_pool:
                self.landed.set()
            return new_gen
        await asyncio.wait_for(self.landed.wait(), 60)
        self.server.kill()
        self.kills += 1
        try:
            return await super().commit(pool, gen, c, *args, **kwargs)
        finally:
            self.server.start()


def _msg(offset: int, body: dict[str, Any]) -> Message:
    return Message("results", 0, offset, orjson.dumps(body))


def _result(eid: str, pool: str, rid: str, player: str, rank: int) -> dict[str, Any]:
    return {"type": "round_result", "event_id": eid, "pool": pool, "round_id": rid, "time": 1000,
            "player": player, "rank": rank}


def _completed(eid: str, pool: str, rid: str, n: int) -> dict[str, Any]:
    return {"type": "round_completed", "event_id": eid, "pool": pool, "round_id": rid, "time": 2000,
            "participants": n}


FIRST = [_result("pa", "p", "R", "A", 1), _result("pb", "p", "R", "B", 2)]
SECOND = [_result("qa", "q", "S", "X", 2), _result("qb", "q", "S", "Y", 1), _completed("qc", "q", "S", 2),
          _result("pc", "p", "R", "C", 3), _completed("pd", "p", "R", 3)]


async def _run(store: RedisStore) -> tuple[list[BatchResult], dict[str, list[bytes]]]:
    with ThreadPoolExecutor(1) as ex:
        proc = Processor(Settings(), store, ex)
        first = await proc.process([_msg(i, b) for i, b in enumerate(FIRST)])
        second = await proc.start([_msg(10 + i, b) for i, b in enumerate(SECOND)], safe=True)
        ids: dict[str, list[bytes]] = {}
        for pool in ("p", "q"):
            log = await store.r.get(store.key(pool, "ids")) or b""
            ids[pool] = [log[i:i + DIGEST] for i in range(0, len(log), DIGEST)]
        return [first, second], ids


def _outputs(res: BatchResult) -> list[tuple[str, str, float, int, str]]:
    return sorted((o.pool, o.player, o.rating, o.version, o.event_id) for o in res.outputs)


def test_a_round_whose_commit_failed_is_rated_once_on_the_retry(private_redis: RedisServer) -> None:
    async def run() -> None:
        client = aioredis.Redis.from_url(private_redis.url)
        ref_store = RedisStore(client, prefix=f"ref{uuid.uuid4().hex[:6]}")
        want, want_ids = await _run(ref_store)
        assert not want[1].dead and len(want[1].outputs) == 5
        want_top = [(await ref_store.page(pool, 0, 10))[0] for pool in ("p", "q")]
        await ref_store.close()

        store = KilledAtCommit(aioredis.Redis.from_url(private_redis.url), prefix=f"t{uuid.uuid4().hex[:6]}")
        store.server, store.wait_pool, store.landed = private_redis, "q", asyncio.Event()
        got, got_ids = await _run(store)
        assert store.kills == 1
        assert [d.reason for d in got[1].dead] == []
        assert _outputs(got[1]) == _outputs(want[1])  # each player of R and S once, as without the fault
        for pool in ("p", "q"):
            assert len(set(got_ids[pool])) == len(got_ids[pool]) == len(want_ids[pool]), pool
        assert await store.r.sismember(store.key("p", "done"), "R")
        assert not await store.r.exists(store.keys.pend_key("p", "R"))
        assert [(await store.page(pool, 0, 10))[0] for pool in ("p", "q")] == want_top
        await store.close()

    asyncio.run(run())
