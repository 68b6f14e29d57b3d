"""The operator's console: a read-only web page served by the worker's HTTP API at ``/``.

One HTML page and its script and style (``static/``, package data: nothing is fetched from
elsewhere). The script reads the JSON API (stream.service.http, stream.service.pool_api) and
renders, by hash routes a person can share:

    /#/                                     the pools, each a link whose text is the pool's name
    /#/pools/<pool>?offset=N                the pool: system, counts, the rating histogram, the
                                            leaderboard with paging and a search by player id
    /#/pools/<pool>/players/<player>        the player: rating, percentile, the rating-history chart
                                            (mu with a ±sigma band, each point's cause event)
    /#/health                               the worker: event and rating rates, consumer lag, recent
                                            dead letters with their reasons, Redis and Kafka

Names are percent-encoded in the hash as in the API's paths. With a bearer token set
(MMR_HTTP_TOKEN), the page and its assets answer without it (they hold no data); the script asks for
the token once, keeps it in the browser's session storage and sends it with every read.
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
