"""The operator's console: a read-only web page served by the worker's HTTP API at ``/``.

One HTML page with its script and style (``static/``, package data: nothing is fetched from
elsewhere), reading the JSON API and rendering by hash routes a person can share: ``/#/`` (the
pools), ``/#/pools/<pool>`` (system, counts, histogram, leaderboard), ``/#/pools/<pool>/players/<player>``
(rating, percentile, the history chart), ``/#/health`` (rates, lag, recent dead letters). With a bearer
token set, the page and its assets answer without it (they hold no data); the script asks for it once.
"""

from __future__ import annotations

from importlib import resources

from aiohttp import web

from stream.service.openapi import ApiRoutes, operation, text_answer

#: the assets under /console/, by name: their media types
ASSETS = {"app.js": "text/javascript", "app.css": "text/css"}
_HTML = {"description": "the console's page", "content": {"text/html": {"schema": {"type": "string"}}}}


def asset(name: str) -> bytes:
    """The bytes of ``static/<name>`` as the package ships them."""
    return resources.files(__package__).joinpath("static", name).read_bytes()


def add_routes(routes: ApiRoutes) -> None:
    """``GET /`` (the page) and ``GET /console/{asset}`` (its script and style)."""
    page = asset("index.html")
    assets = {name: asset(name) for name in ASSETS}

    @routes.get("/", operation("The console: a web page over the pools, leaderboards, players and the worker's health",
                               {200: _HTML}))
    async def console_page(request: web.Request) -> web.Response:
        return web.Response(body=page, content_type="text/html", charset="utf-8",
                            headers={"Cache-Control": "no-cache"})

    @routes.get("/console/{asset}", operation(
        "The console's script and style",
        {200: {"description": "the asset", "content": {t: {"schema": {"type": "string"}} for t in ASSETS.values()}},
         404: text_answer("no such asset")},
        [{"name": "asset", "in": "path", "required": True, "schema": {"type": "string", "enum": sorted(ASSETS)},
          "example": "app.js"}]))
    async def console_asset(request: web.Request) -> web.Response:
        name = request.match_info["asset"]
        if name not in assets:
            raise web.HTTPNotFound(text=f"no console asset {name!r}")
        return web.Response(body=assets[name], content_type=ASSETS[name], charset="utf-8",
                            headers={"Cache-Control": "no-cache"})
