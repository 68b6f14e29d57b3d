"""Read-only HTTP API of the worker (aiohttp): ratings, leaderboards, win probabilities, health, metrics.

Served by the worker itself so that reads see the same Redis and the same per-pool systems
(``win_probability`` needs the pool's rating model, not just two numbers); the module knows only
what it reads (``ReadApi``). The routes and their answers: ``GET /openapi.json`` (every route is
registered with its operation, ``openapi.ApiRoutes``) and docs/matchmaker.md.

The socket is bound when the worker starts (``bind``; port 0: any free one) so that a taken port
stops the start with a clear message. Served on a thread and event loop of its own (``HttpServer``)
so that no request waits in the queue of the loop that rates; its CPU share is bounded
(``CpuShare``), since the GIL it holds is what delays rating. Reads have a Redis client of their own
(``ReadApi.store``) and at most ``ReadApi.concurrency`` requests use it at once; the health probes
ping Redis on a client and thread of their own (``ReadApi.health``), so that they judge Redis, not
how busy this loop is. ``MMR_HTTP_MAX_REQUESTS``, ``MMR_HTTP_TOKEN``: docs/operator.md.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import dataclasses
import errno
import hmac
import logging
import math
import socket
import threading
import time
from collections.abc import Callable
from typing import Any, TypeVar

import orjson
from aiohttp import http_exceptions, web
from prometheus_client import CONTENT_TYPE_LATEST, generate_latest

from stream import __version__, redact
from stream.engine.pool import PoolConfigError, PoolEngine
from stream.errors import InfrastructureError
from stream.events.model import MAX_ID_LENGTH
from stream.ratings import lobby
from stream.ratings.advantage import MATCH_SIDE, MAX_SIDE_LENGTH, Advantages
from stream.ratings.base import Belief, RatingError
from stream.runtime import thread_names
from stream.service import console, pool_api
from stream.service.openapi import (
    COUNT,
    INT,
    NAME,
    NO_PLAYER,
    NO_POOL,
    PLAYER,
    POOL,
    ApiRoutes,
    json_answer,
    operation,
    query_param,
    text_answer,
)
from stream.service.pool_api import EngineOf, learned_advantages, query_int, stored_value_errors
from stream.service.read_api import ReadApi
from stream.state.pool_reads import percentile_rank

log = logging.getLogger(__name__)

T = TypeVar("T")

#: seconds a health probe waits for Redis' PONG before answering 503
HEALTH_TIMEOUT_S = 2.0
#: players one request may name (POST /players, POST /predict), teams one lobby may have:
#: one MGET and a prediction of bounded cost (the lobby's pairs and integrals grow with teams²)
MAX_IDS = 1000
MAX_TEAMS = 64
#: seconds ``/livez`` waits for the worker's event loop to run a callback before answering 503
LIVEZ_TIMEOUT_S = 10.0
#: at most one log line per this many seconds about requests that could not be parsed
BAD_REQUEST_LOG_S = 10.0
#: seconds between two checks of the HTTP thread's CPU share (``CpuShare``, ``MMR_HTTP_CPU_SHARE``)
SHARE_TICK_S = 0.01
#: the routes that answer without the bearer token: the probes, and the console's page and assets
OPEN_PATHS = frozenset({"/livez", "/readyz", "/healthz"})
OPEN_PREFIXES = ("/console/",)
#: the largest leaderboard offset (a safe JSON integer; Redis refuses indices past 2^63)
MAX_OFFSET = 2**53

_HEALTH = json_answer("Health")
_BAD = text_answer("a parameter or the body is wrong; the text names the field")
_STORED = text_answer("a stored value of the pool is not a belief, or the pool was stored by another version")
#: the answers of a pool's routes that read stored beliefs besides their own 200
_POOL_ERRORS = {400: _BAD, 404: NO_POOL, 500: _STORED}


class HttpPortTaken(InfrastructureError, RuntimeError):
    """The configured HTTP port is in use (another worker, another program)."""


def bind(host: str, port: int) -> socket.socket:
    """A listening socket on ``host:port`` (port 0: any free port); ``HttpPortTaken`` when it is in use."""
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


def _explain(row: dict[str, Any], change: bytes | None) -> None:
    """Add to a player's ``row`` the explanation of the change that made its version (``:chg``);
    nothing when the stored one is of another version (or none was stored, by an older worker)."""
    if change is not None:
        version, event_id, time, explained = orjson.loads(change)
        if version == row["version"]:
            row.update(event_id=event_id, time=time, **explained)


def _row(pool: str, player: str, eng: PoolEngine, raw: bytes) -> dict[str, Any]:
    r = eng.rating_of(player, raw)  # RatingError: a stored value that is not a belief (see the handlers)
    return {"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma, "rounds": r.rounds,
            "version": r.rounds, "system": eng.system.name}


async def _stored_beliefs(api: ReadApi, pool: str, eng: PoolEngine, ids: list[str],
                          ) -> tuple[dict[str, bytes | None], list[Belief]]:
    """The stored values of ``ids`` as read, and the players' beliefs in the order of ``ids``: the
    stored one decoded, the system's new-player belief for a player without one."""
    raws = await api.store.beliefs(pool, ids)
    with stored_value_errors():
        known = eng.decode_all(raws, ids, remember=False)  # players without a stored belief are left out
    return raws, [known[p] if p in known else eng.system.new_belief() for p in ids]


