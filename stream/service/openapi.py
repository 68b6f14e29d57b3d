"""The OpenAPI 3.1 document of the worker's HTTP API, built from the routes themselves.

Every route is registered through ``ApiRoutes`` with its operation, so a route cannot exist without
its documented form, and ``GET /openapi.json`` serves exactly the routes the app has
(tests/integration/test_openapi.py checks both directions and runs schemathesis against it). Answers
are open objects: fields may be added, never removed. Errors answer ``text/plain`` naming the field.
"""

from __future__ import annotations

import functools
import re
from collections.abc import Callable, Mapping
from typing import Any

from aiohttp import web

from stream.events.validate import schema

Handler = Callable[[web.Request], Any]

#: the rating message's fields that explain a change, besides the ``*_before`` ones
_EXPLANATION = ("delta", "event_id", "time", "round_id", "matches", "match_ids", "performance")

#: what the docs/interface.md allows as a player id or a pool name
NAME = {"type": "string", "minLength": 1, "maxLength": 128}
#: schema fragments the answers share
STR: dict[str, Any] = {"type": "string"}
NUM: dict[str, Any] = {"type": "number"}
INT: dict[str, Any] = {"type": "integer"}
COUNT: dict[str, Any] = {"type": "integer", "minimum": 0}
STRS: dict[str, Any] = {"type": "array", "items": STR}
RATINGS: dict[str, Any] = {"type": "array", "items": {"$ref": "#/components/schemas/Rating"}}


def obj(required: list[str], properties: dict[str, Any], **more: Any) -> dict[str, Any]:
    """A JSON object's schema: its ``required`` fields and ``properties``."""
    return {"type": "object", "required": required, "properties": properties, **more}


def doc(schema: dict[str, Any], description: str, **more: Any) -> dict[str, Any]:
    """``schema`` with a description (and ``more`` keywords)."""
    return {**schema, **more, "description": description}


