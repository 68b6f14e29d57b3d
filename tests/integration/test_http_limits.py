"""The HTTP API's bound on requests under way (``MMR_HTTP_MAX_REQUESTS``): past it a request answers 429
with ``Retry-After`` at once, while the health probes are never refused.

The real aiohttp app (``make_web_app``) on a test server, reading a private ``redis-server`` whose clients
the test pauses (``CLIENT PAUSE``): the requests let in wait on Redis, so they are under way for sure
when the next ones arrive."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor

import redis
from aiohttp.test_utils import TestClient, TestServer
from local_servers import RedisServer
from prometheus_client import CollectorRegistry

from stream.service.app import http_clients
from stream.service.config import Settings
from stream.service.http import make_web_app
from stream.service.processor import Processor
from stream.service.read_api import ReadApi

LIMIT = 3


def test_requests_over_the_limit_answer_429_and_the_probes_never(private_redis: RedisServer) -> None:
    s = Settings(redis_url=private_redis.url, key_prefix="limits", system="elo", redis_cluster=False,
                 http_redis_connections=LIMIT, http_max_requests=LIMIT)

    async def check() -> None:
        store, health = http_clients(s, cluster=False)
        proc = Processor(s, store, ThreadPoolExecutor(1))
        api = ReadApi(store, CollectorRegistry(), proc.executor, 4321, lambda: True, health=health,
                      concurrency=s.http_redis_connections, max_requests=s.http_max_requests)
        async with TestClient(TestServer(make_web_app(api))) as client:
            assert (await client.get("/pools/p/players/x")).status == 404  # connections made: Redis answers
            admin = redis.Redis(port=private_redis.port)
            admin.execute_command("CLIENT", "PAUSE", 1500, "ALL")
            held = [asyncio.ensure_future(client.get(f"/pools/p/players/x{i}")) for i in range(LIMIT)]
            await asyncio.sleep(0.3)  # the three are under way, waiting for the paused Redis
            assert not any(h.done() for h in held)
            over = [await client.get(path) for path in ("/pools/p/leaderboard", "/pools/p/players/y", "/metrics")]
            assert [r.status for r in over] == [429] * 3
            assert all(r.headers["Retry-After"] == "1" for r in over)
            assert "MMR_HTTP_MAX_REQUESTS" in await over[0].text()
            probes = await asyncio.gather(*(client.get(p) for p in ("/livez", "/readyz", "/healthz") * 3))
            assert [r.status for r in probes] == [200] * 9  # waited for Redis's PONG (paused < the probes' 2 s)
            assert [(await h).status for h in held] == [404] * LIMIT  # answered once Redis was back
            assert (await client.get("/pools/p/leaderboard")).status == 404  # let in again
        await store.close()
        await health.close()
        proc.executor.shutdown()

    asyncio.run(check())