def _ids(value: Any, field: str) -> list[str]:
    """A JSON list of player ids, checked (400 naming the field, also above ``MAX_IDS``)."""
    if not isinstance(value, list):
        raise web.HTTPBadRequest(text=f"{field}: a list of player ids is required")
    if len(value) > MAX_IDS:
        raise web.HTTPBadRequest(text=f"{field}: {len(value)} ids, at most {MAX_IDS} per request")
    for i, x in enumerate(value):
        if not isinstance(x, str) or not 1 <= len(x) <= MAX_ID_LENGTH:
            raise web.HTTPBadRequest(text=f"{field}[{i}]: a player id is a string of 1 to {MAX_ID_LENGTH} characters")
    return value


def _players(body: dict[str, Any]) -> list[str]:
    """``body["players"]`` checked: 1 to ``MAX_IDS`` player ids, each once (in their first order)."""
    wanted = list(dict.fromkeys(_ids(body.get("players"), "players")))
    if not wanted:
        raise web.HTTPBadRequest(text="players: at least one player id is required")
    return wanted


def _lobby(body: dict[str, Any]) -> tuple[list[list[str]], list[str | None] | None, bool]:
    """``_teams``, and the optional ``sides`` (one label or null per team) and ``neutral`` (a bool)."""
    teams = _teams(body)
    sides, neutral = body.get("sides"), body.get("neutral", False)
    if not isinstance(neutral, bool):
        raise web.HTTPBadRequest(text="neutral: true or false")
    if sides is not None:
        if not (isinstance(sides, list) and len(sides) == len(teams)):
            raise web.HTTPBadRequest(text=f"sides: a list of one side label (or null) per team ({len(teams)})")
        for t, side in enumerate(sides):
            if side is not None and not (isinstance(side, str) and 0 < len(side) <= MAX_SIDE_LENGTH):
                raise web.HTTPBadRequest(text=f"sides[{t}]: a label of 1 to {MAX_SIDE_LENGTH} characters, or null")
        if neutral:
            raise web.HTTPBadRequest(text="sides and neutral: a lobby with sides is not neutral")
    return teams, sides, neutral


def _lobby_shifts(adv: Advantages | None, teams: list[list[str]], sides: list[str | None] | None,
                  neutral: bool) -> list[float] | None:
    """The advantage each team plays with (docs/advantage.md): its side's, with ``sides``; else, for two
    players (a match) not ``neutral``, the match side's for the first; None: none (also where the pool
    learns none)."""
    if adv is None:
        return None
    if sides is not None:
        return [adv.shift(side) for side in sides]
    if not neutral and len(teams) == 2 and len(teams[0]) == len(teams[1]) == 1:
        return [adv.shift(MATCH_SIDE), 0.0]
    return None


