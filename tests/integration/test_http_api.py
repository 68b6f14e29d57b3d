"""The worker's read API under load, for any player id, and its probes (/livez, /readyz, /healthz).

The real aiohttp app (``make_web_app``) on a test server, reading a real Redis through the HTTP
clients the worker builds (``http_clients``); the ratings are written by the real ``Processor``.
"""

from __future__ import annotations

import asyncio
import time
import urllib.parse
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiohttp import ClientSession, ClientTimeout, TCPConnector, web
from aiohttp.test_utils import TestClient, TestServer
from local_servers import NO_AOF, RedisServer
from prometheus_client import CollectorRegistry

from stream.service.app import http_clients
from stream.service.config import Settings
from stream.service.http import HEALTH_TIMEOUT_S, ReadApi, make_web_app
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: ids the default route pattern refused ({ and }) or that need percent-encoding in a path
ADVERSARIAL = ["x}:lb{", "{a}", "}", "a/b", "100%", "a b?c#d", "é:{ü}", "x" * 128]
CLIENTS, REQUESTS = 200, 2000


def _matches(pool: str, players: list[str]) -> list[Message]:
    return [Message("in", 0, i, orjson.dumps({"type": "match", "event_id": f"e{i}", "pool": pool, "time": i,
                                               "a": p, "b": "opponent", "score": 1.0}))
            for i, p in enumerate(players)]


def _path(pool: str, player: str) -> str:
    return f"/pools/{pool}/players/{urllib.parse.quote(player, safe='')}"


async def _rated(redis_url: str, players: list[str]) -> tuple[Settings, dict[str, float]]:
    """Settings on a fresh prefix, and the ratings the processor wrote for ``players``."""
    s = Settings(redis_url=redis_url, key_prefix=f"http{uuid.uuid4().hex[:6]}", system="elo",
                 redis_cluster=False, http_redis_connections=4)
    store = RedisStore.from_url(redis_url, prefix=s.key_prefix)
    try:
        with ThreadPoolExecutor(1) as ex:
            res = await Processor(s, store, ex).process(_matches("p", players))
    finally:
        await store.close()
    assert res.dead == []
    return s, {o.player: o.rating for o in res.outputs}


def _api(s: Settings, running: bool = True) -> tuple[ReadApi, Processor, RedisStore]:
    store, health = http_clients(s, cluster=False)
    proc = Processor(s, store, ThreadPoolExecutor(1))
    return (ReadApi(store, CollectorRegistry(), proc.executor, 4321, lambda: running, health=health,
                    concurrency=s.http_redis_connections), proc, store)


def test_every_player_id_is_reachable_percent_encoded(redis_url: str) -> None:
    async def check() -> None:
        s, ratings = await _rated(redis_url, ADVERSARIAL)
        api, _, store = _api(s)
        async with TestClient(TestServer(make_web_app(api))) as client:
            for player in ADVERSARIAL:
                resp = await client.get(_path("p", player))
                assert resp.status == 200, (player, await resp.text())
                row = await resp.json()
                assert (row["player"], row["rating"]) == (player, ratings[player])
            assert (await client.get(_path("p", "x}:lb"))).status == 404
        await store.close()
        assert api.health is not None
        await api.health.close()

    asyncio.run(check())


def test_200_concurrent_clients_all_answered_while_probes_stay_ready(redis_url: str) -> None:
    """More clients than read connections (4): they wait their turn; the probes answer throughout."""
    players = [f"pl{i}" for i in range(50)] + ["x}:lb{"]

    async def check() -> None:
        s, ratings = await _rated(redis_url, players)
        api, _, store = _api(s)
        async with TestClient(TestServer(make_web_app(api))) as client:
            base = f"http://{client.host}:{client.port}"
            statuses: list[int] = []
            probes: list[int] = []
            refused: list[tuple[str, int, str]] = []  # a probe's answer other than 200: what it said
            wrong: list[Any] = []
            todo = iter(range(REQUESTS))
            done = asyncio.Event()

            async def reader(session: ClientSession) -> None:
                for i in todo:
                    player = players[i % len(players)]
                    path = _path("p", player) if i % 3 else "/pools/p/leaderboard?n=20"
                    async with session.get(base + path) as resp:
                        statuses.append(resp.status)
                        body = await resp.json()
                        if i % 3 and body["rating"] != ratings[player]:
                            wrong.append(body)

            async def prober(session: ClientSession) -> None:
                while not done.is_set():
                    for route in ("/healthz", "/readyz", "/livez"):
                        async with session.get(base + route) as resp:
                            probes.append(resp.status)
                            if resp.status != 200:
                                refused.append((route, resp.status, await resp.text()))
                    await asyncio.sleep(0.01)

            conn = TCPConnector(limit=CLIENTS + 10)
            async with ClientSession(connector=conn, timeout=ClientTimeout(total=120)) as session:
                probe = asyncio.create_task(prober(session))
                await asyncio.gather(*(reader(session) for _ in range(CLIENTS)))
                done.set()
                await probe
        await store.close()
        assert api.health is not None
        await api.health.close()
        assert len(statuses) == REQUESTS and set(statuses) == {200}, sorted(set(statuses))
        assert wrong == []
        assert probes and set(probes) == {200}, refused

    asyncio.run(check())


