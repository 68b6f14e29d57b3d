"""The HTTP API's routes over pools as a whole (``GET /pools``, ``/pools/{pool}``, its distribution), a
player's history and the worker's ``/status``, registered by ``stream.service.http.make_web_app``. Reads
are those of ``stream.state.pool_reads`` (one script each: one state between two commits).
"""

from __future__ import annotations

import contextlib
import math
import time
from collections.abc import Awaitable, Callable, Iterator
from typing import Any

from aiohttp import web

from stream.engine.pool import PoolEngine
from stream.ratings.advantage import Advantages
from stream.ratings.base import RatingError
from stream.service.openapi import (
    BAD_PARAM,
    COUNT,
    INT,
    NO_PLAYER,
    NO_POOL,
    NUM,
    OLD_POOL,
    PLAYER,
    POOL,
    SCHEMAS,
    STR,
    ApiRoutes,
    doc,
    json_answer,
    obj,
    operation,
    query_param,
    text_answer,
)
from stream.service.read_api import ReadApi
from stream.state.redis_store import RedisStore

EngineOf = Callable[[str], Awaitable[PoolEngine]]

#: bins a distribution may have
MAX_BINS = 200
#: pools one page of ``GET /pools`` lists at most
MAX_POOLS = 10_000

_RECORD = obj(["rating", "mu", "sigma", "version", "time", "event_id"], {
    "rating": NUM, "mu": NUM, "sigma": NUM, "version": doc(INT, "the rating message's version"),
    "time": doc(INT, "the cause event's time (ms since the epoch)"),
    "event_id": doc(STR, "the cause event (its output's event_id)")})
SCHEMAS.update({
    "PlayerRating": {"allOf": [{"$ref": "#/components/schemas/Rating"}, {"type": "object", "properties": {
        "percentile": doc(NUM, "100 × (players with a lower displayed rating + half of those level, the player "
                               "included) / players", minimum=0, maximum=100),
        "players": doc(INT, "players on the leaderboard", minimum=1)}}]},
    "Pools": obj(["pools", "total", "offset"], {
        "pools": {"type": "array", "items": obj(["pool", "system", "players"],
                                                {"pool": STR, "system": STR, "players": COUNT})},
        "total": doc(COUNT, "pools listed in Redis (committed or not)"), "offset": COUNT}),
    "Pool": obj(["pool", "system", "params", "players", "advantages"], {
        "pool": STR, "system": STR,
        "params": doc({"type": "object"}, "the system's parameters, fixed at the pool's first commit"),
        "players": doc(COUNT, "players on the leaderboard"),
        "open_rounds": doc(COUNT, "rounds being assembled from round_result events"),
        "event_ids_recorded": COUNT,
        "watermarks": doc({"type": "object", "additionalProperties": INT},
                          "topic/partition -> highest input offset applied"),
        "history_limit": doc(COUNT, "ratings kept per player (0: no history)"),
        "advantages": doc({"type": ["object", "null"], "additionalProperties": obj(
                              ["mean", "sd"], {"mean": NUM, "sd": {"type": "number", "minimum": 0}})},
                          "learned side advantages as stored in Redis (side -> its belief, in the performance units "
                          "of the pool's system: docs/advantage.md; a side not listed plays with its prior); null "
                          "where the pool learns none (its system takes no advantage, or its parameters turn it "
                          "off)")}),
    "Distribution": obj(["pool", "total", "min", "max", "bins", "percentiles"], {
        "pool": STR, "total": COUNT, "min": {"type": ["number", "null"]}, "max": {"type": ["number", "null"]},
        "bins": doc({"type": "array", "items": obj(["lo", "hi", "count"], {"lo": NUM, "hi": NUM, "count": COUNT})},
                    "equal bins from min to max: [lo, hi), the last [lo, hi]; the counts add up to total"),
        "percentiles": doc({"type": "object", "additionalProperties": NUM},
                           "p1 ... p99: the displayed rating at that percentile (nearest rank, ascending)")}),
    "History": obj(["pool", "player", "history", "current", "limit"], {
        "pool": STR, "player": STR,
        "history": doc({"type": "array", "items": _RECORD}, "the player's recent ratings, oldest first; the last "
                       "is the current one (where history was kept when it was made)"),
        "current": {"type": "object", "description": "the stored rating now",
                    "properties": {"rating": NUM, "mu": NUM, "sigma": NUM, "version": INT}},
        "limit": doc(COUNT, "ratings kept per player")}),
    "Status": {"type": "object", "description": "what the worker knows of itself: counters, lag, recent dead "
                                                "letters, Redis and Kafka (docs/operator.md, Health and metrics)"},
})


