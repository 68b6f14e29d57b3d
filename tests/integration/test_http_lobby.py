"""What matchmakers ask of the worker's read API: lobby predictions, many players at once,
leaderboard pages and ranks.

The real aiohttp app (``make_web_app``) on a test server, reading a real Redis through the HTTP
clients the worker builds; the ratings are written by the real ``Processor`` from team rounds,
rounds and matches.
"""

from __future__ import annotations

import asyncio
import urllib.parse
import uuid
from collections.abc import AsyncIterator, Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from contextlib import asynccontextmanager
from typing import Any

import numpy as np
import orjson
import pytest
from aiohttp.test_utils import TestClient, TestServer
from prometheus_client import CollectorRegistry

from stream.ratings import lobby
from stream.service.app import http_clients
from stream.service.config import PoolConfig, Settings
from stream.service.http import MAX_IDS, MAX_TEAMS, ReadApi, make_web_app
from stream.service.processor import Message, Processor
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

DUOS = ["ann", "bob", "cat", "dan", "eve", "fay", "gus", "hal"]
SOLO = ["p0", "p1", "p2", "p3", "p4", "p5"]


def _events() -> list[dict[str, Any]]:
    """Team rounds in pool ``duos`` (elo-mmx), a round with a tie in ``solo`` (elo-mmr), matches in ``chess``
    (cowan) and ``blitz`` (trueskill), team rounds with sides ``home``/``away`` in ``afl`` (elo-mmx)."""
    out: list[dict[str, Any]] = []
    rng = np.random.default_rng(3)
    for k in range(6):
        order = rng.permutation(DUOS).tolist()
        out.append({"type": "round", "event_id": f"d{k}", "pool": "duos", "round_id": f"d{k}", "time": k,
                    "teams": [{"players": order[i:i + 2], "rank": 1 + i // 2} for i in range(0, 8, 2)]})
    out.append({"type": "round", "event_id": "s0", "pool": "solo", "round_id": "s0", "time": 1,
                "standings": [{"player": p, "rank": r} for p, r in zip(SOLO, [1, 2, 2, 3, 4, 5], strict=True)]})
    for i, pool in enumerate(("chess", "blitz")):
        out.append({"type": "match", "event_id": f"m{i}", "pool": pool, "time": 1, "a": "ann", "b": "bob",
                    "score": 1.0})
    for k in range(4):  # the home team wins three of four
        out.append({"type": "round", "event_id": f"a{k}", "pool": "afl", "round_id": f"a{k}", "time": k,
                    "teams": [{"players": DUOS[:2], "rank": 1 if k else 2, "side": "home"},
                              {"players": DUOS[2:4], "rank": 2 if k else 1, "side": "away"}]})
    return out


@asynccontextmanager
async def _client(redis_url: str) -> AsyncIterator[tuple[TestClient[Any, Any], Processor]]:
    s = Settings(redis_url=redis_url, key_prefix=f"lobby{uuid.uuid4().hex[:6]}", redis_cluster=False,
                 http_redis_connections=4,
                 pools={"duos": PoolConfig("elo-mmx"), "solo": PoolConfig("elo-mmr"), "chess": PoolConfig("cowan"),
                        "blitz": PoolConfig("trueskill"), "afl": PoolConfig("elo-mmx")})
    store = RedisStore.from_url(redis_url, prefix=s.key_prefix)
    try:
        with ThreadPoolExecutor(1) as ex:
            res = await Processor(s, store, ex).process(
                [Message("in", 0, i, orjson.dumps(e)) for i, e in enumerate(_events())])
    finally:
        await store.close()
    assert res.dead == []
    reads, health = http_clients(s, cluster=False)
    proc = Processor(s, reads, ThreadPoolExecutor(1))
    api = ReadApi(reads, CollectorRegistry(), proc.executor, 4321, lambda: True, health=health,
                  concurrency=s.http_redis_connections)
    try:
        async with TestClient(TestServer(make_web_app(api))) as client:
            yield client, proc
    finally:
        await reads.close()
        await health.close()


def _run(redis_url: str, check: Callable[[TestClient[Any, Any], Processor], Awaitable[None]]) -> None:
    async def main() -> None:
        async with _client(redis_url) as (client, proc):
            await check(client, proc)

    asyncio.run(main())


async def _post(client: TestClient[Any, Any], path: str, body: Any) -> tuple[int, Any]:
    resp = await client.post(path, data=body if isinstance(body, bytes) else orjson.dumps(body))
    return resp.status, (await resp.json() if resp.status == 200 else await resp.text())


def test_predict_teams_players_and_the_pairing(redis_url: str) -> None:
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        # two single players: exactly the pairing prediction of /win-probability, for every kind of system
        for pool in ("duos", "solo", "chess", "blitz"):
            a, b = ("ann", "bob") if pool != "solo" else ("p0", "p3")
            status, pred = await _post(client, f"/pools/{pool}/predict", {"teams": [[a], [b]]})
            assert status == 200, pred
            pair = await (await client.get(f"/pools/{pool}/win-probability?a={a}&b={b}")).json()
            assert pred["expected_score"] == pair["p_a"] and pred["teams"][0]["known"] == [True]
            assert pred["quality"] == 1.0 - abs(2.0 * pair["p_a"] - 1.0)
            assert (pred["draw"] is not None) == (pool == "blitz"), pred
        # teams with a new player: the same as the pure API on the stored beliefs and a new-player belief
        teams = [["ann", "bob"], ["cat", "newcomer"], ["eve", "fay", "gus"]]
        status, pred = await _post(client, "/pools/duos/predict", {"teams": teams})
        assert status == 200, pred
        eng = await proc.engine("duos")
        raws = await proc.store.beliefs("duos", [p for t in teams for p in t])
        known = eng.decode_all(raws, list(raws), remember=False)
        want = lobby.predict(eng.system, [[known.get(p, eng.system.new_belief()) for p in t] for t in teams])
        assert [t["win"] for t in pred["teams"]] == list(want.win)
        assert [t["expected_rank"] for t in pred["teams"]] == list(want.expected_rank)
        assert pred["teams"][1]["known"] == [True, False] and pred["system"] == "elo-mmx"
        assert abs(sum(t["win"] for t in pred["teams"]) - 1.0) < 1e-12 and pred["draw"] is None
        # swapping two teams swaps their numbers
        status, swapped = await _post(client, "/pools/duos/predict", {"teams": [teams[1], teams[0]]})
        status2, two = await _post(client, "/pools/duos/predict", {"teams": teams[:2]})
        assert (status, status2) == (200, 200)
        assert abs(swapped["teams"][0]["win"] - two["teams"][1]["win"]) < 1e-12

    _run(redis_url, check)


@pytest.mark.parametrize(("body", "status", "reason"), [
    (b"{not json", 400, "body: not JSON"),
    ([["ann"], ["bob"]], 400, "body: a JSON object is required"),
    ({"team": [["ann"], ["bob"]]}, 400, "teams: a list of teams"),
    ({"teams": [["ann", "bob"]]}, 400, "teams: at least two teams are required (got 1)"),
    ({"teams": [["ann"], []]}, 400, "teams[1]: a team needs at least one player"),
    ({"teams": [["ann"], "bob"]}, 400, "teams[1]: a list of player ids is required"),
    ({"teams": [["ann"], ["bob", 7]]}, 400, "teams[1][1]: a player id is a string of 1 to 128 characters"),
    ({"teams": [["ann"], ["x" * 129]]}, 400, "teams[1][0]: a player id is a string"),
    ({"teams": [["ann", "bob"], ["cat", "ann"]]}, 400, "teams[1][1]: player 'ann' is already in team 0"),
    ({"teams": [[f"p{t}"] for t in range(MAX_TEAMS + 1)]}, 400, f"at most {MAX_TEAMS} per request"),
    ({"teams": [[f"a{i}" for i in range(600)], [f"b{i}" for i in range(600)]]}, 400,
     f"teams: 1200 players, at most {MAX_IDS} per request"),
    ({"teams": [["ann"], ["bob"]], "sides": ["home"]}, 400, "sides: a list of one side label (or null) per team"),
    ({"teams": [["ann"], ["bob"]], "sides": ["home", ""]}, 400, "sides[1]: a label of 1 to 32 characters"),
    ({"teams": [["ann"], ["bob"]], "sides": ["home", "x" * 33]}, 400, "sides[1]: a label"),
    ({"teams": [["ann"], ["bob"]], "sides": ["home", None], "neutral": True}, 400, "sides and neutral"),
    ({"teams": [["ann"], ["bob"]], "neutral": "yes"}, 400, "neutral: true or false"),
])
def test_predict_refuses_a_wrong_lobby_naming_the_field(redis_url: str, body: Any, status: int, reason: str) -> None:
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        got, text = await _post(client, "/pools/duos/predict", body)
        assert (got, reason in text) == (status, True), text

    _run(redis_url, check)


def test_predictions_take_the_pools_learned_side_advantage(redis_url: str) -> None:
    """A pool's learned side advantage (docs/advantage.md), read from Redis: ``GET /pools/{pool}`` shows it
    (cowan learns one too), a pairing's first player plays with the match side's unless
    ``neutral``, a lobby's teams with their ``sides``' -- each exactly the Python API's with those shifts."""
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        blitz = await (await client.get("/pools/blitz")).json()
        h = blitz["advantages"]["match"]["mean"]
        assert h > 0  # the one match was won by its home side
        chess = (await (await client.get("/pools/chess")).json())["advantages"]
        assert set(chess) == {"match"}  # cowan learns the match side too
        afl = (await (await client.get("/pools/afl")).json())["advantages"]
        assert set(afl) == {"home", "away"} and afl["home"]["mean"] > 0 > afl["away"]["mean"]
        eng = await proc.engine("blitz")
        raws = await proc.store.beliefs("blitz", ["ann", "bob"])
        ann, bob = eng.decode_all(raws, ["ann", "bob"], remember=False).values()
        home = await (await client.get("/pools/blitz/win-probability?a=ann&b=bob")).json()
        away = await (await client.get("/pools/blitz/win-probability?a=bob&b=ann")).json()
        neutral = await (await client.get("/pools/blitz/win-probability?a=ann&b=bob&neutral=true")).json()
        assert (home["advantage"], neutral["advantage"]) == (h, 0.0)
        assert home["p_a"] == eng.system.win_probability(ann, bob, h) > neutral["p_a"]
        assert neutral["p_a"] == eng.system.win_probability(ann, bob)
        assert away["p_a"] == eng.system.win_probability(bob, ann, h)
        assert (await client.get("/pools/blitz/win-probability?a=ann&b=bob&neutral=1")).status == 400
        status, pred = await _post(client, "/pools/blitz/predict", {"teams": [["ann"], ["bob"]], "neutral": True})
        assert status == 200 and pred["expected_score"] == neutral["p_a"] and pred["teams"][0]["advantage"] == 0.0
        # a lobby of teams with sides: each team with its side's learned advantage
        teams = [DUOS[2:4], DUOS[:2]]
        status, pred = await _post(client, "/pools/afl/predict", {"teams": teams, "sides": ["away", "home"]})
        assert status == 200, pred
        eng = await proc.engine("afl")
        raws = await proc.store.beliefs("afl", DUOS[:4])
        known = eng.decode_all(raws, DUOS[:4], remember=False)
        shifts = [afl["away"]["mean"], afl["home"]["mean"]]
        want = lobby.predict(eng.system, [[known[p] for p in t] for t in teams], shifts)
        assert [t["win"] for t in pred["teams"]] == list(want.win)
        assert [t["advantage"] for t in pred["teams"]] == shifts
        status, plain = await _post(client, "/pools/afl/predict", {"teams": teams})  # no sides: no advantage
        assert plain["teams"][0]["win"] == lobby.predict(eng.system, [[known[p] for p in t] for t in teams]).win[0]
        assert plain["teams"][0]["win"] > pred["teams"][0]["win"]  # the away team is given less away

    _run(redis_url, check)


def test_predict_cowan_refuses_teams_and_unknown_pools_are_404(redis_url: str) -> None:
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        status, text = await _post(client, "/pools/chess/predict", {"teams": [["ann", "cat"], ["bob"]]})
        assert status == 400 and "teams: cowan predicts only two single players" in text, text
        status, text = await _post(client, "/pools/chess/predict", {"teams": [["ann"], ["bob"], ["cat"]]})
        assert status == 400 and "cowan" in text
        status, text = await _post(client, "/pools/nowhere/predict", {"teams": [["ann"], ["bob"]]})
        assert status == 404 and "unknown pool" in text

    _run(redis_url, check)


def test_many_players_in_one_request(redis_url: str) -> None:
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        asked = ["cat", "zed", "ann", "cat", "x}:lb{"]
        status, body = await _post(client, "/pools/duos/players", {"players": asked})
        assert status == 200, body
        assert [r["player"] for r in body["players"]] == ["cat", "ann"] and body["unknown"] == ["zed", "x}:lb{"]
        for row in body["players"]:
            one = await (await client.get(f"/pools/duos/players/{row['player']}")).json()
            assert {k: v for k, v in one.items() if k not in ("percentile", "players")} == row  # (the one's own)
        status, text = await _post(client, "/pools/duos/players", {"players": [f"q{i}" for i in range(MAX_IDS + 1)]})
        assert status == 400 and f"players: {MAX_IDS + 1} ids, at most {MAX_IDS} per request" in text
        for bad, reason in [({"players": []}, "players: at least one"), ({"players": "ann"}, "players: a list"),
                            ({"players": ["ann", ""]}, "players[1]: a player id"), ({}, "players: a list")]:
            status, text = await _post(client, "/pools/duos/players", bad)
            assert status == 400 and reason in text, (bad, text)
        status, text = await _post(client, "/pools/nowhere/players", {"players": ["ann"]})
        assert status == 404

    _run(redis_url, check)


def test_leaderboard_pages_and_ranks(redis_url: str) -> None:
    async def check(client: TestClient[Any, Any], proc: Processor) -> None:
        full = await (await client.get("/pools/duos/leaderboard?n=100")).json()
        assert full["total"] == len(DUOS) == len(full["top"]) and full["offset"] == 0
        names = [r["player"] for r in full["top"]]
        pages: list[str] = []
        for offset in range(0, 10, 3):
            page = await (await client.get(f"/pools/duos/leaderboard?n=3&offset={offset}")).json()
            assert page["offset"] == offset and page["total"] == len(DUOS)
            pages += [r["player"] for r in page["top"]]
        assert pages == names
        for i, name in enumerate(names):
            rank = await (await client.get(f"/pools/duos/leaderboard/rank/{urllib.parse.quote(name)}")).json()
            assert (rank["offset"], rank["rating"], rank["total"]) == (i, full["top"][i]["rating"], len(DUOS))
            assert rank["rank"] == 1 + sum(r["rating"] > rank["rating"] for r in full["top"])
        # a tie shares its rank (p1 and p2 tied for second), and keeps distinct places
        ranks = [await (await client.get(f"/pools/solo/leaderboard/rank/{p}")).json() for p in SOLO[:4]]
        assert [r["rank"] for r in ranks] == [1, 2, 2, 4]
        assert sorted(r["offset"] for r in ranks[1:3]) == [1, 2] and ranks[3]["offset"] == 3
        assert (await client.get("/pools/duos/leaderboard/rank/zed")).status == 404
        assert (await client.get("/pools/nowhere/leaderboard/rank/ann")).status == 404
        for query, reason in [("offset=-1", "offset must be 0 to 9007199254740992"),
                              (f"offset={10**30}", "offset must be 0 to"), ("offset=x", "offset must be an integer"),
                              ("n=two", "n must be an integer")]:
            resp = await client.get(f"/pools/duos/leaderboard?{query}")
            assert resp.status == 400 and reason in await resp.text(), query
        beyond = await (await client.get("/pools/duos/leaderboard?offset=50")).json()
        assert beyond["top"] == [] and beyond["total"] == len(DUOS)

    _run(redis_url, check)
