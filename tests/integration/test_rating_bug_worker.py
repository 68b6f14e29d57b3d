"""A real ``mmr worker`` with a bug in one pool's rating step: that pool's partition halts at the
offending message, the other partition goes on; a worker without the bug resumes there; a
rebalance while halted halts the partition again at the same message.

Pools on both partitions of the matches topic; the worker is started with
``tests/faults.py --rating-bug-pool`` (the rating step of that pool raises). After the halt is on
``/healthz``, more events go to every pool: the other partition's pools end equal to the embedded
replay of all their events, the halted partition's committed offset stays at the offending
message and nothing of that partition from it on is applied, nothing is dead-lettered. Then the
worker is stopped and one without the fault started: everything equals the embedded replay of
all events (each applied once), still no dead letter.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import orjson
import pytest
from aiokafka.partitioner import DefaultPartitioner
from service_utils import (
    WorkerProcess,
    announced_port,
    embedded_state,
    export_state,
    http_get,
    make_settings,
    metric,
    offsets,
    produce_raw,
    read_json_topic,
    wait_caught_up,
    wait_for,
)

from stream.service.config import Settings

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _pools_by_partition(n: int) -> dict[int, list[str]]:
    """Pool names spread over the two partitions by the producer's own partitioner (key = pool)."""
    part = DefaultPartitioner()
    out: dict[int, list[str]] = {0: [], 1: []}
    i = 0
    while min(len(v) for v in out.values()) < n:
        name = f"pool{i}"
        out[part(name.encode(), [0, 1], [0, 1])].append(name)
        i += 1
    return {p: v[:n] for p, v in out.items()}


class Events:
    """Match events in publishing order, also written as a history the embedded replay reads."""

    def __init__(self) -> None:
        self.events: list[dict[str, Any]] = []

    def add(self, pool: str, n: int) -> list[dict[str, Any]]:
        new = []
        for _ in range(n):
            k = len(self.events)
            ev = {"type": "match", "pool": pool, "event_id": f"{pool}-{k}", "time": 1_700_000_000_000 + k,
                  "a": f"p{k % 5}", "b": f"p{(k * 3 + 1) % 5 if (k * 3 + 1) % 5 != k % 5 else (k + 2) % 5}",
                  "score": (1.0, 0.0, 0.5)[k % 3]}
            self.events.append(ev)
            new.append(ev)
        return new

    def replay(self, path: Path, keep: Any = None) -> dict[tuple[str, str], dict[str, Any]]:
        path.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in self.events if keep is None or keep(e)))
        return embedded_state([path], "cowan")


def _publish(s: Settings, events: list[dict[str, Any]]) -> None:
    produce_raw(s, s.topic_matches, [(e["pool"].encode(), orjson.dumps(e)) for e in events])


def test_a_bug_halts_one_partition_and_a_fixed_worker_resumes_there(kafka_bootstrap: str, redis_url: str,
                                                                    tmp_path: Path) -> None:
    pools = _pools_by_partition(2)
    (a, b), (c, bug) = pools[0], pools[1]
    d = _pools_by_partition(3)[1][2]  # a pool of the halted partition that starts after the halt
    s = make_settings(kafka_bootstrap, redis_url, partitions=2, system="cowan")  # HTTP port 0: each worker's own
    ev = Events()
    before = ev.add(a, 6) + ev.add(b, 6) + ev.add(c, 6)
    offending = ev.add(bug, 3)  # the first is the offending message: offset 6 of partition 1
    worker = WorkerProcess(s, tmp_path / "buggy.log")
    worker.faults = ["--rating-bug-pool", bug]
    worker.start()
    try:
        port = announced_port(worker)
        _publish(s, before + offending)
        health = wait_for("a halt on /healthz", lambda: (h := http_get(port, "/healthz")[1]).get("halted") and h,
                          worker)
        assert health["status"] == "degraded"
        [halt] = health["halted"]
        assert (halt["topic"], halt["partition"], halt["offset"], halt["pool"], halt["event_id"], halt["kind"]) == (
            s.topic_matches, 1, 6, bug, offending[0]["event_id"], "bug")
        assert http_get(port, "/readyz")[0] == 200  # still ready: the other partitions are served

        after = ev.add(a, 4) + ev.add(b, 4) + ev.add(c, 4) + ev.add(d, 4) + ev.add(bug, 2)
        _publish(s, after)
        ends = len([e for e in ev.events if e["pool"] in (a, b)])
        wait_for("partition 0 committed", lambda: offsets(s, s.topic_matches)[0] == (ends, ends), worker)
        time.sleep(1.5)  # a few of Faust's commit intervals (0.5 s): partition 1 must not move
        committed1, end1 = offsets(s, s.topic_matches)[1]
        assert (committed1, end1) == (6, 6 + 3 + 4 + 4 + 2)
        held = {e["event_id"] for e in offending} | {e["event_id"] for e in after if e["pool"] in (c, d, bug)}
        state = export_state(s)
        expected = ev.replay(tmp_path / "applied.jsonl", lambda e: e["event_id"] not in held)
        assert state == expected  # partition 0 whole, partition 1 up to the offending message: bit for bit
        assert metric(port, "mmr_partitions_halted") == 1
        assert metric(port, 'mmr_rating_bugs_total{action="halted",kind="bug"}') >= 1
        assert read_json_topic(s, s.topic_dead) == []
        assert "HALTED at offset 6" in worker.log_tail(200_000) and "injected bug" in worker.log_tail(200_000)
    finally:
        worker.stop()

    fixed = WorkerProcess(s, tmp_path / "fixed.log").start()
    try:
        port = announced_port(fixed)
        wait_caught_up(s, fixed)
        state = export_state(s)
        assert state == ev.replay(tmp_path / "all.jsonl")  # each event once, in order, bit for bit
        assert {p for p, _ in state} == {a, b, c, d, bug}
        assert read_json_topic(s, s.topic_dead) == []
        assert http_get(port, "/healthz") == (200, {"status": "ok", "http_port": port})
    finally:
        fixed.stop()


