"""A pool's system does not depend on which event reaches it first (docs/interface.md), and each
input topic takes its own event types: two workers in two consumer groups (each its own Redis
prefix and output topics) over the same input topics, real broker and Redis."""

from __future__ import annotations

import uuid
from pathlib import Path

import orjson
import pytest
import redis
from service_utils import (
    WorkerProcess,
    announced_port,
    export_state,
    make_settings,
    produce_raw,
    read_json_topic,
    wait_caught_up,
)

from stream.service.config import DEFAULT_SYSTEM, Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _match(eid: str, pool: str, a: str, b: str, t: int) -> bytes:
    return orjson.dumps({"type": "match", "event_id": eid, "pool": pool, "time": t, "a": a, "b": b, "score": 1.0})


def _round(eid: str, pool: str, players: list[str], t: int) -> bytes:
    return orjson.dumps({"type": "round", "event_id": eid, "pool": pool, "round_id": eid, "time": t,
                         "standings": [{"player": p, "rank": k + 1} for k, p in enumerate(players)]})


def _system_of(s: Settings, pool: str) -> str | None:
    """The system the first commit recorded for ``pool`` under the prefix of ``s``."""
    r = redis.Redis.from_url(s.redis_url)
    try:
        value: bytes | None = r.hget(f"{s.key_prefix}:{{{pool}}}:meta", "system")  # type: ignore[assignment]
    finally:
        r.close()
    return None if value is None else value.decode()


def test_two_groups_rate_a_pool_with_one_system_whatever_arrives_first(kafka_bootstrap: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    """Worker A sees pool ``mfirst``'s match before its round (and ``rfirst``'s round before its match);
    worker B, of another group started afterwards, reads both topics from the start in whatever order
    its fetches bring them. Both fix the default system for both pools and rate every event."""
    a = make_settings(kafka_bootstrap, redis_url)
    tag = uuid.uuid4().hex[:8]
    b = a.with_(app_id=f"{a.app_id}-b{tag}", key_prefix=f"{a.key_prefix}-b{tag}", topic_ratings=f"{a.topic_ratings}-b",
                topic_dead=f"{a.topic_dead}-b")
    first = WorkerProcess(a, tmp_path / "a.log").start()
    second: WorkerProcess | None = None
    try:
        announced_port(first)
        produce_raw(a, a.topic_matches, [(b"mfirst", _match("m1", "mfirst", "x", "y", 1))])
        produce_raw(a, a.topic_rounds, [(b"rfirst", _round("r1", "rfirst", ["x", "y", "z"], 1))])
        wait_caught_up(a, first)
        produce_raw(a, a.topic_rounds, [(b"mfirst", _round("r2", "mfirst", ["x", "y", "z"], 2))])
        produce_raw(a, a.topic_matches, [(b"rfirst", _match("m2", "rfirst", "y", "z", 2))])
        wait_caught_up(a, first)
        second = WorkerProcess(b, tmp_path / "b.log").start()
        wait_caught_up(b, second)
        for s in (a, b):
            assert {p: _system_of(s, p) for p in ("mfirst", "rfirst")} == dict.fromkeys(("mfirst", "rfirst"),
                                                                                         DEFAULT_SYSTEM)
            assert read_json_topic(s, s.topic_dead) == []
            ratings = read_json_topic(s, s.topic_ratings)  # published before the offsets were committed
            assert {(r["pool"], r["system"]) for r in ratings} == {("mfirst", DEFAULT_SYSTEM),
                                                                  ("rfirst", DEFAULT_SYSTEM)}, ratings
            # every event rated (a batch publishes a player's last rating only: count the events per player)
            rounds = {k: row["rounds"] for k, row in export_state(s).items()}
            assert rounds == {("mfirst", "x"): 2, ("mfirst", "y"): 2, ("mfirst", "z"): 1,
                              ("rfirst", "x"): 1, ("rfirst", "y"): 2, ("rfirst", "z"): 2}
    finally:
        first.stop()
        if second is not None:
            second.stop()


def test_events_on_another_kinds_topic_are_dead_lettered_with_the_topic_they_belong_on(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    """A round on the matches topic, a match on the rounds topic, a round result on the matches topic:
    each a dead letter naming the topic it belongs on; nothing rated, the worker goes on."""
    s = make_settings(kafka_bootstrap, redis_url)
    result = orjson.dumps({"type": "round_result", "event_id": "rr", "pool": "p", "round_id": "R", "time": 1,
                           "player": "x", "rank": 1})
    worker = WorkerProcess(s, tmp_path / "w.log").start()
    try:
        announced_port(worker)
        produce_raw(s, s.topic_matches, [(b"p", _round("wrong-round", "p", ["x", "y"], 1)), (b"p", result)])
        produce_raw(s, s.topic_rounds, [(b"p", _match("wrong-match", "p", "x", "y", 1))])
        produce_raw(s, s.topic_matches, [(b"p", _match("right", "p", "x", "y", 2))])
        wait_caught_up(s, worker)
        dead = {d["event_id"]: d for d in read_json_topic(s, s.topic_dead)}
        assert set(dead) == {"wrong-round", "rr", "wrong-match"}
        assert dead["wrong-round"]["reason"].startswith(f"field type: a 'round' event on topic {s.topic_matches!r}")
        assert dead["wrong-round"]["reason"].endswith(f"send it to {s.topic_rounds!r}")
        assert dead["rr"]["reason"].endswith(f"send it to {s.topic_results!r}")
        assert dead["wrong-match"]["reason"].endswith(f"send it to {s.topic_matches!r}")
        assert all(d["pool"] == "p" for d in dead.values())
        assert {r["event_id"] for r in read_json_topic(s, s.topic_ratings)} == {"right"}
        assert worker.alive()
    finally:
        worker.stop()
