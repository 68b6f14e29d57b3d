"""``mmr bench service --history``: what it publishes and counts (the timed part needs a worker)."""

from __future__ import annotations

from pathlib import Path

import click
import orjson
import pytest

from stream.service.config import Settings
from stream.tools.bench_history import POOL, history_messages


def _jsonl(path: Path, events: list[dict[str, object]]) -> str:
    path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    return str(path)


def _round(k: int, players: list[str]) -> dict[str, object]:
    return {"type": "round", "event_id": f"r{k}", "pool": "x", "round_id": f"{k}", "time": k,
            "standings": [{"player": p, "rank": i + 1} for i, p in enumerate(players)]}


def _match(k: int) -> dict[str, object]:
    return {"type": "match", "event_id": f"m{k}", "pool": "x", "time": k, "a": "a", "b": "b", "score": 1.0}


def test_rounds_count_their_standings_and_go_to_the_rounds_topic(tmp_path: Path) -> None:
    s = Settings()
    path = _jsonl(tmp_path / "r.jsonl", [_round(0, ["a", "b", "c"]), _round(1, ["a", "d"])])
    topic, items, results = history_messages(path, s)
    assert (topic, len(items), results) == (s.topic_rounds, 2, 5)
    assert all(key == POOL.encode() and orjson.loads(v)["pool"] == POOL for key, v in items)


def test_matches_are_batched_as_replay_publishes_them(tmp_path: Path) -> None:
    s = Settings()
    topic, items, results = history_messages(_jsonl(tmp_path / "m.jsonl", [_match(k) for k in range(5000)]), s)
    assert (topic, len(items), results) == (s.topic_matches, 2, 5000)  # 4,096 + 904


def test_a_history_of_two_kinds_is_refused(tmp_path: Path) -> None:
    with pytest.raises(click.ClickException, match="one kind"):
        history_messages(_jsonl(tmp_path / "mixed.jsonl", [_round(0, ["a", "b"]), _match(1)]), Settings())


def test_the_replay_phase_needs_a_history() -> None:
    """``--only replay`` (``mmr replay --broker`` into the worker beside ``--embedded``) is refused
    before anything starts when there is no file to replay."""
    from click.testing import CliRunner

    from stream.tools.bench_service import bench_service

    res = CliRunner().invoke(bench_service, ["--only", "replay"])
    assert res.exit_code == 2 and "--only replay need --history FILE" in res.output
