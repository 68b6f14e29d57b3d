"""A dead letter the producer cannot publish is retried, and its input is neither skipped nor acked.

A real ``mmr worker`` on the test broker and Redis. The first worker's producer refuses every
dead letter (``MMR_PRODUCER_MAX_REQUEST_BYTES`` below any dead letter's size: aiokafka's own
check, as for a dead letter over the broker's limit); a worker with the default limit then
publishes it.
"""

from __future__ import annotations

import time
from pathlib import Path

import orjson
import pytest
from service_utils import (
    WorkerProcess,
    announced_port,
    export_state,
    make_settings,
    metric,
    offsets,
    produce_raw,
    read_json_topic,
    wait_caught_up,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]


def _match(event_id: str, a: str, b: str) -> bytes:
    return orjson.dumps({"type": "match", "pool": "dl", "event_id": event_id, "time": 1_700_000_000_000,
                         "a": a, "b": b, "score": 1.0})


def test_an_unpublishable_dead_letter_is_retried_and_holds_back_the_ack(kafka_bootstrap: str, redis_url: str,
                                                                      tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, redis_url, partitions=1)  # HTTP port 0: each worker's own
    refused = WorkerProcess(s, tmp_path / "refused.log")
    refused.extra_env = {"MMR_PRODUCER_MAX_REQUEST_BYTES": "150"}
    refused.start()
    try:
        port = announced_port(refused)
        # offsets 0, 1, 2: valid, invalid (not JSON), valid
        produce_raw(s, s.topic_matches, [(b"dl", _match("m1", "A", "B")), (b"dl", b"not json " * 200),
                                         (b"dl", _match("m2", "B", "C"))])
        # the same dead letter, attempted again and again
        wait_for("3 failed attempts", lambda: metric(port, "mmr_publish_retries_total") >= 3, refused,
                 every=0.5)
        time.sleep(2)  # the commit timer runs every 0.5 s
        assert refused.alive(), refused.log_tail()
        assert offsets(s, s.topic_matches)[0][0] <= 1  # the invalid record (offset 1) is not acknowledged
        assert read_json_topic(s, s.topic_dead) == []
    finally:
        refused.stop()

    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        wait_caught_up(s, worker)
        dead = read_json_topic(s, s.topic_dead)
        assert [(d["topic"], d["offset"]) for d in dead] == [(s.topic_matches, 1)]  # once, not skipped
        state = export_state(s)
        assert {p: r["rounds"] for (_, p), r in state.items()} == {"A": 1, "B": 2, "C": 1}  # each match once
    finally:
        worker.stop()
