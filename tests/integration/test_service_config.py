"""Service pieces that need no broker and no Redis: configuration, publisher framing, dead letters."""

from __future__ import annotations

import base64
from pathlib import Path

import numpy as np
import orjson
import pytest

from stream.events.model import MatchEvent, RoundEvent
from stream.events.validate import decode_event
from stream.service.config import from_env
from stream.service.processor import DeadLetter, rating_key
from stream.tools.publish import match_batch_json, match_columns_json, messages, round_json


def test_from_env_defaults_and_overrides(tmp_path: Path) -> None:
    s = from_env({})
    assert (s.kafka_bootstrap, s.redis_url) == ("127.0.0.1:9092", "redis://127.0.0.1:6379/0")
    assert (s.rounds_system, s.matches_system) == ("elo-mmr", "cowan")
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.chess]\nsystem = "cowan"\nparams = { beta = 0.7 }\n')
    s = from_env({"KAFKA_BOOTSTRAP_SERVERS": "k:1,k:2", "MMR_SYSTEM": "elo", "MMR_PARAMS": "k=20",
                  "MMR_POOLS_FILE": str(pools), "MMR_TAKE_MAX": "10", "MMR_KAFKA_SECURITY_PROTOCOL": "SASL_PLAINTEXT",
                  "MMR_KAFKA_SASL_USERNAME": "u", "MMR_KAFKA_SASL_PASSWORD": "p", "MMR_REDIS_PASSWORD": "rp"})
    assert s.take_max == 10 and s.rounds_system == s.matches_system == "elo"
    assert s.system_for("chess", "rounds").params == {"beta": 0.7}
    assert s.system_for("other", "matches").system == "elo" and s.system_for("other", "rounds").params == {"k": "20"}
    kw = s.aiokafka_kwargs()
    assert kw["sasl_plain_username"] == "u" and kw["security_protocol"] == "SASL_PLAINTEXT"
    assert s.redis_kwargs() == {"password": "rp"}
    s2 = from_env({}).with_default_system("elo-mmx", {"rho": "0.5"})
    assert (s2.rounds_system, s2.matches_system, s2.default_params) == ("elo-mmx", "elo-mmx", {"rho": "0.5"})
    assert from_env({}).dedup == "ids" and from_env({"MMR_DEDUP": "offsets"}).dedup == "offsets"
    with pytest.raises(ValueError, match="MMR_DEDUP='offset': expected one of ids, offsets"):
        from_env({"MMR_DEDUP": "offset"})
    assert from_env({}).seen_max_ids == 0 and from_env({"MMR_SEEN_MAX_IDS": "5000"}).seen_max_ids == 5000
    assert from_env({}).gil_switch_ms == 1.0 and from_env({"MMR_GIL_SWITCH_MS": "0.5"}).gil_switch_ms == 0.5
    for bad in ("-1", "nan", "inf"):
        with pytest.raises(ValueError, match=f"MMR_GIL_SWITCH_MS={bad}"):
            from_env({"MMR_GIL_SWITCH_MS": bad})
    with pytest.raises(ValueError, match="MMR_SEEN_MAX_IDS=-1"):
        from_env({"MMR_SEEN_MAX_IDS": "-1"})
    # the worker's Faust patches: on by default, each can be turned off
    assert from_env({}).inline_delivery and not from_env({"MMR_INLINE_DELIVERY": "0"}).inline_delivery
    # HTTP: loopback and any free port unless configured
    assert (from_env({}).http_host, from_env({}).http_port) == ("127.0.0.1", 0)


def test_the_worker_sets_the_gil_switch_interval() -> None:
    import sys

    from stream.service.worker import tune_gil

    before = sys.getswitchinterval()
    try:
        tune_gil(from_env({}).gil_switch_ms)
        assert sys.getswitchinterval() == 0.001
        tune_gil(0)  # 0: left as it is
        assert sys.getswitchinterval() == 0.001
    finally:
        sys.setswitchinterval(before)


def test_the_worker_hands_its_settings_to_the_store() -> None:
    """Building the app connects to nothing (redis-py connects lazily)."""
    from stream.service.app import create_app

    svc = create_app(from_env({"MMR_SEEN_MAX_IDS": "123", "MMR_KEY_PREFIX": "kp", "MMR_HTTP_PORT": "0"}))
    assert (svc.store.seen_max_ids, svc.store.prefix) == (123, "kp")
    from stream.state.id_index import PoolIds, digests

    assert svc.metrics.registry.get_sample_value("mmr_applied_ids_index_bytes") == 0
    svc.store._ids["p"] = PoolIds(0, digests(["a", "b"]))  # what a first read of pool p loads
    assert svc.metrics.registry.get_sample_value("mmr_applied_ids_index_bytes") == svc.store._ids["p"].nbytes > 0


def test_publisher_frames_round_trip_through_validation() -> None:
    s = from_env({})
    ev = RoundEvent("e1", "p", "r1", 5, ["a", "b", "c"], np.array([1, 2, 2]), weight=0.5)
    etype, back = decode_event(orjson.loads(round_json(ev)))
    assert etype == "round" and back.players == ev.players and back.ranks.tolist() == [1, 2, 2] and back.weight == 0.5
    ms = [MatchEvent(f"m{i}", "p", i, "a", "b", 1.0) for i in range(5)]
    for form, to_json in (("match_batch", match_batch_json), ("match_columns", match_columns_json)):
        etype, batch = decode_event(orjson.loads(to_json("p", ms)))
        assert etype == form and batch == ms
    # matches held per pool until batch_size or a round of the same pool; order kept per pool
    records = [("f:1", "match", ms[0]), ("f:2", "match", ms[1]), ("f:3", "round", ev), ("f:4", "match", ms[2]),
               ("f:5", "match", ms[3]), ("f:6", "match", ms[4])]
    out = list(messages(records, s, batch_size=2))
    assert [(t, n) for t, _, _, n, _ in out] == [(s.topic_matches, 2), (s.topic_rounds, 1), (s.topic_matches, 2),
                                                 (s.topic_matches, 1)]


def test_dead_letter_envelope_keeps_the_original_bytes() -> None:
    d = DeadLetter("bad JSON: x", "t", 3, 42, b"\xff{oops", None, "p")
    obj = orjson.loads(d.encode())
    assert obj["original"] is None and base64.b64decode(obj["original_b64"]) == b"\xff{oops"
    assert (obj["topic"], obj["partition"], obj["offset"], obj["reason"]) == ("t", 3, 42, "bad JSON: x")
    assert rating_key("a:b", "c") != rating_key("a", "b:c")
