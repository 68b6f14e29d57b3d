"""The worker's HTTP socket: loopback and any free port by default, a taken port refused at start.

Real ``mmr worker`` subprocesses on the test broker and Redis.
"""

from __future__ import annotations

import asyncio
import socket
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any, Self

import orjson
import pytest
from service_utils import MMR, ROOT, WorkerProcess, announced_port, env_for, make_settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


class DefaultHttpWorker(WorkerProcess):
    """A worker with neither MMR_HTTP_HOST nor MMR_HTTP_PORT in its environment."""

    def start(self) -> Self:
        env = env_for(self.s, **self.extra_env)
        env.pop("MMR_HTTP_HOST", None)
        env.pop("MMR_HTTP_PORT", None)
        with self.log_path.open("ab") as log:
            self.proc = subprocess.Popen([str(MMR), "worker"], env=env, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT)
        return self


def _healthz(port: int, timeout: float = 240.0) -> dict[str, object]:
    """/healthz once it answers 200 (503 "starting" while the worker warms up and joins)."""
    deadline = time.monotonic() + timeout
    last: Any = None
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/healthz", timeout=5) as resp:
                return dict(orjson.loads(resp.read()))
        except urllib.error.HTTPError as exc:
            last = orjson.loads(exc.read())
            assert last["http_port"] == port
        time.sleep(0.3)
    raise AssertionError(f"/healthz never answered 200 (last {last})")


def test_two_workers_with_defaults_both_serve_on_loopback(kafka_bootstrap: str, redis_url: str,
                                                          tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, redis_url)
    workers = []
    for i in range(2):
        w = DefaultHttpWorker(s, tmp_path / f"w{i}.log")
        w.extra_env = {"MMR_LOG_LEVEL": "info"}
        workers.append(w.start())
    try:
        ports = [announced_port(w) for w in workers]
        assert ports[0] != ports[1] and min(ports) > 0
        for w, port in zip(workers, ports, strict=True):
            assert _healthz(port) == {"status": "ok", "http_port": port}
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as resp:
                assert f"mmr_http_port {float(port)}" in resp.read().decode()
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/openapi.json", timeout=5) as resp:
                assert {"/openapi.json", "/pools/{pool}/predict"} <= set(orjson.loads(resp.read())["paths"])
            assert w.alive()
        # on loopback only: no other local address reaches it
        outside = socket.gethostbyname(socket.gethostname())
        if not outside.startswith("127."):
            with pytest.raises(OSError), socket.create_connection((outside, ports[0]), timeout=2):
                pass
        time.sleep(12)  # both still up well after start: a port taken twice would stop one
        assert all(w.alive() for w in workers), [w.log_tail() for w in workers]
    finally:
        for w in workers:
            w.stop()


def test_an_explicit_port_in_use_stops_the_start_with_a_clear_message(kafka_bootstrap: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    with socket.create_server(("127.0.0.1", 0)) as taken:
        port = taken.getsockname()[1]
        s = make_settings(kafka_bootstrap, redis_url, http_port=port)
        w = WorkerProcess(s, tmp_path / "w.log")
        w.start()
        assert w.proc is not None
        try:
            code = w.proc.wait(60)  # before joining the group or warming up
        finally:
            w.kill()
        out = w.log_tail()
        assert code != 0, out
        assert f"HTTP port 127.0.0.1:{port} is already in use" in out and "MMR_HTTP_PORT" in out, out
        assert "Traceback" not in out, out


def test_healthz_says_starting_until_the_app_runs(redis_url: str) -> None:
    from concurrent.futures import ThreadPoolExecutor

    from aiohttp.test_utils import TestClient, TestServer
    from prometheus_client import CollectorRegistry

    from stream.service.http import make_web_app
    from stream.service.read_api import ReadApi
    from stream.state.redis_store import RedisStore

    async def check() -> None:
        store = RedisStore.from_url(redis_url, prefix="healthz")
        running = [False]
        api = ReadApi(store, CollectorRegistry(), ThreadPoolExecutor(1), 4321,
                      lambda: running[0])
        async with TestClient(TestServer(make_web_app(api))) as client:
            resp = await client.get("/healthz")
            assert (resp.status, await resp.json()) == (503, {"status": "starting", "http_port": 4321})
            running[0] = True
            resp = await client.get("/healthz")
            assert (resp.status, await resp.json()) == (200, {"status": "ok", "http_port": 4321})
        await store.close()

    asyncio.run(check())