def _teams(body: dict[str, Any]) -> list[list[str]]:
    """``body["teams"]`` checked: 2 to ``MAX_TEAMS`` non-empty teams, each player in one team once."""
    teams = body.get("teams")
    if not isinstance(teams, list):
        raise web.HTTPBadRequest(text="teams: a list of teams (lists of player ids) is required")
    if len(teams) < 2:
        raise web.HTTPBadRequest(text=f"teams: at least two teams are required (got {len(teams)})")
    if len(teams) > MAX_TEAMS:
        raise web.HTTPBadRequest(text=f"teams: {len(teams)} teams, at most {MAX_TEAMS} per request")
    out = [_ids(team, f"teams[{t}]") for t, team in enumerate(teams)]
    total = sum(map(len, out))
    if total > MAX_IDS:
        raise web.HTTPBadRequest(text=f"teams: {total} players, at most {MAX_IDS} per request")
    seen: dict[str, int] = {}
    for t, team in enumerate(out):
        if not team:
            raise web.HTTPBadRequest(text=f"teams[{t}]: a team needs at least one player")
        for i, p in enumerate(team):
            if p in seen:
                raise web.HTTPBadRequest(text=f"teams[{t}][{i}]: player {p!r} is already in team {seen[p]}")
            seen[p] = t
    return out


async def _pool_post(engine_of: EngineOf, request: web.Request, parse: Callable[[dict[str, Any]], T],
                     ) -> tuple[str, T, PoolEngine]:
    """A POST to a pool's route: the pool, its JSON object body as ``parse`` checks it, and the pool's
    engine. In that order: a wrong body answers 400 whether the pool exists or not, then 404."""
    try:
        body = orjson.loads(await request.read())
    except orjson.JSONDecodeError:
        raise web.HTTPBadRequest(text="body: not JSON") from None
    if not isinstance(body, dict):
        raise web.HTTPBadRequest(text="body: a JSON object is required")
    pool, parsed = request.match_info["pool"], parse(body)
    return pool, parsed, await engine_of(pool)


