"""Stopping a worker (SIGTERM) while it rates a backlog is clean: the batch in flight is published
and acknowledged or left unacknowledged, nothing is logged as an error, the process exits 0, and
a worker started after it ends equal to the embedded replay (nothing lost, nothing applied twice)."""

from __future__ import annotations

from pathlib import Path

import pytest
from conftest import free_port
from service_utils import (
    WorkerProcess,
    embedded_state,
    export_state,
    make_settings,
    metric,
    publish,
    synth,
    wait_caught_up,
    wait_for,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SYSTEM = "elo"


def test_a_stop_mid_batch_is_clean_and_loses_nothing(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    history = synth(tmp_path, "matches.jsonl", "--kind", "matches", "--players", "200", "--matches", "40000",
                    "--pool", "m", "--seed", "3")
    port = free_port()
    s = make_settings(kafka_bootstrap, redis_url, matches_system=SYSTEM, take_max=16, http_port=port)
    # a backlog of one-match messages in batches of 16, thousands of them queued in the worker's pipeline
    # (MMR_MAX_INFLIGHT's default): a stop always meets batches being rated and published
    publish([history], s, batch_size=1)
    stopped = WorkerProcess(s, tmp_path / "stopped.log").start()
    try:
        # stopped while it rates: some messages done, many left
        wait_for("500 messages done", lambda: metric(port, "mmr_messages_done_total") >= 500, stopped, every=0.05)
        assert stopped.proc is not None
        stopped.proc.terminate()
        code = stopped.proc.wait(60)
        log = stopped.log_tail(1 << 20)
        assert "not yet started" not in log and "batch pipeline failed" not in log, log
        assert "ERROR" not in log and "Traceback" not in log, log
        assert code == 0, log
    finally:
        stopped.kill()
    resumed = WorkerProcess(s, tmp_path / "resumed.log").start()
    try:
        wait_caught_up(s, resumed)
        expected = embedded_state([history], SYSTEM, pool_systems={"m": (SYSTEM, {})})
        assert export_state(s) == expected
    finally:
        resumed.stop()
