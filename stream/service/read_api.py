"""What the HTTP API reads (``ReadApi``): Redis and its health ping, the metrics, the worker's state.
Below both route modules (``http``, ``pool_api``), which take it."""

from __future__ import annotations

import asyncio
import dataclasses
from collections.abc import Callable
from concurrent.futures import Executor
from typing import Any

from prometheus_client import CollectorRegistry

from stream.runtime import thread_names
from stream.state.redis_client import AnyBlockingRedis
from stream.state.redis_store import RedisStore


class RedisPing:
    """The health probes' PING of Redis on a blocking client and a thread of their own: on the event loop,
    a busy loop would read a PONG late and call a healthy Redis unhealthy; here the socket's timeouts
    (``HEALTH_TIMEOUT_S``) bound Redis' answer alone. Probes during a ping share its answer."""

    def __init__(self, connect: Callable[[], AnyBlockingRedis]) -> None:
        self._connect = connect
        self._client: AnyBlockingRedis | None = None
        self._thread = thread_names.named_executor(thread_names.HEALTH)
        self._inflight: asyncio.Future[None] | None = None

    def _ping(self) -> None:
        if self._client is None:
            self._client = self._connect()
        try:
            self._client.ping()
        except Exception:
            self._close_client()  # made again at the next ping: a fresh slot map
            raise

    def _close_client(self) -> None:
        client, self._client = self._client, None
        if client is not None:
            client.close()

    async def close(self) -> None:
        """Close the client on its thread, after a ping under way, and end the thread."""
        try:
            await asyncio.get_running_loop().run_in_executor(self._thread, self._close_client)
        except RuntimeError:  # closed already
            return
        self._thread.shutdown(wait=True)  # idle now: returns at once

    async def __call__(self) -> None:
        """Return once Redis answered a PING; raise what the ping raised (a timeout, a refused connection)."""
        loop = asyncio.get_running_loop()
        if self._inflight is None or self._inflight.done() or self._inflight.get_loop() is not loop:
            self._inflight = loop.run_in_executor(self._thread, self._ping)
        await asyncio.shield(self._inflight)


@dataclasses.dataclass(frozen=True)
class ReadApi:
    """What the HTTP API reads: Redis (the pools' engines are made from its meta: ``make_web_app``'s ``engine_of``),
    the metrics, a thread for the kernels."""

    store: RedisStore
    registry: CollectorRegistry
    executor: Executor
    port: int  # the bound port (served by /healthz)
    running: Callable[[], bool]  # the Faust app has started (it joins its consumer group from there)
    health: RedisPing | None = None  # the health probes' ping (None: the store's client, on the event loop)
    concurrency: int = 16  # requests reading Redis at once (at most the read client's connections)
    #: the input partitions halted by a bug in the rating step (stream.service.halts.Halts.listing)
    halted: Callable[[], list[dict[str, Any]]] = list
    #: why the worker rates nothing now (Redis unavailable under a commit, Redis lost acknowledged writes), or None
    blocked: Callable[[], str | None] = lambda: None
    #: the bearer token every route but the probes and the console's assets requires ("": none)
    token: str = ""
    #: requests handled at once; more answer 429 (the probes are never refused)
    max_requests: int = 256
    #: the most of a CPU the HTTP thread takes (stream.service.http.CpuShare); 1: no bound
    cpu_share: float = 1.0
    #: the worker's own event loop (``/livez`` asks it to answer; None: this one)
    worker_loop: asyncio.AbstractEventLoop | None = None
    #: what the worker knows of itself for the console's health page (``stream.service.pool_api``)
    status: Callable[[], dict[str, Any]] | None = None
