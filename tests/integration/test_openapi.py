"""The OpenAPI document the worker serves: every route in it and nothing else, and the running
server answering as it says (schemathesis, positive and negative requests, a bounded seeded run).

The real aiohttp app on a real socket, in a thread of its own, reading a real Redis written by
the real ``Processor``; schemathesis loads the document from ``/openapi.json`` and calls the server.
"""

from __future__ import annotations

import asyncio
import collections
import threading
import uuid
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

from stream.events.validate import schema
from stream.service.app import http_clients
from stream.service.config import PoolConfig, Settings
from stream.service.http import make_web_app
from stream.service.openapi import SCHEMAS, openapi_path
from stream.service.processor import Message, Processor
from stream.service.read_api import ReadApi
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: the players and pool of the document's examples (docs/matchmaker.md, "HTTP API")
PLAYERS = ["ann", "bob", "cat", "dan"]
#: requests per operation and mode: the run stays a few seconds (seeded: the same requests every run)
MAX_EXAMPLES = 8


def _app(s: Settings) -> tuple[web.Application, ReadApi]:
    reads, health = http_clients(s, cluster=False)
    proc = Processor(s, reads, ThreadPoolExecutor(1))
    api = ReadApi(reads, CollectorRegistry(), proc.executor, 0, lambda: True, health=health,
                  concurrency=s.http_redis_connections)
    return make_web_app(api), api


def test_a_rating_answer_documents_every_field_of_the_rating_message() -> None:
    """The player endpoints answer what the rating message carries (its explanation included)."""
    assert set(SCHEMAS["Rating"]["properties"]) == set(schema("rating")["properties"]) - {"type"}


def test_every_route_is_in_the_document_and_nothing_else() -> None:
    app, _ = _app(Settings(redis_cluster=False))
    routes = {(r.method, openapi_path(r.resource.canonical)) for r in app.router.routes()  # type: ignore[union-attr]
              if r.method != "HEAD"}  # aiohttp answers HEAD beside every GET
    served = next(r.handler for r in app.router.routes()
                  if r.method == "GET" and r.resource is not None and r.resource.canonical == "/openapi.json")
    body = orjson.loads(asyncio.run(served(None)).body)  # type: ignore[arg-type,attr-defined]
    documented = {(m.upper(), p) for p, ops in body["paths"].items() for m in ops}
    assert routes == documented
    assert ("POST", "/pools/{pool}/predict") in routes and ("GET", "/openapi.json") in routes
    for ops in body["paths"].values():  # every answer of every route is described
        for op in ops.values():
            assert op["summary"] and op["responses"], op


@pytest.fixture
def server(redis_url: str) -> Iterator[str]:
    """The app serving on a port of 127.0.0.1 the system picks as it binds, from its own thread; yields the
    base URL."""
    s = Settings(redis_url=redis_url, key_prefix=f"oapi{uuid.uuid4().hex[:6]}", redis_cluster=False,
                 http_redis_connections=4, pools={"duos": PoolConfig("elo-mmx")})
    ports: list[int] = []
    ready = threading.Event()
    stop: list[Any] = []

    def serve() -> None:
        async def main() -> None:
            store = RedisStore.from_url(redis_url, prefix=s.key_prefix)
            event = {"type": "round", "event_id": "r1", "pool": "duos", "round_id": "r1", "time": 1,
                     "teams": [{"players": PLAYERS[:2], "rank": 1}, {"players": PLAYERS[2:], "rank": 2}]}
            with ThreadPoolExecutor(1) as ex:
                res = await Processor(s, store, ex).process([Message("in", 0, 0, orjson.dumps(event))])
            await store.close()
            assert res.dead == []
            app, api = _app(s)
            runner = web.AppRunner(app, access_log=None)
            await runner.setup()
            await web.TCPSite(runner, "127.0.0.1", 0).start()
            ports.append(runner.addresses[0][1])
            done = asyncio.Event()
            stop.append((asyncio.get_running_loop(), done))
            ready.set()
            await done.wait()
            await runner.cleanup()
            await api.store.close()
            assert api.health is not None
            await api.health.close()

        asyncio.run(main())

    thread = threading.Thread(target=serve, daemon=True)
    thread.start()
    assert ready.wait(60), "the server did not start"
    try:
        yield f"http://127.0.0.1:{ports[0]}"
    finally:
        loop, done = stop[0]
        loop.call_soon_threadsafe(done.set)
        thread.join(30)


def _fuzz(op: Any, strategy: Any, label: str, n: int, server: str, excluded: list[Any], statuses: list[int],
          failures: list[str]) -> None:
    """Up to ``n`` seeded requests drawn from ``strategy`` (one operation's), each response checked."""
    from hypothesis import HealthCheck, given, settings
    from hypothesis.errors import Unsatisfiable

    @given(case=strategy)
    @settings(max_examples=n, derandomize=True, deadline=None, database=None, suppress_health_check=list(HealthCheck))
    def call(case: Any) -> None:
        resp = case.call(base_url=server)
        statuses.append(resp.status_code)
        try:
            case.validate_response(resp, excluded_checks=excluded)
        except BaseExceptionGroup as exc:  # schemathesis's failures; every operation's are collected
            failures.append(f"{op.label} {label}: {exc.exceptions}")

    try:
        call()
    except Unsatisfiable:  # nothing to make negative: an operation without parameters
        assert label == "negative", op.label


def test_the_running_server_answers_as_its_document_says(server: str) -> None:
    schemathesis = pytest.importorskip("schemathesis")
    schema = schemathesis.openapi.from_url(f"{server}/openapi.json")
    failures: list[str] = []
    statuses: dict[str, list[int]] = collections.defaultdict(list)
    for result in schema.get_all_operations():
        op = result.ok()
        # the schema cannot say that a player is in one team only (nor the 1000 players of a lobby):
        # such a lobby is schema-valid and refused with 400, which this check would call a failure
        excluded = [schemathesis.checks.positive_data_acceptance] if op.label == "POST /pools/{pool}/predict" else []
        examples = schema.get_strategies_from_examples(op)
        for strategy in examples:  # the document's examples: pool duos and its players
            _fuzz(op, strategy, "example", 1, server, excluded, statuses[op.label], failures)
        if op.path.startswith("/pools/"):  # every example reaches the data
            assert examples and statuses[op.label] and set(statuses[op.label]) == {200}, (op.label, statuses)
        for mode in (schemathesis.GenerationMode.POSITIVE, schemathesis.GenerationMode.NEGATIVE):
            _fuzz(op, op.as_strategy(generation_mode=mode), mode.value, MAX_EXAMPLES, server, excluded,
                  statuses[op.label], failures)
    # every route but /openapi.json, which schemathesis leaves out as the document's own address (loaded above)
    assert sum(map(len, statuses.values())) > 50 and len(statuses) == 17, sorted(statuses)
    assert failures == [], "\n\n".join(failures[:5])
