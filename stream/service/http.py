"""Read-only HTTP API of the worker (aiohttp): ratings, leaderboards, win probabilities, health, metrics.

Served by the worker itself so that reads see the same Redis and the same per-pool
systems (``win_probability`` needs the pool's rating model, not just two numbers). The module
knows only what it reads (``ReadApi``), not the worker that builds it.

The socket is bound and served when the worker starts (``bind``, ``serve``), before its warm-up
and before it joins the consumer group: a port that is taken stops the start with a clear
message, and with port 0 (the default) the system picks a free one, so several workers run on
one host with defaults. ``mmr worker`` prints the bound port at start; ``/healthz`` serves it
and the gauge ``mmr_http_port`` exports it.

Reads have a Redis client of their own (``ReadApi.store``), separate from the rating pipeline's, so
that neither starves the other, and at most ``ReadApi.concurrency`` requests use it at once: more
clients wait their turn instead of failing on an exhausted connection pool. The health probes ping
Redis on a client of their own again (``ReadApi.health``), one ping at a time and bounded by
``HEALTH_TIMEOUT_S``, so they answer promptly while every read connection is busy.

Routes:
    GET /livez                                     200 while the process and its event loop answer (no Redis, no Kafka)
    GET /readyz                                    200 once the app runs and Redis answers, else 503
    GET /healthz                                   the same as /readyz; {"status", "http_port"}
    GET /metrics                                   Prometheus text format
    GET /pools/{pool}/players/{player}             the player's current rating (404 if unknown) and the
                                                   explanation of its latest change (the fields of the
                                                   rating message: docs/service.md); any player id,
                                                   percent-encoded ({, }, /, %, ...)
    GET /pools/{pool}/leaderboard?n=20             top-N by displayed rating
    GET /pools/{pool}/win-probability?a=X&b=Y      expected score of A against B
"""

from __future__ import annotations

import asyncio
import errno
import logging
import math
import socket
from collections.abc import Callable
from concurrent.futures import Executor
from dataclasses import dataclass
from typing import Any, Protocol

import orjson
from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest

from stream.engine.pool import PoolConfigError, PoolEngine
from stream.ratings.base import RatingError
from stream.state.redis_client import AnyRedis
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)

#: seconds a health probe waits for Redis' PONG before answering 503
HEALTH_TIMEOUT_S = 2.0


class HttpPortTaken(RuntimeError):
    """The configured HTTP port is in use (another worker, another program)."""


class Engines(Protocol):
    """Where a pool's rating engine comes from (the worker's pool registry)."""

    async def engine(self, pool: str, kind: str) -> PoolEngine: ...


