"""An open round is not forgotten by a failed batch or a restart: its expiry is found in Redis.

A round gets two of its three results and nothing more (its completion lost). A private
``redis-server`` (AOF, fsync always) is SIGKILLed while a later batch of another pool is being
applied and started again: the batch is retried, and the retry drops the worker's memory of open
rounds. The round must still time out, with the same dead letter as without the fault -- and so it
must for a worker started afresh (a restart), which never saw the round's results.
"""

from __future__ import annotations

import asyncio
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from local_servers import RedisServer
from service_utils import WorkerProcess, make_settings, produce_raw, read_json_topic, wait_caught_up, wait_for

from stream.service.config import Settings
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(180)]

FAR = 10**15 // 2  # a clock far past every deadline (ms)
SETTINGS = Settings(system="elo-mmr")


def _msg(offset: int, body: dict[str, Any]) -> Message:
    return Message("results", 0, offset, orjson.dumps(body))


def _result(pool: str, rid: str, player: str, rank: int) -> dict[str, Any]:
    return {"type": "round_result", "event_id": f"{pool}-{rid}-{player}", "pool": pool, "round_id": rid,
            "time": 1000, "player": player, "rank": rank}


OPEN = [_result("p", "R", "A", 1), _result("p", "R", "B", 2)]  # never completed
LATER = [_result("q", "S", "X", 1), _result("q", "S", "Y", 2),
         {"type": "round_completed", "event_id": "q-S-done", "pool": "q", "round_id": "S", "time": 2000,
          "participants": 2}]


async def _run(server: RedisServer, fault: str) -> tuple[list[tuple[str | None, str]], dict[str, Any]]:
    """``fault``: "" (none), "redis" (Redis killed under the later batch), "restart" (a new processor expires)."""
    store = RedisStore(aioredis.Redis.from_url(server.url, socket_connect_timeout=1), prefix=f"f{uuid.uuid4().hex[:6]}")
    with ThreadPoolExecutor(1) as ex:
        proc = Processor(SETTINGS, store, ex)
        first = await proc.process([_msg(i, b) for i, b in enumerate(OPEN)])
        assert not first.dead and not first.outputs
        if fault == "redis":
            server.kill()
            task = asyncio.ensure_future(proc.start([_msg(10 + i, b) for i, b in enumerate(LATER)], safe=True))
            for _ in range(200):
                await asyncio.sleep(0.05)
                if proc.store_down:
                    break
            assert proc.store_down and not task.done()  # the batch failed and is being retried
            server.start()
            later = await task
        else:
            later = await proc.process([_msg(10 + i, b) for i, b in enumerate(LATER)])
        assert not later.dead and len(later.outputs) == 2
        assert await proc.expire(0) == []  # not due yet
        if fault == "restart":
            proc = Processor(SETTINGS, store, ex)  # knows nothing of the round
            dead = await proc.expire(FAR, ["results/0"])  # the partitions it owns (stream.service.app)
        else:
            dead = await proc.expire(FAR)
        assert await proc.expire(FAR) == []  # once
        state = {"done": sorted(m.decode() for m in await store.r.smembers(store.key("p", "done"))),
                 "pending": await store.r.exists(store.keys.pend_key("p", "R")),
                 "open": await store.r.exists(store.key("p", "open")),
                 "hints": await store.r.exists(store.keys.open_rounds_key("results/0"))}
    await store.close()
    return sorted((d.pool, d.reason) for d in dead), state


@pytest.mark.parametrize("fault", ["redis", "restart"])
def test_an_open_round_forgotten_by_the_worker_still_times_out(private_redis: RedisServer, fault: str) -> None:
    async def run() -> None:
        want = await _run(private_redis, "")
        assert want == ([("p", "round 'R': round timed out with 2/? results")],
                        {"done": ["R"], "pending": 0, "open": 0, "hints": 0})
        assert await _run(private_redis, fault) == want

    asyncio.run(run())


def test_a_restarted_worker_times_out_a_round_whose_results_it_never_saw(kafka_bootstrap: str, redis_url: str,
                                                                        tmp_path: Path) -> None:
    """As deployed: a worker takes two results of a round, is stopped, and the round's completion never
    comes. The next worker never reads those results (they are acknowledged); it still dead-letters the
    round once it has held the partition for the round timeout."""
    # acks at once (not 3 s after the commit), and a timeout longer than taking the results and stopping: the
    # first worker must not time the round out itself
    s = make_settings(kafka_bootstrap, redis_url, round_timeout_s=6.0, redis_durable_after_s=0.0,
                      system="elo-mmr")
    results = [(b"default", orjson.dumps(_result("default", "RZ", p, k + 1))) for k, p in enumerate("AB")]
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log).start()
    try:
        produce_raw(s, s.topic_results, results)
        wait_caught_up(s, worker)
        worker.stop()  # its memory goes with it (a SIGKILL only adds the group's session timeout to the test)
        worker = WorkerProcess(s, log).start()
        dead = wait_for("the round's dead letter", lambda: read_json_topic(s, s.topic_dead), worker, every=0.5)
    finally:
        worker.stop()
    assert [(d["pool"], d["reason"]) for d in dead] == [("default", "round 'RZ': round timed out with 2/? results")]


def test_a_round_rated_meanwhile_is_not_dead_lettered_by_the_sweep(redis_url: str) -> None:
    """Processor A holds round S open; B (the pool's next owner, say) rates it: the commit takes S out of the
    open rounds, so A's sweep finds nothing; an entry left behind anyway is only cleaned up, never a dead letter."""
    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"g{uuid.uuid4().hex[:6]}")
        with ThreadPoolExecutor(1) as ex:
            a, b = Processor(SETTINGS, store, ex), Processor(SETTINGS, store, ex)
            await a.process([_msg(i, body) for i, body in enumerate(LATER[:2])])
            assert await store.r.zcard(store.key("q", "open")) == 1
            rated = await b.process([_msg(2, LATER[2])])
            assert len(rated.outputs) == 2 and await store.r.exists(store.key("q", "open")) == 0
            assert await a.expire(FAR) == []
            await store.r.zadd(store.keys.open_rounds_key("results/0"), {"q": 1})  # a stale entry of the rated round
            await store.r.zadd(store.key("q", "open"), {"S": 1})  # (with its hint, written first)
            assert await a.expire(FAR, ["results/0"]) == []
            assert await store.r.exists(store.key("q", "open")) == 0
            assert await store.r.exists(store.keys.open_rounds_key("results/0")) == 0
        await store.close()

    asyncio.run(run())
