"""The example matchmaker (deploy/matchmaker.py) on a real broker: its table is rebuilt from the
ratings topic on every start and keeps the highest version per player."""

from __future__ import annotations

import asyncio
import importlib.util
import subprocess
import sys
import time
from dataclasses import replace
from pathlib import Path
from types import ModuleType
from typing import Any

import orjson
import pytest
from aiokafka import AIOKafkaProducer
from service_utils import ROOT, env_for, make_settings

from stream.service.config import Settings
from stream.service.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def _load_matchmaker() -> ModuleType:
    spec = importlib.util.spec_from_file_location("example_matchmaker", ROOT / "deploy" / "matchmaker.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up there
    spec.loader.exec_module(module)
    return module


mm = _load_matchmaker()


def _rating(pool: str, player: str, version: int) -> dict[str, Any]:
    return {"pool": pool, "player": player, "rating": 1000.0 + 100 * version + (0.5 if player == "b" else 0.0),
            "mu": 1.0, "sigma": 2.0, "rounds": version, "version": version, "event_id": f"{player}-{version}",
            "time": 1000 * version, "system": "elo-mmr"}


async def _produce(s: Settings, items: list[tuple[int, dict[str, Any]]]) -> None:
    """(partition, rating) in order; explicit partitions so that every partition holds some."""
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, enable_idempotence=False)
    await producer.start()
    try:
        for partition, r in items:
            await producer.send_and_wait(s.topic_ratings, orjson.dumps(r), key=f"{r['pool']}/{r['player']}".encode(),
                                         partition=partition)
    finally:
        await producer.stop()


async def _rebuilt(s: Settings) -> Any:
    consumer = mm.make_consumer(s)
    await consumer.start()
    try:
        table = mm.RatingTable()
        await mm.rebuild(consumer, s.topic_ratings, table)
        return table
    finally:
        await consumer.stop()


def _versions(table: Any) -> dict[tuple[str, str], tuple[int, str]]:
    return {(pool, player): (r["version"], r["event_id"]) for pool, players in table.pools.items()
            for player, r in players.items()}


@pytest.fixture()
def settings(kafka_bootstrap: str) -> Settings:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0", partitions=3)  # the matchmaker never reads Redis
    asyncio.run(ensure_topics(s))
    return s


HISTORY = [  # out of order, duplicated, stale after newer
    (0, _rating("p", "a", 3)), (0, _rating("p", "a", 1)), (0, _rating("p", "a", 5)), (0, _rating("p", "a", 5)),
    (0, _rating("p", "a", 4)),
    (1, _rating("p", "b", 2)), (1, _rating("p", "b", 2)), (1, _rating("p", "b", 1)),
    (2, _rating("q", "c", 1)),
]
EXPECTED = {("p", "a"): (5, "a-5"), ("p", "b"): (2, "b-2"), ("q", "c"): (1, "c-1")}


def test_every_start_rebuilds_the_table_with_the_highest_versions(settings: Settings) -> None:
    asyncio.run(_produce(settings, HISTORY))
    first = asyncio.run(_rebuilt(settings))
    assert _versions(first) == EXPECTED
    second = asyncio.run(_rebuilt(settings))  # a restart: nothing committed may skip the history
    assert _versions(second) == EXPECTED
    assert first.waiting("p", time.time()) == ["b", "a"]  # by rating; all rated just now


def test_after_the_rebuild_it_follows_new_ratings_and_drops_stale_ones(settings: Settings) -> None:
    asyncio.run(_produce(settings, HISTORY))

    async def scenario() -> dict[tuple[str, str], tuple[int, str]]:
        consumer = mm.make_consumer(settings)
        await consumer.start()
        try:
            table = mm.RatingTable()
            await mm.rebuild(consumer, settings.topic_ratings, table)
            await _produce(settings, [(0, _rating("p", "a", 7)), (0, _rating("p", "a", 6)),
                                      (1, _rating("p", "d", 1))])
            deadline = time.monotonic() + 30
            while ("p", "d") not in _versions(table) and time.monotonic() < deadline:
                await mm.poll(consumer, table)
            return dict(_versions(table))
        finally:
            await consumer.stop()

    assert asyncio.run(scenario()) == {**EXPECTED, ("p", "a"): (7, "a-7"), ("p", "d"): (1, "d-1")}


def test_an_empty_ratings_topic_rebuilds_an_empty_table(settings: Settings) -> None:
    assert _versions(asyncio.run(_rebuilt(settings))) == {}


def test_a_missing_ratings_topic_is_reported(settings: Settings) -> None:
    with pytest.raises(mm.TopicMissing, match="does not exist"):
        asyncio.run(_rebuilt(replace(settings, topic_ratings=settings.topic_ratings + "-absent")))


def test_the_script_rebuilds_then_keeps_its_heartbeat_fresh(settings: Settings, tmp_path: Path) -> None:
    """``python deploy/matchmaker.py`` as deployed: configuration from the environment."""
    asyncio.run(_produce(settings, HISTORY))
    beat = tmp_path / "alive"
    log_path = tmp_path / "matchmaker.log"
    env = env_for(settings, MMR_MATCHMAKER_HEARTBEAT=str(beat), MMR_API="http://127.0.0.1:1")
    with log_path.open("wb") as log:
        proc = subprocess.Popen([sys.executable, str(ROOT / "deploy" / "matchmaker.py")], env=env, stdout=log,
                                stderr=subprocess.STDOUT, cwd=tmp_path)
    try:
        deadline = time.monotonic() + 60
        while "rebuilt" not in log_path.read_text() and proc.poll() is None and time.monotonic() < deadline:
            time.sleep(0.2)
        assert "rebuilt 3 players in 2 pools" in log_path.read_text(), log_path.read_text()
        first = beat.stat().st_mtime
        deadline = time.monotonic() + 30
        while beat.stat().st_mtime == first and time.monotonic() < deadline:
            time.sleep(0.2)
        assert beat.stat().st_mtime > first and proc.poll() is None, log_path.read_text()
    finally:
        proc.terminate()
        proc.wait(10)
