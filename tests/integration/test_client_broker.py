"""``stream.client.Publisher`` against the real broker: every kind of event arrives keyed by
its pool, in order, and as bytes the worker's validator accepts."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
from pathlib import Path
from typing import Any

import orjson
import pytest
from service_utils import ROOT, env_for, make_settings, read_topic

from stream.client import Publisher
from stream.events.validate import decode_event
from stream.service.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


async def _publish_every_kind(s: Settings) -> dict[str, Any]:
    ids: dict[str, Any] = {}
    # a small message limit: 40 matches cannot travel in one match_columns message
    async with Publisher(settings=s, deterministic_ids=True, max_message_bytes=2000) as pub:
        ids["match"] = await pub.match("chess", "alice", "bob", 1.0, time=1000)
        ids["matches"] = await pub.matches("chess", [{"a": f"p{i}", "b": "q", "score": 0.5, "time": 1001 + i,
                                                      "neutral": i % 3 == 0} for i in range(40)])
        ids["batch"] = await pub.send({"type": "match_batch", "pool": "go", "matches": [
            {"time": 5, "a": "x", "b": "y", "score": 0}]})
        ids["round"] = await pub.round("go", "r1", time=2000, standings={"x": 1, "y": 2, "z": 2})
        ids["team"] = await pub.round("squads", "r2", time=3000, teams=[
            {"players": ["a", "b"], "rank": 1, "weights": [1.0, 0.5]}, {"players": ["c", "d"], "rank": 2}])
        ids["result"] = await pub.round_result("br", "r3", "x", 1, time=4000)
        ids["completed"] = await pub.round_completed("br", "r3", 1, time=4001, weight=0.5)
    ids["offsets"] = pub.offsets
    return ids


def test_every_kind_reaches_its_topic_keyed_by_pool(kafka_bootstrap: str) -> None:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0")  # publishing never touches Redis
    ids = asyncio.run(_publish_every_kind(s))

    def decoded(topic: str) -> list[tuple[str, str, Any]]:
        out = []
        for key, value in read_topic(s, topic):
            obj = orjson.loads(value)
            etype, ev = decode_event(obj)
            assert key is not None and key.decode() == obj["pool"]
            out.append((obj["pool"], etype, ev))
        return out

    matches = decoded(s.topic_matches)
    chess = [m for pool, etype, ms in matches if pool == "chess" for m in ([ms] if etype == "match" else ms)]
    assert [m.event_id for m in chess] == [ids["match"], *ids["matches"]]  # one partition: in order
    assert len([1 for pool, etype, _ in matches if pool == "chess" and etype == "match_columns"]) > 1
    assert [m.a for m in chess[1:]] == [f"p{i}" for i in range(40)]
    assert [m.neutral for m in chess[1:]] == [i % 3 == 0 for i in range(40)]  # the column, not messages of their own
    assert [etype for pool, etype, _ in matches if pool == "chess"].count("match") == 1  # pub.match's alone
    assert {etype for pool, etype, _ in matches if pool == "go"} == {"match_batch"}
    assert [m.event_id for pool, _, ms in matches if pool == "go" for m in ms] == ids["batch"]

    rounds = {ev.event_id: (pool, ev) for pool, _, ev in decoded(s.topic_rounds)}
    assert rounds.keys() == {ids["round"], ids["team"]}
    assert rounds[ids["round"]][1].ranks.tolist() == [1, 2, 2]
    pool, team = rounds[ids["team"]]
    assert pool == "squads" and team.teams is not None and team.teams.weights.tolist() == [1.0, 0.5, 1.0, 1.0]

    results = decoded(s.topic_results)
    assert [(pool, etype, ev["event_id"]) for pool, etype, ev in results] == [
        ("br", "round_result", ids["result"]), ("br", "round_completed", ids["completed"])]
    assert {t for t, _ in ids["offsets"]} == {s.topic_matches, s.topic_rounds, s.topic_results}


def test_the_documented_example_runs(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0")
    text = (ROOT / "docs" / "publisher.md").read_text()
    script = tmp_path / "example.py"
    script.write_text(re.findall(r"```python\n(.*?)```", text, re.DOTALL)[0])
    done = subprocess.run([sys.executable, str(script)], env=env_for(s), capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr
    assert len(read_topic(s, s.topic_matches)) == 4 and len(read_topic(s, s.topic_rounds)) == 2
    assert len(read_topic(s, s.topic_results)) == 2