def test_a_probe_judges_redis_not_an_event_loop_late_to_read_its_answer(redis_url: str) -> None:
    """The event loop is held longer than a probe's Redis timeout while the probe waits for Redis
    (as a busy or CPU-starved worker holds it): Redis answered in time, so the probe answers 200."""
    s = Settings(redis_url=redis_url, key_prefix=f"late{uuid.uuid4().hex[:6]}", redis_cluster=False)

    async def check() -> None:
        store, health = http_clients(s, cluster=False)
        api = ReadApi(store, CollectorRegistry(), ThreadPoolExecutor(1), 4321,
                      lambda: True, health=health)
        app = make_web_app(api)
        probing = asyncio.Event()
        answered = asyncio.Event()

        @web.middleware
        async def mark(request: web.Request, handler: Any) -> web.StreamResponse:
            probing.set()
            try:
                return await handler(request)  # type: ignore[no-any-return]
            finally:
                answered.set()

        app.middlewares.append(mark)  # innermost: set just before the probe asks Redis

        async def hold_the_loop() -> None:
            await probing.wait()
            while not answered.is_set():
                time.sleep(HEALTH_TIMEOUT_S + 0.5)  # blocks the loop, not Redis
                await asyncio.sleep(0)

        async with TestClient(TestServer(app)) as client:
            holder = asyncio.create_task(hold_the_loop())
            resp = await client.get("/readyz")
            assert (resp.status, await resp.json()) == (200, {"status": "ok", "http_port": 4321})
            await holder
        await store.close()
        await health.close()

    asyncio.run(check())


def test_probes_livez_always_readyz_only_running_with_redis(tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", *NO_AOF)  # this test's own: it stops it
    running = [False]

    async def status(client: TestClient[Any, Any], route: str) -> tuple[int, str]:
        resp = await client.get(route)
        return resp.status, (await resp.json())["status"]

    async def check() -> None:
        s = Settings(redis_url=server.url, key_prefix="probes", redis_cluster=False)
        store, health = http_clients(s, cluster=False)
        api = ReadApi(store, CollectorRegistry(), ThreadPoolExecutor(1), 4321,
                      lambda: running[0], health=health)
        async with TestClient(TestServer(make_web_app(api))) as client:
            for _ in range(100):  # the server starting
                if (await status(client, "/readyz"))[1] == "starting":
                    break
                await asyncio.sleep(0.1)
            assert await status(client, "/livez") == (200, "alive")
            assert await status(client, "/readyz") == (503, "starting")
            running[0] = True
            assert await status(client, "/readyz") == (200, "ok")
            assert await status(client, "/healthz") == (200, "ok")
            server.kill()
            assert await status(client, "/readyz") == (503, "unhealthy")
            assert await status(client, "/healthz") == (503, "unhealthy")
            assert await status(client, "/livez") == (200, "alive")
        await store.close()
        await health.close()

    with server:
        asyncio.run(check())


def test_the_read_connections_are_a_positive_count() -> None:
    from stream.service.config import SettingError, from_env

    assert from_env({"MMR_HTTP_REDIS_CONNECTIONS": "3"}).http_redis_connections == 3
    with pytest.raises(SettingError, match="MMR_HTTP_REDIS_CONNECTIONS=0"):
        Settings(http_redis_connections=0)