SCHEMAS: dict[str, Any] = {
    "Health": obj(["status", "http_port"], {
        "status": {"type": "string", "enum": ["alive", "ok", "degraded", "starting", "unhealthy"]}, "http_port": INT,
        "redis": doc(STR, "why Redis did not answer"),
        "reason": doc(STR, "why the worker rates nothing now (Redis unavailable under a commit, or Redis lost "
                           "acknowledged writes; docs/operator.md)"),
        "halted": doc({"type": "array", "items": {"type": "object"}}, "input partitions halted by a bug in the "
                      "rating step (status `degraded`; docs/operator.md)")}),
    "Rating": obj(["pool", "player", "rating", "mu", "sigma", "rounds", "version", "system"], {
        "pool": STR, "player": STR, "rating": doc(NUM, "the displayed (conservative) rating"), "mu": NUM,
        "sigma": NUM, "rounds": doc(INT, "events that changed this player"), "version": INT, "system": STR,
        # the explanation of the latest change, as in the rating message (its shipped schema)
        **{k: v for k, v in schema("rating")["properties"].items() if k.endswith("_before") or k in _EXPLANATION}}),
    "Leaderboard": obj(["pool", "top", "offset", "total"], {
        "pool": STR, "top": doc(RATINGS, "players by displayed rating, best first, from `offset` on"),
        "offset": COUNT, "total": doc(COUNT, "players on the leaderboard"),
        "unreadable": doc(STRS, "players whose stored value is not a belief (logged)")}),
    "LeaderboardRank": obj(["pool", "player", "rank", "offset", "rating", "total"], {
        "pool": STR, "player": STR,
        "rank": doc(INT, "1 + players with a higher displayed rating (ties share a rank)", minimum=1),
        "offset": doc(COUNT, "the player's place in the leaderboard's order (0 = first): the page `?offset=` "
                             "this value starts with this player"),
        "rating": NUM, "total": {"type": "integer", "minimum": 1}}),
    "Players": obj(["pool", "players", "unknown"], {
        "pool": STR, "players": doc(RATINGS, "the known players, in the order asked (each once)"),
        "unknown": doc(STRS, "ids without a rating in the pool"), "unreadable": STRS}),
    "PlayersRequest": obj(["players"], {"players": {"type": "array", "minItems": 1, "maxItems": 1000, "items": NAME}},
                          example={"players": ["ann", "bob", "zed"]}),
    "WinProbability": obj(["pool", "a", "b", "p_a", "known"], {
        "pool": STR, "a": STR, "b": STR,
        "p_a": doc(NUM, "expected score of a against b (P(win) + P(draw)/2)", minimum=0, maximum=1),
        "advantage": doc(NUM, "the side advantage a played with (the pool's learned match-side advantage; 0 when "
                              "neutral or none is learned)"),
        "known": {"type": "array", "items": {"type": "boolean"}, "minItems": 2, "maxItems": 2}}),
    "PredictRequest": obj(["teams"], {
        "teams": doc({"type": "array", "minItems": 2, "maxItems": 64,
                      "items": {"type": "array", "minItems": 1, "items": NAME, "uniqueItems": True}},
                     "teams of player ids (a player alone: a team of one); each player in one team only; 1000 "
                     "players at most"),
        "sides": doc({"type": "array", "items": {"type": ["string", "null"], "minLength": 1, "maxLength": 32}},
                     "each team's side label (home/away, blue/red): the team plays with the pool's learned "
                     "advantage of its side (docs/advantage.md)"),
        "neutral": doc({"type": "boolean", "default": False}, "without sides, for two players: false (the "
                       "default) gives the first the pool's learned match-side advantage (home, white), true none")},
        example={"teams": [["ann", "bob"], ["cat", "dan"]], "sides": ["home", "away"]}),
    "Prediction": obj(["pool", "system", "teams", "draw", "expected_score", "quality"], {
        "pool": STR, "system": STR,
        "teams": {"type": "array", "items": obj(["players", "known", "win", "expected_rank"], {
            "players": STRS,
            "known": doc({"type": "array", "items": {"type": "boolean"}},
                         "per player: rated in the pool (else the system's new-player belief)"),
            "win": doc(NUM, "two teams: P(this team wins); more: P(it finishes first)", minimum=0, maximum=1),
            "expected_rank": doc(NUM, "1 + Σ over the other teams of P(ahead of this one), a draw counting one half",
                                 minimum=1),
            "advantage": doc(NUM, "the side advantage the team played with")})},
        "draw": doc({"type": ["number", "null"]}, "two teams, systems that model draws (trueskill): P(draw); else "
                    "null", minimum=0, maximum=1),
        "expected_score": doc({"type": ["number", "null"]}, "two teams: the first team's win + draw/2 (the pairing "
                              "prediction); more teams: null", minimum=0, maximum=1),
        "quality": doc(NUM, "balance: two teams 1 − |2·expected_score − 1|; n teams n · min win", minimum=0,
                       maximum=1)}),
}


def _ref(name: str) -> dict[str, Any]:
    return {"$ref": f"#/components/schemas/{name}"}


def json_answer(schema: str | dict[str, Any], description: str = "OK") -> dict[str, Any]:
    return {"description": description,
            "content": {"application/json": {"schema": _ref(schema) if isinstance(schema, str) else schema}}}


def text_answer(description: str) -> dict[str, Any]:
    return {"description": description, "content": {"text/plain": {"schema": {"type": "string"}}}}


def path_param(name: str, description: str, example: str) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": description, "schema": NAME,
            "example": example}


def query_param(name: str, schema: dict[str, Any], description: str, required: bool = False,
                example: Any = None) -> dict[str, Any]:
    out = {"name": name, "in": "query", "required": required, "description": description, "schema": schema}
    if example is not None:
        out["example"] = example
    return out


POOL = path_param("pool", "the pool's name (percent-encoded)", "duos")
PLAYER = path_param("player", "any player id, percent-encoded ({, }, /, %, spaces...)", "ann")
#: error answers several routes share
NO_POOL = text_answer("unknown pool")
NO_PLAYER = text_answer("unknown pool or player")
BAD_PARAM = text_answer("a parameter is wrong; the text names it")
OLD_POOL = text_answer("the pool was stored by another version")


