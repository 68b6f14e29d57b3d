"""The console's API on a real ``mmr worker`` (real broker, real Redis): each player's history is the
published rating stream (capped), distributions add up, the bearer token guards every route but the
probes, pool names with braces are reachable, and a request line too long answers 400 without a
traceback in the log."""

from __future__ import annotations

import socket
import urllib.parse
from collections.abc import Iterator
from pathlib import Path

import pytest
from console_world import HISTORY_LIMIT, POOLS, World, start_world

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    w = start_world(kafka_bootstrap, redis_url, tmp_path_factory.mktemp("console"))
    try:
        yield w
    finally:
        w.worker.stop()


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def test_history_is_the_published_rating_stream_capped(world: World) -> None:
    by_player: dict[tuple[str, str], dict[int, dict[str, object]]] = {}
    for o in world.outputs:  # (a re-published rating repeats a version: one each)
        by_player.setdefault((o["pool"], o["player"]), {})[o["version"]] = o
    assert {p for p, _ in by_player} == set(POOLS)
    capped = 0
    for (pool, player), versions in by_player.items():
        status, body = world.get(f"/pools/{q(pool)}/players/{q(player)}/history")
        assert status == 200, (pool, player, body)
        published = [versions[v] for v in sorted(versions)][-HISTORY_LIMIT:]
        want = [{k: o[k] for k in ("version", "rating", "mu", "sigma", "time", "event_id")} for o in published]
        assert body["history"] == want, (pool, player)
        assert body["limit"] == HISTORY_LIMIT
        last = body["history"][-1]
        assert (last["rating"], last["mu"], last["sigma"], last["version"]) == (
            body["current"]["rating"], body["current"]["mu"], body["current"]["sigma"], body["current"]["version"])
        status, row = world.get(f"/pools/{q(pool)}/players/{q(player)}")
        assert (row["rating"], row["version"]) == (last["rating"], last["version"])
        capped += len(versions) > HISTORY_LIMIT
    assert capped, "no player was published more often than the limit: the cap went untested"


def test_distribution_adds_up_and_percentiles_are_ordered(world: World) -> None:
    latest = world.latest()
    for pool in POOLS:
        ratings = sorted(o["rating"] for (p, _), o in latest.items() if p == pool)
        for bins in (1, 7, 30):
            status, body = world.get(f"/pools/{q(pool)}/distribution?bins={bins}")
            assert status == 200, body
            assert body["total"] == len(ratings) == sum(b["count"] for b in body["bins"])
            assert len(body["bins"]) == bins
            assert (body["min"], body["max"]) == (ratings[0], ratings[-1])
            for b in body["bins"]:  # each bin's count is the players in [lo, hi) (the last [lo, hi])
                last = b is body["bins"][-1]
                assert b["count"] == sum(b["lo"] <= r < b["hi"] or (last and r == b["hi"]) for r in ratings)
            values = list(body["percentiles"].values())
            assert values == sorted(values) and set(values) <= set(ratings)
        assert world.get(f"/pools/{q(pool)}/distribution?bins=0")[0] == 400
        _, row = world.get(f"/pools/{q(pool)}/players/p0")
        below = sum(r < row["rating"] for r in ratings)
        level = sum(r == row["rating"] for r in ratings)
        assert row["percentile"] == pytest.approx(100 * (below + level / 2) / len(ratings))


def test_pools_list_and_detail_with_braces(world: World) -> None:
    latest = world.latest()
    status, body = world.get("/pools")
    assert status == 200
    assert {p["pool"]: p["players"] for p in body["pools"]} == {
        pool: sum(1 for p, _ in latest if p == pool) for pool in POOLS}
    assert {p["system"] for p in body["pools"]} == {"elo-mmx"}
    for pool in POOLS:
        status, info = world.get(f"/pools/{q(pool)}")
        assert status == 200, info
        assert (info["pool"], info["system"]) == (pool, "elo-mmx")
        # its matches have a home side (none says neutral): the pool's learned advantage of the match side
        assert set(info["advantages"]) == {"match"} and info["advantages"]["match"]["sd"] > 0
        assert info["players"] == sum(1 for p, _ in latest if p == pool)
        assert isinstance(info["params"], dict)
        status, board = world.get(f"/pools/{q(pool)}/leaderboard?n=3")
        assert status == 200 and len(board["top"]) == 3
    assert world.get("/pools/no%7Bsuch%7D")[0] == 404
    # a brace unencoded in the path reaches the pool too
    assert world.get("/pools/lg{1}/leaderboard?n=1")[0] == 200


def test_the_token_guards_every_route_but_the_probes(world: World) -> None:
    for path in ("/pools", f"/pools/{q(POOLS[0])}", "/metrics", "/openapi.json", "/status",
                 f"/pools/{q(POOLS[0])}/players/p0/history", f"/pools/{q(POOLS[0])}/distribution"):
        assert world.get(path, token=None)[0] == 401, path
        assert world.get(path, token="wrong")[0] == 401, path
        assert world.get(path)[0] == 200, path
    for path in ("/livez", "/readyz", "/healthz", "/", "/console/app.js", "/console/app.css"):
        assert world.get(path, token=None)[0] == 200, path


def test_status_reports_the_worker(world: World) -> None:
    status, body = world.get("/status")
    assert status == 200
    assert body["redis"]["status"] == "ok" and body["kafka"]["status"] == "ok" and body["running"]
    assert body["kafka"]["lag"] == 0 and body["kafka"]["assigned"]
    assert body["counters"]["ratings_out"] >= len({(o["pool"], o["player"], o["version"]) for o in world.outputs})
    assert body["counters"]["dead_letters"] == 1
    [dead] = body["recent_dead_letters"]
    assert (dead["event_id"], dead["pool"]) == ("bad-1", POOLS[1]) and "score" in dead["reason"]


def test_an_oversized_request_answers_400_without_a_traceback(world: World, tmp_path: Path) -> None:
    before = world.worker.log_path.read_text(errors="replace")
    for _ in range(3):
        with socket.create_connection(("127.0.0.1", world.port), timeout=10) as sock:
            sock.sendall(b"GET /pools?x=" + b"a" * 20_000 + b" HTTP/1.1\r\nHost: x\r\n\r\n")
            answer = sock.recv(200)
        assert answer.split(b" ", 2)[1] == b"400", answer
    assert world.get("/livez", token=None)[0] == 200
    log = world.worker.log_path.read_text(errors="replace")[len(before):]
    assert "Traceback" not in log and log.count("refused with 400") <= 1, log