def make_web_app(api: ReadApi) -> web.Application:
    routes = ApiRoutes()
    engines: dict[str, PoolEngine] = {}

    async def engine_of(pool: str) -> PoolEngine:
        """The pool's engine as this thread makes it, from the meta its own store reads (the worker's registry
        reads through the rating pipeline's client, which belongs to the worker's loop). The meta is read on
        every request, so a pool deleted since its engine was made answers 404."""
        meta = await api.store.meta(pool)
        if meta is None:
            raise web.HTTPNotFound(text=f"unknown pool {pool!r}")
        eng = engines.get(pool)
        if eng is None:
            try:
                eng = engines[pool] = PoolEngine.from_meta(pool, meta["system"], meta["params"])
            except PoolConfigError as exc:  # stored by another version; the worker dead-letters its events
                raise web.HTTPInternalServerError(text=str(exc)) from exc
        return eng
    reads = asyncio.Semaphore(api.concurrency)  # a request waits here, not on an exhausted connection pool
    one_ping = asyncio.Lock()  # probes arriving together share the store's connection in turn

    async def ping_on_loop() -> None:
        async with asyncio.timeout(HEALTH_TIMEOUT_S):
            async with one_ping:
                await api.store.r.ping()

    ping = ping_on_loop if api.health is None else api.health

    handling = [0]  # requests under way, the probes left out
    token = api.token.encode()

    @web.middleware
    async def guard(request: web.Request, handler: Callable[[web.Request], Any]) -> web.StreamResponse:
        path = request.path
        if path in OPEN_PATHS:
            return await handler(request)
        if handling[0] >= api.max_requests:
            raise web.HTTPTooManyRequests(text=f"more than {api.max_requests} requests at once "
                                          "(MMR_HTTP_MAX_REQUESTS); try again", headers={"Retry-After": "1"})
        if token and not (path == "/" or path.startswith(OPEN_PREFIXES)):
            given = request.headers.get("Authorization", "")
            scheme, _, value = given.partition(" ")
            if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), token):
                raise web.HTTPUnauthorized(text="a bearer token is required (Authorization: Bearer <MMR_HTTP_TOKEN>)",
                                           headers={"WWW-Authenticate": 'Bearer realm="mmr-stream"'})
        handling[0] += 1
        try:
            async with reads if path.startswith("/pools") else contextlib.nullcontext():
                return await handler(request)
        finally:
            handling[0] -= 1

    not_ready = json_answer("Health", "starting or unhealthy")

    def health(status: str, code: int = 200, **more: Any) -> web.Response:
        return web.json_response({"status": status, "http_port": api.port, **more}, status=code)

    @routes.get("/readyz", {**operation("Readiness: the app runs and Redis answers a PING within 2 s",
                                        {200: _HEALTH, 503: not_ready}), "operationId": "readyz"})
    @routes.get("/healthz", {**operation("The same as /readyz", {200: _HEALTH, 503: not_ready}),
                             "operationId": "healthz"})
    async def ready(request: web.Request) -> web.Response:
        try:
            await ping()
        except Exception as exc:  # TimeoutError included: a Redis too slow to answer a probe is not ready
            reason = api.blocked()  # what the worker knows besides (credentials refused: it stops)
            more = {} if reason is None else {"reason": reason}
            return health("unhealthy", 503, redis=redact.mask(repr(exc)), **more)
        if not api.running():
            return health("starting", 503)
        reason = api.blocked()
        if reason is not None:
            return health("unhealthy", 503, reason=reason)
        halted = api.halted()
        if halted:  # still ready: see docs/operator.md, "A bug in the rating step"
            return health("degraded", halted=halted)
        return health("ok")

    @routes.get("/livez", operation("Liveness: the process and its event loop answer (no Redis, no Kafka)",
                                    {200: _HEALTH, 503: json_answer("Health", "the worker's event loop did not "
                                                                              "answer within 10 s")}))
    async def livez(request: web.Request) -> web.Response:
        loop = api.worker_loop
        if loop is not None and loop is not asyncio.get_running_loop() and loop.is_running():
            answered = concurrent.futures.Future[None]()
            loop.call_soon_threadsafe(answered.set_result, None)
            try:
                await asyncio.wait_for(asyncio.wrap_future(answered), LIVEZ_TIMEOUT_S)
            except TimeoutError:
                return health("stalled", 503)
        return health("alive")

    @routes.get("/metrics", operation("Prometheus metrics", {200: text_answer("Prometheus text format")}))
    async def metrics(request: web.Request) -> web.Response:
        body = generate_latest(api.registry)
        return web.Response(body=body, headers={"Content-Type": CONTENT_TYPE_LATEST})

    pool_api.add_routes(routes, api, engine_of)  # before the player's (``.+``)

    @routes.get("/pools/{pool:[^/]+}/players/{player:.+}",  # any name: the default pattern refuses { and }
                operation("A player's current rating and percentile",
                          {200: json_answer("PlayerRating"), 404: NO_PLAYER, 500: _STORED}, [POOL, PLAYER]))
    async def player(request: web.Request) -> web.Response:
        pool, name = request.match_info["pool"], request.match_info["player"]
        eng = await engine_of(pool)
        raw, change = await api.store.player(pool, name)
        if raw is None:
            raise web.HTTPNotFound(text=f"unknown player {name!r} in pool {pool!r}")
        with stored_value_errors():
            row = _row(pool, name, eng, raw)
        _explain(row, change)
        found = await api.store.standing(pool, name)  # None: not on the leaderboard
        if found is not None:
            _, lower, equal, total = found
            row.update(percentile=percentile_rank(lower, equal, total), players=total)
        return web.json_response(row)

    @routes.get("/pools/{pool:[^/]+}/leaderboard", operation(
        "A page of the leaderboard: players by displayed rating, best first",
        {200: json_answer("Leaderboard"), **_POOL_ERRORS},
        [POOL, query_param("n", INT, "entries (1 to 1000; outside, the nearest)", example=20),
         query_param("offset", {**COUNT, "maximum": MAX_OFFSET}, "entries skipped (0 = from the best)", example=0)]))
    async def leaderboard(request: web.Request) -> web.Response:
        pool = request.match_info["pool"]
        n = min(max(query_int(request, "n", 20), 1), 1000)
        offset = query_int(request, "offset", 0, 0, MAX_OFFSET)
        eng = await engine_of(pool)
        top, total = await api.store.page(pool, offset, n)
        rows, unreadable = await _rows(pool, eng, [p for p, _ in top])
        return web.json_response({"pool": pool, "top": rows, "offset": offset, "total": total, **unreadable})

    async def _rows(pool: str, eng: PoolEngine, players: list[str],
                    ) -> tuple[list[dict[str, Any]], dict[str, list[str]]]:
        """The ratings of the stored players among ``players`` (in order), and ``{"unreadable": [...]}``
        those whose stored value is not a belief, if any."""
        raws = await api.store.beliefs(pool, players)
        rows: list[dict[str, Any]] = []
        unreadable: list[str] = []
        for p, raw in raws.items():
            if raw is None:
                continue
            try:
                rows.append(_row(pool, p, eng, raw))
            except RatingError as exc:  # one corrupt value does not take the whole answer down
                log.warning("pool %r: %s", pool, exc)
                unreadable.append(p)
        return rows, {"unreadable": unreadable} if unreadable else {}

    @routes.get("/pools/{pool:[^/]+}/leaderboard/rank/{player:.+}", operation(
        "A player's rank on the leaderboard", {200: json_answer("LeaderboardRank"),
                                               404: text_answer("unknown pool, or the player is not on it")},
        [POOL, PLAYER]))
    async def leaderboard_rank(request: web.Request) -> web.Response:
        pool, name = request.match_info["pool"], request.match_info["player"]
        await engine_of(pool)
        found = await api.store.rank(pool, name)
        if found is None:
            raise web.HTTPNotFound(text=f"player {name!r} is not on the leaderboard of pool {pool!r}")
        rank, offset, score, total = found
        return web.json_response({"pool": pool, "player": name, "rank": rank, "offset": offset, "rating": score,
                                  "total": total})

    @routes.post("/pools/{pool:[^/]+}/players", operation(
        "Many players' ratings at once (unknown ids listed apart)",
        {200: json_answer("Players"), **_POOL_ERRORS},
        [POOL], body="PlayersRequest"))
    async def players(request: web.Request) -> web.Response:
        pool, wanted, eng = await _pool_post(engine_of, request, _players)
        rows, unreadable = await _rows(pool, eng, wanted)
        changes = await api.store.changes(pool, [r["player"] for r in rows])
        for row in rows:  # the same answer per player as GET /pools/{pool}/players/{player}
            _explain(row, changes[row["player"]])
        found = {r["player"] for r in rows} | set(unreadable.get("unreadable", ()))
        return web.json_response({"pool": pool, "players": rows, "unknown": [p for p in wanted if p not in found],
                                  **unreadable})

    @routes.post("/pools/{pool:[^/]+}/predict", operation(
        "A lobby's prediction: each team's chance, expected rank, the draw probability, the match quality",
        {200: json_answer("Prediction"), **_POOL_ERRORS},
        [POOL], body="PredictRequest"))
    async def predict(request: web.Request) -> web.Response:
        pool, (teams, sides, neutral), eng = await _pool_post(engine_of, request, _lobby)
        shifts = _lobby_shifts(await learned_advantages(api.store, eng), teams, sides, neutral)
        raws, flat = await _stored_beliefs(api, pool, eng, [p for team in teams for p in team])
        members = iter(flat)
        beliefs: list[list[Belief]] = [[next(members) for _ in team] for team in teams]
        # numpy only for the team models (a large lobby's prediction is long: not on the rating thread);
        # the others may call a kernel in win_probability and take the kernels' thread, like /win-probability
        executor = None if eng.system.name in lobby.SUM_MODELS | lobby.MEAN_MODELS else api.executor
        with stored_value_errors():  # a stored value that decodes but gives no finite prediction
            try:
                pred = await asyncio.get_running_loop().run_in_executor(executor, lobby.predict, eng.system, beliefs,
                                                                        shifts)
            except lobby.LobbyRefused as exc:
                raise web.HTTPBadRequest(text=f"teams: {exc}") from exc
        return web.json_response({
            "pool": pool, "system": eng.system.name,
            "teams": [{"players": team, "known": [raws[p] is not None for p in team], "win": w, "expected_rank": r,
                       "advantage": h}
                      for team, w, r, h in zip(teams, pred.win, pred.expected_rank, shifts or [0.0] * len(teams),
                                               strict=True)],
            "draw": pred.draw, "expected_score": pred.expected_score, "quality": pred.quality})

    @routes.get("/pools/{pool:[^/]+}/win-probability", operation(
        "Expected score of a against b (unknown players: the system's new-player belief)",
        {200: json_answer("WinProbability"), **_POOL_ERRORS},
        [POOL, query_param("a", NAME, "player A", True, "ann"), query_param("b", NAME, "player B", True, "bob"),
         query_param("neutral", {"type": "boolean", "default": False},
                     "a neutral match (else a plays with the pool's learned match-side advantage: home, white)",
                     example=False)]))
    async def win_probability(request: web.Request) -> web.Response:
        pool = request.match_info["pool"]
        a, b = request.query.get("a"), request.query.get("b")
        if not a or not b:
            raise web.HTTPBadRequest(text="query parameters a and b are required")
        neutral = request.query.get("neutral", "false")
        if neutral not in ("true", "false"):
            raise web.HTTPBadRequest(text="neutral must be true or false")
        eng = await engine_of(pool)
        shifts = _lobby_shifts(await learned_advantages(api.store, eng), [[a], [b]], None, neutral == "true")
        shift = shifts[0] if shifts else 0.0
        raws, (ba, bb) = await _stored_beliefs(api, pool, eng, [a, b])
        p = await asyncio.get_running_loop().run_in_executor(api.executor, eng.system.win_probability, ba, bb, shift)
        if not math.isfinite(p):  # a stored value that decodes but is no belief (NaN is not JSON)
            raise web.HTTPInternalServerError(text=f"the win probability of {a!r} against {b!r} is not finite")
        return web.json_response({"pool": pool, "a": a, "b": b, "p_a": p, "advantage": shift,
                                  "known": [raws[a] is not None, raws[b] is not None]})

    @routes.get("/openapi.json", operation("This API's OpenAPI document", {200: json_answer({"type": "object"})}))
    async def openapi(request: web.Request) -> web.Response:
        return web.json_response(routes.document(__version__))

    console.add_routes(routes)
    app = web.Application(middlewares=[guard])
    app.add_routes(routes.table)
    return app


