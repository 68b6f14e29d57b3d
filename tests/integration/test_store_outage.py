"""Redis unavailable under a running ``mmr worker`` (real processes: the broker, a private
``redis-server`` SIGKILLed and started again on its port and AOF): the worker says so
(``mmr_store_unavailable`` 1, ``mmr_store_retries_total`` counting, ``/readyz`` 503), stops fetching
its partitions until Redis answers, and then applies everything: the state equals the embedded
replay bit for bit and nothing is dead-lettered.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from collections.abc import Callable
from pathlib import Path

import pytest
from local_servers import AOF_ALWAYS, RedisServer
from outage_stream import events, history, outage_pools, replayed
from service_utils import (
    WorkerProcess,
    announced_port,
    export_state,
    make_settings,
    metric,
    publish,
    read_json_topic,
    wait_caught_up,
)

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]


def _wait(cond: Callable[[], bool], what: str, worker: WorkerProcess, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while not cond():
        assert worker.alive(), worker.log_tail()
        assert time.monotonic() < deadline, f"{what} after {timeout} s\n{worker.log_tail()}"
        time.sleep(0.2)


def _status(port: int, path: str) -> int:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as resp:
            return int(resp.status)
    except urllib.error.HTTPError as exc:
        return exc.code


def test_redis_down_pauses_the_fetch_and_is_reported(kafka_bootstrap: str, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", *AOF_ALWAYS)
    server.start()
    evs = [ev for batch in events(15, 20, seed=3) for ev in batch]
    before, first, during = evs[:100], evs[100:101], evs[101:]
    want = replayed([evs], tmp_path)
    s = make_settings(kafka_bootstrap, server.url, pools=outage_pools())
    worker = WorkerProcess(s, tmp_path / "worker.log").start()
    try:
        port = announced_port(worker)
        publish([history([before], tmp_path, "before.jsonl")], s, batch_size=1)  # one event a message
        wait_caught_up(s, worker)
        assert metric(port, "mmr_store_unavailable") == 0 and metric(port, "mmr_store_retries_total") == 0
        assert _status(port, "/readyz") == 200

        server.kill()
        publish([history([first], tmp_path, "first.jsonl")], s, batch_size=1)
        _wait(lambda: metric(port, "mmr_store_unavailable") == 1, "the gauge is not 1", worker)
        assert metric(port, "mmr_inflight_messages") == 1  # the one message, retried
        assert _status(port, "/readyz") == 503
        assert metric(port, "mmr_fetch_paused_partitions") == s.partitions * len(s.input_topics())  # all of them
        publish([history([during], tmp_path, "during.jsonl")], s, batch_size=1)
        time.sleep(3.0)  # an unpaused consumer would have fetched them and handed them to the pipeline by now
        assert metric(port, "mmr_inflight_messages") == 1  # the fetch is paused: none was taken
        assert metric(port, "mmr_store_unavailable") == 1
        retries = metric(port, "mmr_store_retries_total")
        assert retries >= 2

        server.start()
        wait_caught_up(s, worker)
        assert metric(port, "mmr_store_unavailable") == 0 and metric(port, "mmr_fetch_paused_partitions") == 0
        assert metric(port, "mmr_store_retries_total") >= retries
        assert _status(port, "/readyz") == 200
        assert "resuming fetching" in worker.log_tail(100_000)
        state = export_state(s)
    finally:
        worker.stop()
        server.stop()
    assert state == want  # every float bit for bit
    assert read_json_topic(s, s.topic_dead) == []