def query_int(request: web.Request, name: str, default: int, lo: float = -math.inf, hi: float = math.inf) -> int:
    """The integer query parameter ``name``; 400 naming it when it is not one, or not ``lo`` to ``hi``."""
    try:
        value = int(request.query.get(name, str(default)))
    except ValueError:
        raise web.HTTPBadRequest(text=f"{name} must be an integer") from None
    if not lo <= value <= hi:
        raise web.HTTPBadRequest(text=f"{name} must be {lo} to {hi}")
    return value


@contextlib.contextmanager
def stored_value_errors() -> Iterator[None]:
    """A ``RatingError`` of what is stored (a value that is no belief, a belief that gives no finite
    prediction) answers 500 with its text: the pool's fault, not the request's."""
    try:
        yield
    except RatingError as exc:
        raise web.HTTPInternalServerError(text=str(exc)) from exc


async def learned_advantages(store: RedisStore, eng: PoolEngine) -> Advantages | None:
    """The pool's learned side advantages as Redis holds them (``:adv``), None where the pool learns none.
    Read from Redis, not from the engine: the worker's engine rates on its own thread, and another worker
    may have rated the pool since."""
    if not eng.takes_sides:
        return None
    try:
        return eng.advantages.load(await store.advantages(eng.pool))
    except RatingError as exc:
        raise web.HTTPInternalServerError(text=f"pool {eng.pool!r}: {exc}") from exc


def add_routes(routes: ApiRoutes, api: ReadApi, engine_of: EngineOf) -> None:
    """The routes of this module, registered before the player's route (``stream.service.http``), whose
    ``{player:.+}`` would take ``.../history`` too."""

    @routes.get("/pools/{pool:[^/]+}/players/{player:.+}/history", operation(
        "A player's recent ratings, oldest first: each its rating, mu, sigma, version, time and cause event",
        {200: json_answer("History"), 404: NO_PLAYER, 500: text_answer("the stored value is not a belief")},
        [POOL, PLAYER]))
    async def player_history(request: web.Request) -> web.Response:
        pool, name = request.match_info["pool"], request.match_info["player"]
        eng = await engine_of(pool)
        raw, records = await api.store.history(pool, name)
        if raw is None:
            raise web.HTTPNotFound(text=f"unknown player {name!r} in pool {pool!r}")
        with stored_value_errors():
            r = eng.rating_of(name, raw)
        return web.json_response({"pool": pool, "player": name, "history": records,
                                  "current": {"rating": r.rating, "mu": r.mu, "sigma": r.sigma, "version": r.rounds},
                                  "limit": api.store.history_limit})

    @routes.get("/pools", operation(
        "The pools rated into this Redis, by name: each its system and players",
        {200: json_answer("Pools"), 400: BAD_PARAM},
        [query_param("offset", COUNT, "pools skipped", example=0),
         query_param("n", {"type": "integer", "minimum": 1, "maximum": MAX_POOLS}, "pools listed at most",
                     example=1000)]))
    async def pools(request: web.Request) -> web.Response:
        offset = query_int(request, "offset", 0, 0, 2**53)
        n = query_int(request, "n", 1000, 1, MAX_POOLS)
        names = await api.store.pools()
        listed = [p async for p in api.store.pool_summaries(names[offset:offset + n])]
        return web.json_response({"pools": listed, "total": len(names), "offset": offset})

    @routes.get("/pools/{pool:[^/]+}", operation(
        "A pool: its system, parameters, counts, and learned side advantages",
        {200: json_answer("Pool"), 404: NO_POOL, 500: OLD_POOL}, [POOL]))
    async def pool(request: web.Request) -> web.Response:
        name = request.match_info["pool"]
        eng = await engine_of(name)
        meta = await api.store.meta(name)
        if meta is None:
            raise web.HTTPNotFound(text=f"unknown pool {name!r}")
        counts = await api.store.pool_counts(name)
        learned = await learned_advantages(api.store, eng)
        return web.json_response({"pool": name, "system": meta["system"], "params": meta["params"], **counts,
                                  "history_limit": api.store.history_limit,
                                  "advantages": None if learned is None else learned.as_dict()})

    @routes.get("/pools/{pool:[^/]+}/distribution", operation(
        "The pool's displayed ratings: a histogram of equal bins and percentiles (read from the leaderboard, "
        "O((bins + percentiles) log players))",
        {200: json_answer("Distribution"), 400: BAD_PARAM, 404: NO_POOL, 500: OLD_POOL},
        [POOL, query_param("bins", {"type": "integer", "minimum": 1, "maximum": MAX_BINS}, "bins", example=20)]))
    async def distribution(request: web.Request) -> web.Response:
        name = request.match_info["pool"]
        bins = query_int(request, "bins", 20, 1, MAX_BINS)
        await engine_of(name)
        body = await api.store.distribution(name, bins)
        return web.json_response({"pool": name, **body})

    @routes.get("/status", {**operation(
        "What the worker knows of itself: counters, rates' inputs, consumer lag, recent dead letters, "
        "Redis and Kafka", {200: json_answer("Status")}), "tags": ["operations"]})
    async def status(request: web.Request) -> web.Response:
        body: dict[str, Any] = {"time": time.time(), "http_port": api.port, "running": api.running(),
                                "halted": api.halted()}
        if api.status is not None:
            body.update(api.status())
        try:
            await api.store.ping()
            body["redis"] = {"status": "ok"}
        except Exception as exc:  # unreachable, a timeout: what the console shows
            body["redis"] = {"status": "unavailable", "error": str(exc)[:300]}
        body["counters"] = _counters(api)
        return web.json_response(body)