class _ServerLog(logging.LoggerAdapter):  # type: ignore[type-arg]
    """aiohttp's server logger, but requests it could not parse (``HttpProcessingError``) are one WARNING
    line without a traceback per ``BAD_REQUEST_LOG_S``, with their count: a client cannot flood the log."""

    def __init__(self) -> None:
        super().__init__(logging.getLogger("aiohttp.server"), {})
        self._last = -math.inf
        self._since = 0

    def exception(self, msg: object, *args: Any, exc_info: Any = True, **kwargs: Any) -> None:
        if isinstance(exc_info, http_exceptions.HttpProcessingError):
            self._since += 1
            now = time.monotonic()
            if now - self._last >= BAD_REQUEST_LOG_S:
                log.warning("HTTP: %d request(s) refused with 400 (could not be parsed); the last: %s",
                            self._since, str(exc_info.message)[:200])
                self._last, self._since = now, 0
            return
        super().exception(msg, *args, exc_info=exc_info, **kwargs)


class CpuShare:
    """Keeps the CPU time of the thread that calls ``tick`` at or below ``share`` of the wall time, over
    windows of ``WINDOW_S``: a tick over its share sleeps until it is back at it (at most ``MAX_REST_S``
    at once; ``rested``: the seconds slept in all).

    Why: the HTTP thread and the rating thread share the GIL, and clients reading as fast as they can
    keep the HTTP thread runnable however few requests are let in (a 429 costs a parse too), so the
    rating loop would wait for the GIL at every wake-up. A sleeping thread holds no GIL and takes no
    connection: clients wait in the socket's backlog."""

    WINDOW_S = 0.1
    MAX_REST_S = 0.05

    def __init__(self, share: float) -> None:
        self.share = share
        self.rested = 0.0
        self._t0, self._cpu0 = time.monotonic(), time.thread_time()

    def tick(self) -> None:
        now, cpu = time.monotonic(), time.thread_time()
        rest = (cpu - self._cpu0) / self.share - (now - self._t0)
        if rest > 0:
            rest = min(rest, self.MAX_REST_S)
            time.sleep(rest)
            self.rested += rest
            now += rest
        if now - self._t0 >= self.WINDOW_S:
            self._t0, self._cpu0 = now, cpu


