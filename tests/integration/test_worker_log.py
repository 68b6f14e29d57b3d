"""The worker's log with ``MMR_LOG_FORMAT=json`` (stream.service.logs): every record one JSON object on
its line, and one INFO line per batch (stream.service.logs) whose numbers add up to what was sent."""

from __future__ import annotations

import json
import re
from pathlib import Path

import orjson
import pytest
from service_utils import WorkerProcess, announced_port, make_settings, metric, produce_raw, wait_caught_up

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: a record in Faust's text format: "[2026-01-01 10:00:00,000] [123] [INFO] ..."
TEXT_RECORD = re.compile(r"^\[\d{4}-\d\d-\d\d [\d:,]+\] \[\d+\] \[[A-Z]+\] ")


def test_a_json_worker_log_has_a_parsable_line_per_batch(kafka_bootstrap: str, redis_url: str,
                                                        tmp_path: Path) -> None:
    s = make_settings(kafka_bootstrap, redis_url, log_level="info", log_format="json")
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log).start()
    try:
        port = announced_port(worker)
        sent = 0
        for k in range(5):  # five produce calls apart: several batches
            matches = [(b"p", orjson.dumps({"type": "match", "event_id": f"e{k}-{i}", "pool": "p", "time": k * 10 + i,
                                            "a": f"x{i}", "b": f"y{i}", "score": 1.0})) for i in range(k + 1)]
            produce_raw(s, s.topic_matches, matches)
            sent += len(matches)
            wait_caught_up(s, worker)
        batches = metric(port, "mmr_batch_messages_count")
    finally:
        worker.stop()
    records = []
    for line in log.read_text().splitlines():
        assert not TEXT_RECORD.match(line), f"a record in the text format: {line}"
        if line.startswith("{"):
            records.append(json.loads(line))
    assert records and all({"time", "level", "logger", "message"} <= set(r) for r in records)
    per_batch = [r for r in records if r["logger"] == "stream.service.batches"]
    assert len(per_batch) == batches >= 2
    assert all(r["level"] == "INFO" and r["message"].startswith("batch: ") for r in per_batch)
    assert sum(r["messages"] for r in per_batch) == sum(r["events"] for r in per_batch) == sent
    assert sum(r["ratings"] for r in per_batch) == 2 * sent  # two new players a match
    assert all(r["pools"] == 1 and r["dead_letters"] == 0 and r["duration_s"] >= 0 for r in per_batch)