#: the counters the health page shows (and derives rates from, between two reads)
COUNTERS = {"events_in": "mmr_events_in_total", "ratings_out": "mmr_ratings_out_total",
            "dead_letters": "mmr_dead_letters_total", "batches": "mmr_batches_total",
            "messages_done": "mmr_messages_done_total", "store_retries": "mmr_store_retries_total"}


def _counters(api: ReadApi) -> dict[str, float]:
    """Each of ``COUNTERS`` summed over its labels, from the worker's registry."""
    sums = dict.fromkeys(COUNTERS, 0.0)
    names = {v: k for k, v in COUNTERS.items()}
    for metric in api.registry.collect():
        for sample in metric.samples:
            key = names.get(sample.name)
            if key is not None and math.isfinite(sample.value):
                sums[key] += sample.value
    return sums


#: dead letters the health page lists (the latest)
RECENT_DEAD = 50


def worker_status(svc: Any) -> dict[str, Any]:
    """What the worker (``stream.service.app.Service``) knows of itself, for ``GET /status``: called on
    the HTTP thread, so it only reads (copies of) plain values the worker's loop keeps."""
    lags = dict(svc.lags)
    try:
        assigned = sorted(f"{tp.topic}/{tp.partition}" for tp in svc.app.consumer.assignment())
        kafka: dict[str, Any] = {"status": "ok", "assigned": assigned}
    except Exception as exc:  # not started, or rebalancing
        kafka = {"status": "starting", "assigned": [], "error": str(exc)[:300]}
    kafka.update(lag=sum(lags.values()), partitions={f"{t}/{p}": n for (t, p), n in sorted(lags.items())},
                 fetch_paused=bool(svc.fetch_paused), bootstrap=svc.settings.kafka_bootstrap)
    dead = [{"reason": d.reason, "topic": d.topic, "partition": d.partition, "offset": d.offset,
             "event_id": d.event_id, "pool": d.pool} for d in list(svc.recent_dead)[::-1]]
    return {"started": svc.started, "kafka": kafka, "store_down": bool(svc.processor.store_down),
            "recent_dead_letters": dead}
