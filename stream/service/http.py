"""Read-only HTTP API of the worker (aiohttp): ratings, leaderboards, win probabilities, health, metrics.

Served by the worker itself so that reads see the same Redis and the same per-pool
systems (``win_probability`` needs the pool's rating model, not just two numbers).
Routes:
    GET /healthz                                   200 once Redis answers
    GET /metrics                                   Prometheus text format
    GET /pools/{pool}/players/{player}             the player's current rating (404 if unknown)
    GET /pools/{pool}/leaderboard?n=20             top-N by displayed rating
    GET /pools/{pool}/win-probability?a=X&b=Y      expected score of A against B
"""

from __future__ import annotations

import asyncio
import logging
import math
from typing import TYPE_CHECKING, Any

from aiohttp import web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stream.engine.pool import PoolConfigError, PoolEngine
from stream.ratings.base import RatingError

if TYPE_CHECKING:
    from stream.service.app import Service

log = logging.getLogger(__name__)


async def _engine(svc: Service, pool: str) -> PoolEngine:
    if await svc.store.meta(pool) is None:
        raise web.HTTPNotFound(text=f"unknown pool {pool!r}")
    try:
        return await svc.processor.registry.engine(pool, "rounds")
    except PoolConfigError as exc:  # stored by another version; the worker dead-letters its events
        raise web.HTTPInternalServerError(text=str(exc)) from exc


def _row(pool: str, player: str, eng: PoolEngine, raw: bytes) -> dict[str, Any]:
    r = eng.rating_of(player, raw)  # RatingError: a stored value that is not a belief (see the handlers)
    return {"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma, "rounds": r.rounds,
            "version": r.rounds, "system": eng.system.name}


def make_web_app(svc: Service) -> web.Application:
    routes = web.RouteTableDef()

    @routes.get("/healthz")
    async def healthz(request: web.Request) -> web.Response:
        try:
            await svc.store.r.ping()
        except Exception as exc:
            return web.json_response({"status": "unhealthy", "redis": repr(exc)}, status=503)
        return web.json_response({"status": "ok"})

    @routes.get("/metrics")
    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(svc.metrics.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    @routes.get("/pools/{pool}/players/{player}")
    async def player(request: web.Request) -> web.Response:
        pool, name = request.match_info["pool"], request.match_info["player"]
        eng = await _engine(svc, pool)
        raw = (await svc.store.beliefs(pool, [name]))[name]
        if raw is None:
            raise web.HTTPNotFound(text=f"unknown player {name!r} in pool {pool!r}")
        try:
            return web.json_response(_row(pool, name, eng, raw))
        except RatingError as exc:
            raise web.HTTPInternalServerError(text=str(exc)) from exc

    @routes.get("/pools/{pool}/leaderboard")
    async def leaderboard(request: web.Request) -> web.Response:
        pool = request.match_info["pool"]
        try:
            n = min(max(int(request.query.get("n", "20")), 1), 1000)
        except ValueError:
            raise web.HTTPBadRequest(text="n must be an integer") from None
        eng = await _engine(svc, pool)
        top = await svc.store.top(pool, n)
        raws = await svc.store.beliefs(pool, [p for p, _ in top])
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
        eng = await _engine(svc, pool)
        raws = await svc.store.beliefs(pool, [a, b])
        try:
            known = eng.decode_all(raws, [a, b], remember=False)  # players without a stored belief are left out
        except RatingError as exc:
            raise web.HTTPInternalServerError(text=str(exc)) from exc
        ba, bb = (known[x] if x in known else eng.system.new_belief() for x in (a, b))
        p = await asyncio.get_running_loop().run_in_executor(svc.executor, eng.system.win_probability, ba, bb)
        if not math.isfinite(p):  # a stored value that decodes but is no belief (NaN is not JSON)
            raise web.HTTPInternalServerError(text=f"the win probability of {a!r} against {b!r} is not finite")
        return web.json_response({"pool": pool, "a": a, "b": b, "p_a": p, "known": [raws[a] is not None,
                                                                                      raws[b] is not None]})

    app = web.Application()
    app.add_routes(routes)
    return app


async def start_http(svc: Service) -> web.AppRunner:
    runner = web.AppRunner(make_web_app(svc), access_log=None)
    await runner.setup()
    site = web.TCPSite(runner, svc.settings.http_host, svc.settings.http_port)
    await site.start()
    log.info("HTTP on %s:%s", svc.settings.http_host, svc.settings.http_port)
    return runner