def test_a_halted_partition_moved_by_a_rebalance_halts_again_at_the_same_message(kafka_bootstrap: str,
                                                                                 redis_url: str,
                                                                                 tmp_path: Path) -> None:
    """A second worker (same code, same bug) joins while a partition is halted: the rebalance gives
    every partition an owner again, the halted one starts at its committed offset and halts there
    once more (on whichever worker owns it); the other partition goes on; nothing is dead-lettered."""
    (a, b), (c, bug) = _pools_by_partition(2)[0], _pools_by_partition(2)[1]
    s = make_settings(kafka_bootstrap, redis_url, partitions=2, system="cowan")  # HTTP port 0: each worker's own
    ev = Events()
    first = ev.add(a, 3) + ev.add(c, 3) + ev.add(bug, 2)  # the offending message: offset 3 of partition 1
    workers = [WorkerProcess(s, tmp_path / f"w{i}.log") for i in range(2)]
    for w in workers:
        w.faults = ["--rating-bug-pool", bug]
    workers[0].start()
    try:
        ports = [announced_port(workers[0])]
        _publish(s, first)
        wait_for("the first halt", lambda: http_get(ports[0], "/healthz")[1].get("halted"), workers[0])
        workers[1].start()
        ports.append(announced_port(workers[1]))
        wait_for("the second worker running", lambda: http_get(ports[1], "/healthz")[0] == 200, workers[1])

        def bugs() -> float:
            return sum(metric(p, 'mmr_rating_bugs_total{action="halted",kind="bug"}') for p in ports)

        wait_for("the halt met again after the rebalance", lambda: bugs() >= 2, workers[1])
        more = ev.add(a, 3) + ev.add(b, 3) + ev.add(c, 2)
        _publish(s, more)
        ends = len([e for e in ev.events if e["pool"] in (a, b)])
        wait_for("partition 0 committed", lambda: offsets(s, s.topic_matches)[0] == (ends, ends), workers[0])
        time.sleep(1.5)  # a few of Faust's commit intervals (0.5 s)
        assert offsets(s, s.topic_matches)[1] == (3, 3 + 2 + 2)

        def halts() -> list[tuple[int, int, str]]:
            return [(h["partition"], h["offset"], h["pool"])
                    for p in ports for h in http_get(p, "/healthz")[1].get("halted", [])]

        # Held by the partition's one owner, once the group settled: the group may take more than one
        # generation to take the second worker in (a member that rejoins after the coordinator's join
        # window waits for the next one, or a loaded worker misses its session's heartbeats), and each
        # revocation forgets the halt until the partition's next owner has fetched and rated the message
        # again, three attempts of the rating step (halts.py): no halt listed is the state between.
        wait_for("the halt held by the partition's one owner", lambda: halts() == [(1, 3, bug)], workers[0])
        assert offsets(s, s.topic_matches)[1] == (3, 3 + 2 + 2)
        held = {e["event_id"] for e in ev.events if e["pool"] == bug} | {e["event_id"] for e in more if e["pool"] == c}
        assert export_state(s) == ev.replay(tmp_path / "applied.jsonl", lambda e: e["event_id"] not in held)
        assert read_json_topic(s, s.topic_dead) == []
        assert all(w.alive() for w in workers)
    finally:
        for w in workers:
            w.stop()
