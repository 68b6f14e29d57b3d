"""The console in a real browser (Debian's Chromium, driven by Playwright): a worker on the real
broker and Redis rates a small history; each page is opened, clicked through pool → leaderboard →
player, its numbers checked against the API, and a screenshot saved under the test's tmp dir."""

from __future__ import annotations

import urllib.parse
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from browser_utils import chromium_browser, require_browser  # (imported first: it puts tests/integration on the path)
from console_world import POOLS, World, start_world

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]


@pytest.fixture(scope="module")
def world(kafka_bootstrap: str, redis_url: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[World]:
    require_browser()  # before a worker is started for nothing
    w = start_world(kafka_bootstrap, redis_url, tmp_path_factory.mktemp("console-browser"))
    try:
        yield w
    finally:
        w.worker.stop()


@pytest.fixture(scope="module")
def browser(world: World) -> Iterator[Any]:
    """Chromium, launched after the worker rated its history (Playwright's sync API runs an event loop)."""
    with chromium_browser() as b:
        yield b


@pytest.fixture
def page(world: World, browser: Any) -> Iterator[Any]:
    """A page of a fresh context (its own session storage: the console asks for the token again)."""
    context = browser.new_context(viewport={"width": 1280, "height": 1000})
    p = context.new_page()
    p.set_default_timeout(30_000)
    errors: list[str] = []
    p.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        yield p
    finally:
        context.close()
    assert errors == [], errors


def q(name: str) -> str:
    return urllib.parse.quote(name, safe="")


def fmt(x: float, digits: int = 1) -> str:
    """As the console's ``fmt`` (``Number.toFixed``)."""
    return f"{x:.{digits}f}"


def open_console(page: Any, world: World, hash_: str = "") -> None:
    page.goto(f"http://127.0.0.1:{world.port}/{hash_}")
    page.wait_for_selector("#token-dialog[open]")  # the API wants a token: the page asks for it
    page.fill("#token-input", world.token)
    page.click("#token-form button[type=submit]")


def test_pools_leaderboard_player_clicked_through(world: World, page: Any, tmp_path: Path) -> None:
    open_console(page, world)
    page.wait_for_selector("a.pool-link")
    _, pools = world.get("/pools")
    assert page.locator("a.pool-link").all_inner_texts() == [p["pool"] for p in pools["pools"]] == sorted(POOLS)
    page.screenshot(path=str(tmp_path / "pools.png"), full_page=True)

    pool = "lg{1}"
    page.get_by_role("link", name=pool, exact=True).click()
    page.wait_for_selector("#pool-name")
    assert page.inner_text("#pool-name") == pool
    assert page.url.endswith("#/pools/" + q(pool))
    _, info = world.get(f"/pools/{q(pool)}")
    _, board = world.get(f"/pools/{q(pool)}/leaderboard?n=20")
    assert page.inner_text("#pool-players") == str(info["players"])
    assert page.inner_text("#pool-system") == info["system"]
    links = page.locator("a.player-link")
    assert links.all_inner_texts() == [r["player"] for r in board["top"]]
    first_row = page.locator("table tbody tr").first.locator("td").all_inner_texts()
    assert first_row[2] == fmt(board["top"][0]["rating"])
    assert page.locator("#histogram rect.bar").count() == 30
    page.screenshot(path=str(tmp_path / "pool.png"), full_page=True)

    # search by player id: the page of the leaderboard holding them, their row marked
    page.fill("#search", "p3")
    page.click("form.search button")
    page.wait_for_selector("tr.hit")
    assert "p3" in page.inner_text("tr.hit")

    # the player page, clicked from the leaderboard
    player = board["top"][0]["player"]
    page.get_by_role("link", name=player, exact=True).click()
    page.wait_for_selector("#player-name")
    assert page.inner_text("#player-name") == player
    _, row = world.get(f"/pools/{q(pool)}/players/{q(player)}")
    _, hist = world.get(f"/pools/{q(pool)}/players/{q(player)}/history")
    assert page.inner_text("#player-rating") == fmt(row["rating"])
    assert page.inner_text("#player-percentile") == fmt(row["percentile"])
    assert page.inner_text("#player-sigma") == fmt(row["sigma"])
    points = page.locator("#history-chart circle.point")
    assert points.count() == len(hist["history"]) > 0
    assert [points.nth(i).get_attribute("data-event") for i in range(points.count())] == [
        h["event_id"] for h in hist["history"]]
    assert page.locator("#history-chart polygon.band").count() == 1
    page.screenshot(path=str(tmp_path / "player.png"), full_page=True)


def test_a_shared_player_url_opens_the_player(world: World, page: Any, tmp_path: Path) -> None:
    pool, player = "ladder", "odd {id}/x"  # an id that needs percent-encoding
    open_console(page, world, f"#/pools/{q(pool)}/players/{q(player)}")
    page.wait_for_selector("#player-name")
    _, row = world.get(f"/pools/{q(pool)}/players/{q(player)}")
    assert page.inner_text("#player-name") == player
    assert page.inner_text("#player-rating") == fmt(row["rating"])
    page.click("#back-to-pool")
    page.wait_for_selector("#pool-name")
    assert page.inner_text("#pool-name") == pool
    page.screenshot(path=str(tmp_path / "shared.png"), full_page=True)


def test_the_health_page(world: World, page: Any, tmp_path: Path) -> None:
    open_console(page, world, "#/health")
    page.wait_for_selector("#redis-status")
    _, status = world.get("/status")
    assert page.inner_text("#redis-status") == "ok"
    assert page.inner_text("#kafka-status") == "ok"
    assert page.inner_text("#consumer-lag") == str(status["kafka"]["lag"]) == "0"
    assert float(page.inner_text("#ratings-out")) == status["counters"]["ratings_out"]
    assert page.locator("table").last.locator("tbody tr").all_inner_texts()[0].startswith(
        status["recent_dead_letters"][0]["reason"])
    page.wait_for_function("document.getElementById('rate-ratings').textContent !== '–'")  # a second read: rates
    page.screenshot(path=str(tmp_path / "health.png"), full_page=True)
