"""The OpenAPI document's parts a generated client and a reader rely on: one ``operationId`` per
operation (unique), each operation tagged with a declared tag, ``servers``; checked on the document
the worker's app really serves. The running server against the document: tests/integration/test_openapi.py."""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson
import pytest
from aiohttp import web
from prometheus_client import CollectorRegistry

import stream
from stream.service.openapi import SERVERS, TAGS, ApiRoutes, operation, tag_of, text_answer


def served_document() -> dict[str, Any]:
    """What ``GET /openapi.json`` of the worker's app answers (clients built, nothing connected)."""
    from stream.service.app import http_clients
    from stream.service.config import Settings
    from stream.service.http import ReadApi, make_web_app
    from stream.service.processor import Processor

    s = Settings(redis_cluster=False)
    reads, health = http_clients(s, cluster=False)
    proc = Processor(s, reads, ThreadPoolExecutor(1))
    api = ReadApi(reads, CollectorRegistry(), proc.executor, 0, lambda: True, health=health,
                  concurrency=s.http_redis_connections)
    app = make_web_app(api)
    served = next(r.handler for r in app.router.routes()
                  if r.method == "GET" and r.resource is not None and r.resource.canonical == "/openapi.json")
    body: dict[str, Any] = orjson.loads(asyncio.run(served(None)).body)  # type: ignore[arg-type,attr-defined]
    proc.executor.shutdown()
    return body


def _operations(doc: dict[str, Any]) -> list[tuple[str, str, dict[str, Any]]]:
    return [(method.upper(), path, op) for path, ops in doc["paths"].items() for method, op in ops.items()]


def test_every_operation_has_a_unique_operation_id() -> None:
    ops = _operations(served_document())
    ids = [str(op.get("operationId")) for _, _, op in ops]
    assert all("operationId" in op for _, _, op in ops), ops
    assert all(i.isidentifier() for i in ids), ids
    assert len(set(ids)) == len(ids), sorted(ids)
    by_route = {(m, p): op["operationId"] for m, p, op in ops}
    assert by_route[("GET", "/openapi.json")] == "openapi"
    assert by_route[("POST", "/pools/{pool}/predict")]


def test_every_operation_is_tagged_and_every_tag_declared() -> None:
    doc = served_document()
    declared = [t["name"] for t in doc["tags"]]
    assert len(set(declared)) == len(declared)
    used = set()
    for method, path, op in _operations(doc):
        assert op["tags"], (method, path)
        used.update(op["tags"])
    assert used == set(declared), "declared tags are the used ones"
    assert all(t.get("description") for t in doc["tags"] if t["name"] in TAGS)
    tags = {(m, p): op["tags"] for m, p, op in _operations(doc)}
    assert tags[("GET", "/livez")] == ["operations"] and tags[("GET", "/metrics")] == ["operations"]
    assert tags[("GET", "/pools/{pool}/leaderboard")] == ["leaderboard"]
    assert tags[("POST", "/pools/{pool}/predict")] == ["predictions"]


def test_the_document_names_its_server_and_the_package_version() -> None:
    doc = served_document()
    assert doc["servers"] == SERVERS and doc["servers"][0]["url"] == "/"
    assert doc["info"]["version"] == stream.__version__  # as the wheel and `mmr --version` (test_versioning)


@pytest.mark.parametrize(("path", "tag"), [
    ("/readyz", "operations"), ("/openapi.json", "operations"),
    ("/pools", "pools"), ("/pools/{pool}", "pools"), ("/pools/{pool}/distribution", "pools"),
    ("/pools/{pool}/players/{player}", "players"), ("/pools/{pool}/players/{player}/history", "players"),
    ("/pools/{pool}/players", "players"), ("/pools/{pool}/leaderboard/rank/{player}", "leaderboard"),
    ("/pools/{pool}/win-probability", "predictions"), ("/", "console"), ("/pools-old", "console"),
])
def test_tags_by_path(path: str, tag: str) -> None:
    assert tag_of(path) == tag


def test_an_operation_id_twice_or_a_tag_of_its_own() -> None:
    routes = ApiRoutes()

    async def page(request: web.Request) -> web.Response:
        return web.Response()

    routes.get("/a", operation("a", {200: text_answer("ok")}))(page)
    with pytest.raises(ValueError, match="operationId 'page'"):
        routes.get("/b", operation("b", {200: text_answer("ok")}))(page)
    own = operation("c", {200: text_answer("ok")})
    own["tags"], own["operationId"] = ["extra"], "getC"
    routes.get("/c", own)(page)
    doc = routes.document("9.9.9", servers=[{"url": "https://ratings.example"}])
    assert doc["paths"]["/c"]["get"]["operationId"] == "getC"
    assert {"name": "extra"} in doc["tags"] and doc["servers"] == [{"url": "https://ratings.example"}]
    assert doc["info"]["version"] == "9.9.9"
