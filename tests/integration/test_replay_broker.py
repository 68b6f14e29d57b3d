"""`mmr replay INPUT --broker` without a value publishes to KAFKA_BOOTSTRAP_SERVERS (real broker)."""

from __future__ import annotations

import subprocess
from pathlib import Path

import orjson
import pytest
from service_utils import MMR, ROOT, env_for, make_settings, read_json_topic

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


def test_bare_broker_publishes_to_the_environments_bootstrap(kafka_bootstrap: str, tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, "redis://127.0.0.1:1/0")  # publishing never touches Redis
    history = tmp_path / "m.jsonl"
    rows = [{"type": "match", "event_id": f"e{i}", "pool": "p", "time": 1000 + i, "a": "x", "b": f"y{i % 3}",
             "score": 1.0} for i in range(7)]
    history.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))

    done = subprocess.run([str(MMR), "replay", str(history), "--broker", "--no-progress"], env=env_for(s),
                          cwd=ROOT, capture_output=True, text=True, timeout=90)
    assert done.returncode == 0, done.stderr

    published = read_json_topic(s, s.topic_matches)
    assert [m["type"] for m in published] == ["match_columns"]
    assert published[0]["event_id"] == [r["event_id"] for r in rows]