def operation(summary: str, answers: Mapping[int, dict[str, Any]], params: list[dict[str, Any]] | None = None,
              body: str | None = None) -> dict[str, Any]:
    """An OpenAPI operation: ``answers`` by status, ``body`` the name of a JSON request schema."""
    op: dict[str, Any] = {"summary": summary, "responses": {str(k): v for k, v in sorted(answers.items())}}
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": {"application/json": {"schema": _ref(body)}}}
    return op


#: the document's groups of operations, in the order a reader meets them
TAGS = {
    "pools": "The pools the worker rates: their systems, parameters and counts",
    "players": "One player's or many players' current ratings and history",
    "leaderboard": "Players of a pool by displayed rating, and a player's rank",
    "predictions": "Predicted outcomes from the current ratings (pairs and lobbies)",
    "console": "Pages for people (HTML), read-only",
    "operations": "Health probes, Prometheus metrics and this document",
}
#: an operation's tag by its OpenAPI path, first match (an operation may name its own ``tags``)
_TAG_RULES = (
    (re.compile(r"^/(livez|readyz|healthz|metrics|openapi\.json)$"), "operations"),
    (re.compile(r"^/pools/\{pool\}/leaderboard(/|$)"), "leaderboard"),
    (re.compile(r"^/pools/\{pool\}/players(/|$)"), "players"),
    (re.compile(r"^/pools/\{pool\}/(predict|win-probability)$"), "predictions"),
    (re.compile(r"^/pools(/|$)"), "pools"),
)
#: relative to the document's own URL: the worker that serves ``/openapi.json`` serves the API
#: (its host and ``MMR_HTTP_PORT``; behind a proxy, the proxy's)
SERVERS = [{"url": "/", "description": "the worker serving this document"}]


def tag_of(path: str) -> str:
    """The tag of an operation on ``path`` (OpenAPI form): ``_TAG_RULES``, else a page of the console."""
    return next((tag for pattern, tag in _TAG_RULES if pattern.search(path)), "console")


def openapi_path(path: str) -> str:
    """aiohttp's ``{name:regex}`` as OpenAPI's ``{name}``."""
    return re.sub(r"\{(\w+):[^}]*\}", r"{\1}", path)


class ApiRoutes:
    """aiohttp's route table, each route registered with its OpenAPI operation."""

    def __init__(self) -> None:
        self.table = web.RouteTableDef()
        self.paths: dict[str, dict[str, dict[str, Any]]] = {}
        self.operation_ids: set[str] = set()

    def _add(self, method: str, path: str, op: dict[str, Any]) -> Callable[[Handler], Handler]:
        oapi = openapi_path(path)
        entry = self.paths.setdefault(oapi, {})
        if method.lower() in entry:
            raise ValueError(f"{method} {path} registered twice")
        entry[method.lower()] = op
        op.setdefault("tags", [tag_of(oapi)])

        def add(handler: Handler) -> Handler:
            # the handler's name: what a generated client calls the method, unique in the document
            op.setdefault("operationId", handler.__name__)
            if op["operationId"] in self.operation_ids:
                raise ValueError(f"operationId {op['operationId']!r} of {method} {path} is taken")
            self.operation_ids.add(op["operationId"])
            return self.table.route(method, path)(handler)

        return add

    get = functools.partialmethod(_add, "GET")
    post = functools.partialmethod(_add, "POST")

    def document(self, version: str, servers: list[dict[str, str]] | None = None) -> dict[str, Any]:
        """The OpenAPI document; ``version`` is the package's (``stream.__version__``, also the wheel's
        and ``mmr --version``'s). ``servers`` defaults to ``SERVERS``: the worker serving the document."""
        used = {t for ops in self.paths.values() for op in ops.values() for t in op.get("tags", ())}
        return {
            "openapi": "3.1.0",
            "info": {"title": "mmr-stream worker HTTP API", "version": version,
                     "description": "Ratings, leaderboards and predictions read from the worker's Redis "
                                    "(docs/matchmaker.md, HTTP API). Errors are text/plain and name the field."},
            "servers": SERVERS if servers is None else servers,
            "tags": [*({"name": name, "description": text} for name, text in TAGS.items() if name in used),
                     *({"name": name} for name in sorted(used - TAGS.keys()))],
            "paths": {p: self.paths[p] for p in sorted(self.paths)},
            "components": {"schemas": SCHEMAS},
        }
