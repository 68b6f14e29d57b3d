"""The service end to end on a real broker (Tansu or KAFKA_BOOTSTRAP_SERVERS) and a real Redis.

The worker runs as a subprocess (``mmr worker``) exactly as deployed; histories go in with
``mmr replay --broker``'s publisher; the final Redis state is compared with the embedded
replay bit for bit (floats compared with ==).
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
import os
import random
import re
import struct
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

import orjson
import pytest
from service_utils import (
    MMR,
    SIDED_POOLS,
    BackgroundPublish,
    WorkerProcess,
    announced_port,
    embedded_state,
    env_for,
    export_state,
    http_get,
    make_settings,
    pool_systems,
    produce_raw,
    publish,
    read_json_topic,
    sided_history,
    stored_advantages,
    synth,
    wait_caught_up,
)

from stream.ratings import make_system
from stream.ratings.base import RatingError
from stream.service.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

ROUNDS_SYSTEM = "elo-mmr"
MATCHES_SYSTEM = "cowan"
#: the pools of these tests: matches in "m" and "pool0".."pool2" rated by Cowan, rounds in "default" by the default;
#: matches with a home side and team rounds with side labels in ``SIDED_POOLS`` (Elo, Elo-MMR: they learn the side
#: advantage, docs/advantage.md)
POOLS = pool_systems({"default": ROUNDS_SYSTEM, "m": MATCHES_SYSTEM, **{f"pool{k}": MATCHES_SYSTEM for k in range(3)},
                      **SIDED_POOLS})


@pytest.fixture(scope="module")
def histories(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("hist")
    return {
        "rounds": synth(d, "rounds.jsonl", "--players", "300", "--rounds", "40", "--participation", "0.3",
                        "--seed", "11"),
        "matches": synth(d, "matches.jsonl", "--kind", "matches", "--players", "200", "--matches", "6000",
                         "--pool", "m", "--seed", "12"),
        "sided": sided_history(d / "sided.jsonl", 1500, 13),
    }


def _paths(h: dict[str, Path], sided: bool = True) -> list[Path]:
    return [h["rounds"], h["matches"], *([h["sided"]] if sided else [])]


def _embedded(h: dict[str, Path], batch_size: int = 4096, history: list[dict[str, Any]] | None = None,
              advantages: dict[str, dict[bytes, bytes]] | None = None, sided: bool = True,
              ) -> dict[tuple[str, str], dict[str, Any]]:
    """The embedded replay (its own batch size: results must not depend on where batches are cut);
    ``advantages``: gets the learned side advantages as Redis should hold them."""
    return embedded_state(_paths(h, sided), ROUNDS_SYSTEM, batch_size=batch_size,
                          pool_systems={"default": (ROUNDS_SYSTEM, {}), "m": (MATCHES_SYSTEM, {}),
                                        **{p: (n, {}) for p, n in SIDED_POOLS.items()}},
                          history=history, advantages=advantages)


#: the fields of a rating message that explain the change (stream.engine.explain)
EXPLAIN = ("rating_before", "mu_before", "sigma_before", "delta", "round_id", "matches", "match_ids", "performance")


def _check_explanations(outputs: list[dict[str, Any]], history: list[dict[str, Any]]) -> None:
    """Every message explains its change. A round's message equals the embedded history's line
    of that player and version, field for field (rounds are units wherever batches are cut); a
    match message covers the player's matches since their previous version, starting exactly
    where that version ended (its explanation depends on the worker's batches)."""
    lines = {(h["pool"], h["player"], h["version"]): h for h in history}
    seen: dict[tuple[str, str], dict[int, dict[str, Any]]] = defaultdict(dict)
    for o in outputs:
        assert o["delta"] == o["rating"] - o["rating_before"], o
        if "round_id" in o:
            assert o == lines[(o["pool"], o["player"], o["version"])]
        else:
            assert o["match_ids"][-1] == o["event_id"] and 1 <= len(o["match_ids"]) <= min(o["matches"], 16)
            seen[(o["pool"], o["player"])][o["version"]] = o
    for msgs in seen.values():
        for v, o in msgs.items():
            prev = msgs.get(v - o["matches"])
            if prev is not None:
                assert (o["rating_before"], o["mu_before"], o["sigma_before"]) == (prev["rating"], prev["mu"],
                                                                                prev["sigma"])
            elif v == o["matches"]:  # the player's first change: from the prior of the pool's system
                system = make_system(POOLS[o["pool"]].system)
                assert o["rating_before"] == system.summary(system.new_belief()).rating


def _diff(got: dict[tuple[str, str], dict[str, Any]], want: dict[tuple[str, str], dict[str, Any]]) -> str:
    keys = sorted(k for k in set(got) | set(want) if got.get(k) != want.get(k))
    rounds_off = sum(1 for k in keys if (got.get(k) or {}).get("rounds") != (want.get(k) or {}).get("rounds"))
    return (f"{len(keys)} players differ ({rounds_off} in rounds), pools {sorted({k[0] for k in keys})}; "
            f"first: {[(k, got.get(k), want.get(k)) for k in keys[:3]]}")


def _check_ratings_topic(outputs: list[dict[str, Any]], final: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Per player: versions never go backwards in partition order, a version always carries the same
    numbers (re-published duplicates after a crash are identical), and the last one is the final state."""
    by_player: dict[tuple[str, str], list[dict[str, Any]]] = defaultdict(list)
    for o in outputs:
        by_player[(o["pool"], o["player"])].append(o)
    assert set(by_player) == set(final)
    for key, msgs in by_player.items():
        seen: dict[int, tuple[Any, ...]] = {}
        for prev, cur in itertools.pairwise(msgs):
            assert cur["version"] >= prev["version"], key
        for m in msgs:
            nums = (m["rating"], m["mu"], m["sigma"], *(m.get(f) for f in EXPLAIN))
            assert seen.setdefault(m["version"], nums) == nums, (key, m["version"])
        last = msgs[-1]
        f = final[key]
        assert (last["rating"], last["mu"], last["sigma"], last["rounds"]) == (f["rating"], f["mu"], f["sigma"],
                                                                                f["rounds"])
        assert last["version"] == f["rounds"]


def _os_thread_names(pid: int) -> set[str]:
    names = set()
    for tid in os.listdir(f"/proc/{pid}/task"):
        with contextlib.suppress(OSError):
            names.add(Path(f"/proc/{pid}/task/{tid}/comm").read_text().strip())
    return names


def test_end_to_end_equals_embedded_and_double_replay_is_noop(kafka_bootstrap: str, redis_url: str,
                                                               histories: dict[str, Path], tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, redis_url, pools=POOLS)
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        paths = _paths(histories)
        publish(paths, s, batch_size=500)
        wait_caught_up(s, worker)
        if sys.platform.startswith("linux"):  # its threads carry their names for the OS (stream.runtime.thread_names)
            assert worker.proc is not None
            assert {"mmr-numba", "mmr-frames"} <= _os_thread_names(worker.proc.pid)
        state = export_state(s)
        history: list[dict[str, Any]] = []
        learned: dict[str, dict[bytes, bytes]] = {}
        expected = _embedded(histories, history=history, advantages=learned)
        assert state == expected, _diff(state, expected)  # every float bit for bit
        adv = stored_advantages(s)
        assert set(learned) == {"home-elo", "home-mmr", "afl", "moba"}
        assert adv == learned  # the pools' side advantages, bit for bit
        # what it was about: the sided pools' matches came as match_columns mixing neutral and not
        sent = read_json_topic(s, s.topic_matches)
        flags = [m.get("neutral") for m in sent if m["pool"] in SIDED_POOLS]
        assert {m["type"] for m in sent} == {"match_columns"}
        assert any(f is not None and True in f and False in f for f in flags)
        outputs = read_json_topic(s, s.topic_ratings)
        _check_explanations(outputs, history)
        out = tmp_path / "export.jsonl"
        subprocess.run([str(MMR), "export", "--out", str(out), "--advantages"], env=env_for(s), check=True,
                       capture_output=True)
        rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
        lines = [r for r in rows if r.get("type") == "advantage"]
        assert {(r["pool"], r["player"]): r for r in rows if "type" not in r} == state  # the same rows
        replayed = tmp_path / "replay.jsonl"
        subprocess.run([str(MMR), "replay", str(histories["sided"]), "--embedded", "--no-progress", "--advantages",
                        "--system", "elo", "--out", str(replayed), "--pools", env_for(s)["MMR_POOLS_FILE"]],
                       env=env_for(s), check=True, capture_output=True)
        again_lines = [r for r in map(orjson.loads, replayed.read_bytes().splitlines()) if r.get("type")]
        assert {r["pool"]: r for r in lines} == {r["pool"]: r for r in again_lines} and len(lines) == 4
        assert {o["system"] for o in outputs} == {ROUNDS_SYSTEM, MATCHES_SYSTEM, "elo"}
        _check_ratings_topic(outputs, state)

        publish(paths, s, batch_size=700)  # same events, other message boundaries
        wait_caught_up(s, worker)
        assert export_state(s) == state
        assert stored_advantages(s) == adv  # a batch applied before teaches nothing again
        again = read_json_topic(s, s.topic_ratings)
        _check_ratings_topic(again, state)  # re-published (same versions, same numbers), nothing re-rated
        assert read_json_topic(s, s.topic_dead) == []
    finally:
        worker.stop()


def test_a_full_stream_buffer_loses_nothing(kafka_bootstrap: str, redis_url: str, histories: dict[str, Path],
                                           tmp_path: Path) -> None:
    """6,000 one-match messages against a worker that takes 64 at a time: the agent falls
    behind, its buffer (the batch channel) fills, and hand-overs wait (the inline hand-over's fallback to Faust's own
    path, counted in ``mmr_deliveries_waited_total``); the result is still the embedded
    replay's, bit for bit."""
    s = make_settings(kafka_bootstrap, redis_url, pools=POOLS)
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = {"MMR_TAKE_MAX": "64", "MMR_MAX_INFLIGHT": "64"}
    worker.start()
    try:
        port = announced_port(worker)
        publish(_paths(histories, sided=False), s, batch_size=1)
        wait_caught_up(s, worker)
        state = export_state(s)
        expected = _embedded(histories, sided=False)
        assert state == expected, _diff(state, expected)
        code, text = http_get(port, "/metrics")
        waited = [float(line.split()[-1]) for line in text.splitlines()
                  if line.startswith("mmr_deliveries_waited_total ")]
        assert code == 200 and waited and waited[0] > 0, "no hand-over waited: the test did not fill the buffer"
    finally:
        worker.stop()


def test_sigkill_while_streaming_equals_uninterrupted(kafka_bootstrap: str, redis_url: str, histories: dict[str, Path],
                                                      tmp_path: Path) -> None:
    """Re-delivered batches are recognised by event id."""
    s = make_settings(kafka_bootstrap, redis_url, pools=POOLS,
                      take_max=64)
    rng = random.Random(5)
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log)
    worker.faults = ["--crash-after-batches", "3"]  # first: die between Redis commit and publish
    worker.start()
    # ~25 s of streaming: rounds one by one, matches in messages of 50
    producer = BackgroundPublish(_paths(histories), s, batch_size=50, rate=250.0).start()
    try:
        deadline = time.monotonic() + 120
        while worker.alive() and time.monotonic() < deadline:  # the injected crash
            time.sleep(0.1)
        assert not worker.alive(), worker.log_tail()
        worker = WorkerProcess(s, log).start()
        kills = 1
        while kills < 4:  # then SIGKILLs at random moments (while publishing, or catching up if that ended)
            time.sleep(rng.uniform(2.0, 5.0))
            worker.kill()
            kills += 1
            worker = WorkerProcess(s, log).start()
        producer.join()
        wait_caught_up(s, worker, timeout=180)
        state = export_state(s)
        learned: dict[str, dict[bytes, bytes]] = {}
        expected = _embedded(histories, 7, advantages=learned)
        assert state == expected, _diff(state, expected)  # no batch lost, none applied twice (rounds agree)
        assert stored_advantages(s) == learned and learned  # nor a side advantage learned twice
        _check_ratings_topic(read_json_topic(s, s.topic_ratings), state)
    finally:
        worker.stop()


def _round(eid: str, pool: str, players: list[str], **extra: Any) -> dict[str, Any]:
    return {"type": "round", "event_id": eid, "pool": pool, "round_id": eid, "time": 1000,
            "standings": [{"player": p, "rank": i + 1} for i, p in enumerate(players)], **extra}


def _result(eid: str, rid: str, player: str, rank: int) -> bytes:
    return orjson.dumps({"type": "round_result", "event_id": eid, "pool": "default", "round_id": rid, "time": 2000,
                         "player": player, "rank": rank})


def _completed(eid: str, rid: str, n: int) -> bytes:
    return orjson.dumps({"type": "round_completed", "event_id": eid, "pool": "default", "round_id": rid,
                         "time": 3000, "participants": n})


def test_dead_letters_and_round_assembly(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    pools = tmp_path / "pools.json"
    pools.write_text(json.dumps({"pools": {"default": {"system": ROUNDS_SYSTEM}, "m": {"system": MATCHES_SYSTEM}}}))
    s = make_settings(kafka_bootstrap, redis_url, round_timeout_s=2.0, max_participants=5)
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = {"MMR_POOLS_FILE": str(pools)}
    worker.start()
    try:
        port = announced_port(worker)
        bad = [
            (b"bad-json", b"{not json"),
            (b"schema", orjson.dumps({"type": "match", "event_id": "x1", "pool": "m", "time": 1, "a": "A"})),
            (b"dup-player", orjson.dumps(_round("r-dup", "default", ["A", "B", "A"]))),
            (b"long-id", orjson.dumps(_round("r-long", "default", ["A", "B" * 129]))),
            (b"nan", b'{"type":"match","event_id":"x2","pool":"m","time":1,"a":"A","b":"B","score":NaN}'),
            (b"too-many", orjson.dumps(_round("r-big", "default", [f"p{i}" for i in range(6)]))),
            (b"unknown-pool", orjson.dumps(_round("r-pool", "elsewhere", ["A", "B"]))),
            (b"self", orjson.dumps({"type": "match", "event_id": "x3", "pool": "m", "time": 1, "a": "A", "b": "A",
                                    "score": 1})),
        ]
        good = [(b"ok", orjson.dumps(_round("r-ok", "default", ["A", "B", "C"])))]
        produce_raw(s, s.topic_rounds, bad + good)
        # rated before the results are sent: R1 must be A's latest change (Kafka orders records within
        # a partition only, and records of two topics may reach the worker in either order)
        wait_caught_up(s, worker)
        results = [
            (b"default", _result("e1", "R1", "A", 1)),
            (b"default", _result("e2", "R1", "B", 2)),
            (b"default", _result("e2", "R1", "B", 2)),  # re-delivered duplicate: ignored
            (b"default", _completed("c1", "R1", 3)),
            (b"default", _result("e3", "R1", "C", 3)),  # completes R1
            (b"default", _result("e4", "R1", "D", 4)),  # late: DLQ
            (b"default", _result("e5", "R2", "A", 1)),  # R2 never completes: timeout
        ]
        produce_raw(s, s.topic_results, results)
        wait_caught_up(s, worker)
        deadline = time.monotonic() + 30
        dead: list[dict[str, Any]] = []
        while time.monotonic() < deadline:
            dead = read_json_topic(s, s.topic_dead)
            if any("timed out" in d["reason"] for d in dead):
                break
            time.sleep(0.5)
        by_orig = {d["original"]: d for d in dead}
        for key, value in bad:
            d = by_orig.get(value.decode())
            assert d is not None, (key, [x["reason"] for x in dead])
            assert d["topic"] == s.topic_rounds and d["offset"] >= 0 and d["reason"]
        reasons = " | ".join(d["reason"] for d in dead)
        assert "bad JSON" in reasons and "appears twice" in reasons and "unknown pool" in reasons
        assert "exceed the maximum" in reasons and "late event" in reasons and "timed out" in reasons
        assert len(dead) == len(bad) + 2
        state = export_state(s)
        assert state[("default", "A")]["rounds"] == 2  # r-ok and the assembled R1
        assert state[("default", "C")]["rounds"] == 2
        assert ("default", "D") not in state
        assert worker.alive()
        _check_http(port, state)
        _check_http_on_a_corrupt_value(s, port)
        produce_raw(s, s.topic_rounds, [(b"default", orjson.dumps(_round("r-z", "default", ["Z", "A"])))])
        deadline = time.monotonic() + 30
        while time.monotonic() < deadline and not any(d["event_id"] == "r-z" for d in dead):
            dead = read_json_topic(s, s.topic_dead)
            time.sleep(0.3)
        reason = next(d["reason"] for d in dead if d["event_id"] == "r-z")
        assert reason.startswith("rating: ") and "'Z'" in reason
        assert http_get(port, "/pools/default/players/A")[1]["rating"] == state[("default", "A")]["rating"]
        with pytest.raises(RatingError, match=r"pool 'default'.*'Z'"):  # export names the value it cannot read
            export_state(s)
        assert worker.alive()  # before, the codec's ValueError stopped the worker on this round
    finally:
        worker.stop()


def _check_http(port: int, state: dict[tuple[str, str], dict[str, Any]]) -> None:
    """The read-only API agrees with Redis; metrics count what happened."""
    assert http_get(port, "/healthz") == (200, {"status": "ok", "http_port": port})
    code, row = http_get(port, "/pools/default/players/A")
    assert code == 200 and row["rating"] == state[("default", "A")]["rating"] and row["version"] == 2
    assert row["round_id"] == "R1" and row["delta"] == row["rating"] - row["rating_before"]  # its latest change
    assert row["event_id"] and row["time"] == 3000 and math.isfinite(row["performance"])
    assert http_get(port, "/pools/default/players/nobody")[0] == 404
    assert http_get(port, "/pools/nowhere/leaderboard")[0] == 404
    code, board = http_get(port, "/pools/default/leaderboard?n=2")
    ratings = sorted((r["rating"] for k, r in state.items() if k[0] == "default"), reverse=True)
    assert code == 200 and [r["rating"] for r in board["top"]] == ratings[:2]
    code, wp = http_get(port, "/pools/default/win-probability?a=A&b=C")
    assert code == 200 and 0.5 < wp["p_a"] < 1.0  # A beat C twice
    code, text = http_get(port, "/metrics")
    assert code == 200
    assert 'mmr_events_in_total{type="round"} 1.0' in text  # r-ok; the invalid rounds are not counted
    assert "mmr_dead_letters_total" in text and "mmr_batch_seconds_bucket" in text
    assert "mmr_consumer_lag{" in text
    for stage in ("fetched", "queued", "rated", "published"):  # every batch passed each stage once
        count = re.search(rf'^mmr_stage_seconds_count{{stage="{stage}"}} (\S+)$', text, re.M)
        assert count is not None and float(count.group(1)) >= 1, stage
    # every batch with ratings observed its oldest event's age: produced during this test
    age = {line.split()[0]: float(line.split()[-1]) for line in text.splitlines()
           if line.startswith(("mmr_input_age_seconds_count", "mmr_input_age_seconds_sum"))}
    assert age["mmr_input_age_seconds_count"] >= 1
    assert 0 <= age["mmr_input_age_seconds_sum"] / age["mmr_input_age_seconds_count"] < 300


def _check_http_on_a_corrupt_value(s: Settings, port: int) -> None:
    """A stored value that is not a belief: 500 with the reason for the player and a pairing,
    listed as unreadable by the leaderboard (which still answers)."""
    import redis

    r = redis.Redis.from_url(s.redis_url)
    try:
        r.set(f"{s.key_prefix}:{{default}}:p:Z", b"\x01broken")
        r.zadd(f"{s.key_prefix}:{{default}}:lb", {"Z": 1e9})
        assert http_get(port, "/pools/default/players/Z")[0] == 500
        assert http_get(port, "/pools/default/win-probability?a=A&b=Z")[0] == 500
        code, board = http_get(port, "/pools/default/leaderboard?n=2")
        assert code == 200 and board["unreadable"] == ["Z"] and len(board["top"]) == 1
        nan = b"\x01" + struct.pack("<2d", math.nan, math.nan) + bytes(8 * 4)  # decodes, but is no belief
        r.set(f"{s.key_prefix}:{{default}}:p:W", nan)
        assert http_get(port, "/pools/default/players/W")[0] == 500
        assert http_get(port, "/pools/default/win-probability?a=A&b=W")[0] == 500
        r.delete(f"{s.key_prefix}:{{default}}:p:W")
        # a pool whose stored system this version refuses (written by another version)
        r.hset(f"{s.key_prefix}:{{old}}:meta", mapping={"system": "elo", "params": b'{"k":"inf"}', "keys": "2"})
        assert http_get(port, "/pools/old/players/A")[0] == 500
        assert http_get(port, "/pools/old/leaderboard")[0] == 500
        r.delete(f"{s.key_prefix}:{{old}}:meta")
    finally:
        r.close()


def test_open_round_survives_a_crash(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    """Results of a round still being assembled are mirrored in Redis: a SIGKILL between its
    results loses nothing, and the round equals the same round sent whole (embedded)."""
    s = make_settings(kafka_bootstrap, redis_url, pools=POOLS)
    players = [f"p{i}" for i in range(8)]
    ranks = [1, 2, 2, 4, 5, 6, 7, 8]
    results = [(b"default", _result(f"res{i}", "RX", p, r))
               for i, (p, r) in enumerate(zip(players, ranks, strict=True))]
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log).start()
    try:
        produce_raw(s, s.topic_results, results[:5])
        wait_caught_up(s, worker)
        worker.kill()
        produce_raw(s, s.topic_results, [results[2], *results[5:], (b"default", _completed("cX", "RX", 8))])
        worker = WorkerProcess(s, log).start()
        wait_caught_up(s, worker)
        state = export_state(s)
    finally:
        worker.stop()
    whole = tmp_path / "whole.jsonl"
    # the assembled round keeps the completion's id/time (3000) and the results' order
    round_obj = {**_round("cX", "default", players), "round_id": "RX", "time": 3000,
                 "standings": [{"player": p, "rank": r} for p, r in zip(players, ranks, strict=True)]}
    whole.write_bytes(orjson.dumps(round_obj) + b"\n")
    assert state == embedded_state([whole], ROUNDS_SYSTEM)
    assert read_json_topic(s, s.topic_dead) == []


def test_two_workers_share_partitions_and_survive_rebalances(kafka_bootstrap: str, redis_url: str,
                                                             histories: dict[str, Path], tmp_path: Path) -> None:
    """Two workers of one group split the partitions; one is SIGKILLed and restarted mid-stream
    (two rebalances, partitions moving between live workers): still exactly the embedded result."""
    extra = [synth(tmp_path, f"m{k}.jsonl", "--kind", "matches", "--players", "100", "--matches", "1500",
                   "--pool", f"pool{k}", "--seed", str(20 + k)) for k in range(3)]
    paths = [histories["rounds"], *extra]
    s = make_settings(kafka_bootstrap, redis_url, pools=POOLS,
                      take_max=64)
    w1 = WorkerProcess(s, tmp_path / "w1.log").start()
    w2 = WorkerProcess(s, tmp_path / "w2.log").start()
    producer = BackgroundPublish(paths, s, batch_size=50, rate=300.0)  # ~15 s
    try:
        time.sleep(8)  # both joined
        producer.start()
        time.sleep(5)
        w1.kill()
        time.sleep(6)
        w1 = WorkerProcess(s, tmp_path / "w1.log").start()
        producer.join()
        wait_caught_up(s, w2, timeout=180)
        state = export_state(s)
        pools: dict[str, tuple[str, dict[str, Any]]] = {"default": (ROUNDS_SYSTEM, {}),
                                                        **{f"pool{k}": (MATCHES_SYSTEM, {}) for k in range(3)}}
        expected = embedded_state(paths, ROUNDS_SYSTEM, pool_systems=pools)
        assert state == expected, _diff(state, expected)
        _check_ratings_topic(read_json_topic(s, s.topic_ratings), state)
    finally:
        w1.stop()
        w2.stop()


def _team_rounds(n_rounds: int, seed: int, pool: str) -> list[dict[str, Any]]:
    """Team rounds: teams re-formed every round, ties and partial play included."""
    rng = random.Random(seed)
    players = [f"t{i}" for i in range(20)]
    rows = []
    for r in range(n_rounds):
        nteams = rng.randint(2, 4)
        who = rng.sample(players, nteams * rng.randint(1, 2))  # at most 8 players: max_participants
        teams: list[dict[str, Any]] = []
        for t in range(nteams):
            team: dict[str, Any] = {"players": who[t::nteams], "rank": rng.randint(1, nteams)}
            if rng.random() < 0.3:
                team["weights"] = [0.5] + [1.0] * (len(team["players"]) - 1)
            teams.append(team)
        rows.append({"type": "round", "event_id": f"team-{r}", "pool": pool, "round_id": f"team-{r}",
                     "time": 1000 + r * 3_600_000, "teams": teams})
    return rows


def test_team_rounds_through_the_worker_equal_the_embedded_replay(kafka_bootstrap: str, redis_url: str,
                                                                  tmp_path: Path) -> None:
    """Team rounds published by ``mmr replay --broker``'s publisher are rated by an elo-mmx and an
    elo-mmr pool exactly as embedded; a team round in a pool whose system has no team model, a
    player in two teams and too many players are dead-lettered with their reasons."""
    systems = {"t": "elo-mmx", "u": "elo-mmr", "m": MATCHES_SYSTEM}
    pools = tmp_path / "pools.json"
    pools.write_text(json.dumps({"pools": {pool: {"system": name} for pool, name in systems.items()}}))
    s = make_settings(kafka_bootstrap, redis_url, max_participants=8)
    history = tmp_path / "teams.jsonl"
    rows = [*_team_rounds(40, 7, "t"), *_team_rounds(30, 8, "u")]
    history.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = {"MMR_POOLS_FILE": str(pools)}
    worker.start()
    try:
        publish([history], s, batch_size=10)
        two = [{"players": ["A", "B"], "rank": 1}, {"players": ["C", "D"], "rank": 2}]
        bad = [
            {"type": "round", "event_id": "team-cowan", "pool": "m", "round_id": "x", "time": 1, "teams": two},
            {"type": "round", "event_id": "team-twice", "pool": "t", "round_id": "y", "time": 1,
             "teams": [*two, {"players": ["A"], "rank": 3}]},
            {"type": "round", "event_id": "team-big", "pool": "t", "round_id": "z", "time": 1,
             "teams": [{"players": [f"x{k}-{i}" for i in range(5)], "rank": k} for k in (1, 2)]},
        ]
        produce_raw(s, s.topic_rounds, [(b"k", orjson.dumps(b)) for b in bad])
        wait_caught_up(s, worker)
        state = export_state(s)
        expected = embedded_state([history], ROUNDS_SYSTEM, pool_systems={p: (n, {}) for p, n in systems.items()})
        assert {pool for pool, _ in expected} == {"t", "u"}
        assert state == expected, _diff(state, expected)
        _check_ratings_topic(read_json_topic(s, s.topic_ratings), state)
        reasons = {d["event_id"]: d["reason"] for d in read_json_topic(s, s.topic_dead)}
        assert set(reasons) == {"team-cowan", "team-twice", "team-big"}, reasons
        assert "does not rate team rounds" in reasons["team-cowan"]
        assert "field teams" in reasons["team-twice"] and "appears twice" in reasons["team-twice"]
        assert "field teams" in reasons["team-big"] and "exceed the maximum" in reasons["team-big"]
    finally:
        worker.stop()