class HttpServer:
    """The API served on a thread and event loop of its own (thread ``mmr-http``), where the read store,
    the health ping and the pools' engines are used and closed."""

    def __init__(self, api: ReadApi, sock: socket.socket) -> None:
        self.api = api
        self.sock = sock
        #: the thread's CPU share (``MMR_HTTP_CPU_SHARE``), checked every ``SHARE_TICK_S`` on its loop
        self.cpu = CpuShare(api.cpu_share) if api.cpu_share < 1 else None
        self.loop: asyncio.AbstractEventLoop | None = None
        self._runner: web.AppRunner | None = None
        self._thread: threading.Thread | None = None

    async def start(self) -> None:
        if self.api.worker_loop is None:
            self.api = dataclasses.replace(self.api, worker_loop=asyncio.get_running_loop())
        started = concurrent.futures.Future[None]()
        self._thread = threading.Thread(target=self._run, args=(started,), name=thread_names.HTTP, daemon=True)
        self._thread.start()
        await asyncio.wrap_future(started)
        host, port = self.sock.getsockname()[:2]
        log.info("HTTP on %s:%s", host, port)

    def _run(self, started: concurrent.futures.Future[None]) -> None:
        thread_names.name_os_thread(thread_names.HTTP)
        loop = self.loop = asyncio.new_event_loop()
        asyncio.set_event_loop(loop)
        try:
            self._runner = web.AppRunner(make_web_app(self.api), access_log=None, logger=_ServerLog())
            loop.run_until_complete(self._runner.setup())
            loop.run_until_complete(web.SockSite(self._runner, self.sock).start())
        except BaseException as exc:
            started.set_exception(exc)
            loop.close()
            return
        started.set_result(None)
        if self.cpu is not None:
            self._govern(loop, self.cpu)
        try:
            loop.run_forever()
        finally:
            loop.close()

    def _govern(self, loop: asyncio.AbstractEventLoop, cpu: CpuShare) -> None:
        cpu.tick()
        loop.call_later(SHARE_TICK_S, self._govern, loop, cpu)

    async def _stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()  # closes the listening socket
        await self.api.store.close()

    async def cleanup(self) -> None:
        """Stop serving, close the read store, end the thread (once; later calls do nothing)."""
        loop, thread, self.loop = self.loop, self._thread, None
        if loop is None or thread is None:
            return
        try:
            await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(self._stop(), loop))
        finally:
            loop.call_soon_threadsafe(loop.stop)
            while thread.is_alive():  # (a join on an executor would leave that executor's thread behind)
                await asyncio.sleep(0.005)