@dataclass(frozen=True)
class ReadApi:
    """What the HTTP API reads: Redis, the pools' engines, the metrics, a thread for the kernels."""

    store: RedisStore
    engines: Engines
    registry: CollectorRegistry
    executor: Executor
    port: int  # the bound port (served by /healthz)
    running: Callable[[], bool]  # the Faust app has started (it joins its consumer group from there)
    health: AnyRedis | None = None  # the client the health probes ping (None: the store's)
    concurrency: int = 16  # requests reading Redis at once (at most the read client's connections)


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port).

    Raises ``HttpPortTaken`` naming the port and the setting when it is in use."""
    try:
        sock = socket.create_server((host, port), backlog=128)
    except OSError as exc:
        if exc.errno == errno.EADDRINUSE:
            raise HttpPortTaken(f"HTTP port {host}:{port} is already in use; set MMR_HTTP_PORT to a free port, "
                                f"or to 0 for any free port") from exc
        raise
    sock.setblocking(False)
    return sock


def bound_port(sock: socket.socket) -> int:
    return int(sock.getsockname()[1])


async def _engine(api: ReadApi, pool: str) -> PoolEngine:
    if await api.store.meta(pool) is None:
        raise web.HTTPNotFound(text=f"unknown pool {pool!r}")
    try:
        return await api.engines.engine(pool, "rounds")
    except PoolConfigError as exc:  # stored by another version; the worker dead-letters its events
        raise web.HTTPInternalServerError(text=str(exc)) from exc


def _row(pool: str, player: str, eng: PoolEngine, raw: bytes) -> dict[str, Any]:
    r = eng.rating_of(player, raw)  # RatingError: a stored value that is not a belief (see the handlers)
    return {"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma, "rounds": r.rounds,
            "version": r.rounds, "system": eng.system.name}


def make_web_app(api: ReadApi) -> web.Application:
    routes = web.RouteTableDef()
    reads = asyncio.Semaphore(api.concurrency)  # a request waits here, not on an exhausted connection pool
    health = api.store.r if api.health is None else api.health
    one_ping = asyncio.Lock()  # probes arriving together share the health client's connection in turn

    @web.middleware
    async def bounded(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        if not request.path.startswith("/pools/"):
            return await handler(request)
        async with reads:
            return await handler(request)

    async def ready() -> web.Response:
        try:
            async with asyncio.timeout(HEALTH_TIMEOUT_S):
                async with one_ping:
                    await health.ping()
        except Exception as exc:  # TimeoutError included: a Redis too slow to answer a probe is not ready
            return web.json_response({"status": "unhealthy", "redis": repr(exc), "http_port": api.port}, status=503)
        if not api.running():
            return web.json_response({"status": "starting", "http_port": api.port}, status=503)
        return web.json_response({"status": "ok", "http_port": api.port})

    @routes.get("/livez")
    async def livez(request: web.Request) -> web.Response:
        return web.json_response({"status": "alive", "http_port": api.port})

    @routes.get("/readyz")
    async def readyz(request: web.Request) -> web.Response:
        return await ready()

    @routes.get("/healthz")
    async def healthz(request: web.Request) -> web.Response:
        return await ready()

    @routes.get("/metrics")
    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(api.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @routes.get("/pools/{pool}/players/{player:.+}")  # any id: the default pattern refuses { and }
    async def player(request: web.Request) -> web.Response:
        pool, name = request.match_info["pool"], request.match_info["player"]
        eng = await _engine(api, pool)
        raw, change = await api.store.player(pool, name)
        if raw is None:
            raise web.HTTPNotFound(text=f"unknown player {name!r} in pool {pool!r}")
        try:
            row = _row(pool, name, eng, raw)
        except RatingError as exc:
            raise web.HTTPInternalServerError(text=str(exc)) from exc
        if change is not None:
            version, event_id, time, explained = orjson.loads(change)
            if version == row["version"]:  # the change that made this version (none stored by an older worker)
                row.update(event_id=event_id, time=time, **explained)
        return web.json_response(row)

    @routes.get("/pools/{pool}/leaderboard")
    async def leaderboard(request: web.Request) -> web.Response:
        pool = request.match_info["pool"]
        try:
            n = min(max(int(request.query.get("n", "20")), 1), 1000)
        except ValueError:
            raise web.HTTPBadRequest(text="n must be an integer") from None
        eng = await _engine(api, pool)
        top = await api.store.top(pool, n)
        raws = await api.store.beliefs(pool, [p for p, _ in top])
        rows, unreadable = [], []
        for p, raw in raws.items():
            if raw is None:
                continue
            try:
                rows.append(_row(pool, p, eng, raw))
            except RatingError as exc:  # one corrupt value does not take the leaderboard down
                log.warning("pool %r leaderboard: %s", pool, exc)
                unreadable.append(p)
        body: dict[str, Any] = {"pool": pool, "top": rows}
        if unreadable:
            body["unreadable"] = unreadable
        return web.json_response(body)

    @routes.get("/pools/{pool}/win-probability")
    async def win_probability(request: web.Request) -> web.Response:
        pool = request.match_info["pool"]
        a, b = request.query.get("a"), request.query.get("b")
        if not a or not b:
            raise web.HTTPBadRequest(text="query parameters a and b are required")
        eng = await _engine(api, pool)
        raws = await api.store.beliefs(pool, [a, b])
        try:
            known = eng.decode_all(raws, [a, b], remember=False)  # players without a stored belief are left out
        except RatingError as exc:
            raise web.HTTPInternalServerError(text=str(exc)) from exc
        ba, bb = (known[x] if x in known else eng.system.new_belief() for x in (a, b))
        p = await asyncio.get_running_loop().run_in_executor(api.executor, eng.system.win_probability, ba, bb)
        if not math.isfinite(p):  # a stored value that decodes but is no belief (NaN is not JSON)
            raise web.HTTPInternalServerError(text=f"the win probability of {a!r} against {b!r} is not finite")
        return web.json_response({"pool": pool, "a": a, "b": b, "p_a": p, "known": [raws[a] is not None,
                                                                                      raws[b] is not None]})

    app = web.Application(middlewares=[bounded])
    app.add_routes(routes)
    return app


async def serve(api: ReadApi, sock: socket.socket) -> web.AppRunner:
    """Serve the API on the socket ``bind`` returned."""
    runner = web.AppRunner(make_web_app(api), access_log=None)
    await runner.setup()
    await web.SockSite(runner, sock).start()
    host, port = sock.getsockname()[:2]
    log.info("HTTP on %s:%s", host, port)
    return runner
