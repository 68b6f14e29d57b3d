"""Stopping a worker (SIGTERM) while it rates a backlog is clean: the batch in flight is published
and acknowledged or left unacknowledged, nothing is logged as an error, the process exits 0, and
a worker started after it ends equal to the embedded replay (nothing lost, nothing applied twice).
A stop that meets the housekeeping timer sweeping timed-out rounds publishes the dead letters of
what it swept before the producer stops, and leaves the rest open in Redis; a sweep the stop has to
cancel loses no dead letter. A worker stopped in a process that goes on leaves none of its threads
or Redis connections behind."""

from __future__ import annotations

import asyncio
import threading
import urllib.request
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import orjson
import pytest
import redis
from service_utils import (
    WorkerProcess,
    announced_port,
    embedded_state,
    export_state,
    make_settings,
    metric,
    publish,
    read_json_topic,
    synth,
    wait_caught_up,
    wait_for,
)

from stream.service import app as app_module
from stream.service.app import Service, create_app
from stream.service.config import Settings
from stream.service.faust_app import faust_app
from stream.service.metrics import Metrics
from stream.service.processor import Message, Processor
from stream.service.round_book import EXPIRE_SLICE
from stream.service.topics import ensure_topics
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

SYSTEM = "elo"


def test_a_stop_mid_batch_is_clean_and_loses_nothing(kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    history = synth(tmp_path, "matches.jsonl", "--kind", "matches", "--players", "200", "--matches", "12000",
                    "--pool", "m", "--seed", "3")
    s = make_settings(kafka_bootstrap, redis_url, system=SYSTEM, take_max=16)  # HTTP port 0: each worker's own
    # a backlog of one-match messages in batches of 16, thousands of them queued in the worker's pipeline
    # (MMR_MAX_INFLIGHT's default): a stop always meets batches being rated and published
    publish([history], s, batch_size=1)
    stopped = WorkerProcess(s, tmp_path / "stopped.log").start()
    try:
        port = announced_port(stopped)
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
    rated = len(read_json_topic(s, s.topic_ratings))
    assert rated < 2 * 12000, "the stop met no backlog: the worker had rated every match"
    resumed = WorkerProcess(s, tmp_path / "resumed.log").start()
    try:
        wait_caught_up(s, resumed)
        expected = embedded_state([history], SYSTEM, pool_systems={"m": (SYSTEM, {})})
        assert export_state(s) == expected
    finally:
        resumed.stop()


class HeldStore(RedisStore):
    """A real store whose second ``expire_rounds`` (a sweep's second slice) waits for ``gate``."""

    gate: asyncio.Event
    held: asyncio.Event
    calls = 0

    async def expire_rounds(self, rounds: Sequence[tuple[str, str]]) -> dict[str, tuple[list[str], int | None]]:
        self.calls += 1
        if self.calls == 2:
            self.held.set()
            await self.gate.wait()
        return await super().expire_rounds(rounds)


class OwningService(Service):
    """The worker's service owning the results partition (its consumer, which assigns it, is not started)."""

    def round_sources(self) -> list[str]:
        return [f"{self.settings.topic_results}/0"]


def _stop_during_a_sweep(s: Settings, n: int, *, sweep_goes_on: bool) -> tuple[list[str], list[str]]:
    """Rounds of one pool, one result each, all timed out; a stop while the sweep's second slice is being
    marked done in Redis, which goes on during the stop (``sweep_goes_on``) or never does, so the stop
    cancels it. Returns the round ids of the dead letters on the topic, and of those that the partition's
    next owner then finds to time out."""
    source = f"{s.topic_results}/0"

    async def run() -> list[str]:
        await ensure_topics(s)
        store = HeldStore.from_url(s.redis_url, prefix=s.key_prefix)
        assert isinstance(store, HeldStore)
        store.gate, store.held = asyncio.Event(), asyncio.Event()
        app = faust_app(s, s.app_id)
        with ThreadPoolExecutor(1) as ex:
            metrics = Metrics()
            svc = OwningService(s, app, store, ex, metrics, Processor(s, store, ex, metrics))
            results = [orjson.dumps({"type": "round_result", "event_id": f"e{i}", "pool": "p", "round_id": f"R{i}",
                                     "time": 5, "player": "a", "rank": 1}) for i in range(n)]
            for k in range(0, n, 500):
                res = await svc.processor.process([Message(s.topic_results, 0, k + j, v)
                                                   for j, v in enumerate(results[k:k + 500])])
                assert not res.dead and not res.outputs
            await asyncio.sleep(0.01)  # every round is due
            await app.producer.start()
            tick = asyncio.ensure_future(svc.housekeeping())
            await store.held.wait()  # one slice swept, the next under way

            async def stop() -> None:  # Faust's order: on_before_shutdown, then its producer stops
                await svc.stop_rating()
                await app.producer.stop()

            stopping = asyncio.ensure_future(stop())
            await asyncio.wait({stopping}, timeout=0.5)  # a stop that does not wait for the sweep ends meanwhile
            if sweep_goes_on:
                store.gate.set()
            await asyncio.wait_for(stopping, 30)
            done, _ = await asyncio.wait({tick}, timeout=5)
            assert tick in done, "the tick went on after the stop"
            if sweep_goes_on:
                tick.result()
            else:
                assert tick.cancelled()
            # nothing handed to the stopped producer
            assert not metrics.registry.get_sample_value("mmr_publish_retries_total")

            # the partition's next owner dead-letters what the stop left open
            with ThreadPoolExecutor(1) as ex2:
                rest = await Processor(s, store, ex2).expire(sources=[source])
            await store.close()
            return [orjson.loads(d.original)["round_id"] for d in rest]

    rest = asyncio.run(run())
    return [orjson.loads(d["original"])["round_id"] for d in read_json_topic(s, s.topic_dead)], rest


def test_a_stop_during_a_sweep_of_timed_out_rounds_publishes_before_the_producer_stops(
        kafka_bootstrap: str, redis_url: str) -> None:
    n = 4 * EXPIRE_SLICE  # four slices
    s = make_settings(kafka_bootstrap, redis_url, partitions=1, round_timeout_s=0.001, system="elo-mmr")
    published, rest = _stop_during_a_sweep(s, n, sweep_goes_on=True)
    assert published and rest
    assert sorted(published + rest) == sorted(f"R{i}" for i in range(n))  # every round once


def test_a_sweep_the_stop_cancels_loses_no_dead_letter(kafka_bootstrap: str, redis_url: str,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """The sweep's write of its second slice hangs past the stop's grace: the stop cancels the sweep. The
    first slice is done in Redis and its dead letters on the topic; the second's dead letters are on the
    topic too, and its rounds, still open in Redis, are timed out again by the next owner with the rest."""
    monkeypatch.setattr(app_module, "STOP_GRACE_S", 1.0)
    n = 4 * EXPIRE_SLICE
    s = make_settings(kafka_bootstrap, redis_url, partitions=1, round_timeout_s=0.001, system="elo-mmr")
    published, rest = _stop_during_a_sweep(s, n, sweep_goes_on=False)
    assert set(published) | set(rest) == {f"R{i}" for i in range(n)}  # none lost
    assert len(published) == len(set(published)) == 2 * EXPIRE_SLICE and len(rest) == len(set(rest))
    assert len(set(published) & set(rest)) == EXPIRE_SLICE  # the slice cut short: dead-lettered again


def test_a_worker_stopped_in_process_leaves_no_thread_nor_redis_connection(
        kafka_bootstrap: str, redis_url: str, tmp_path: Path) -> None:
    history = synth(tmp_path, "matches.jsonl", "--kind", "matches", "--players", "20", "--matches", "50",
                    "--pool", "m", "--seed", "5")
    s = make_settings(kafka_bootstrap, redis_url, system=SYSTEM)
    publish([history], s)
    client = redis.Redis.from_url(redis_url)

    def connections() -> set[str]:  # this worker's, named by its app id (the test's own)
        return {c["name"] for c in client.client_list() if c["name"].startswith(f"{s.app_id}/")}

    async def run() -> tuple[set[str], list[str]]:
        await ensure_topics(s)
        before = set(threading.enumerate())
        svc = create_app(s)
        with ThreadPoolExecutor(1, thread_name_prefix="test-http") as http:
            def get(path: str) -> int:
                with urllib.request.urlopen(f"http://127.0.0.1:{svc.http_port}{path}", timeout=10) as resp:
                    return int(resp.status)

            loop = asyncio.get_running_loop()
            await svc.serve_http()
            await svc.app.start()
            try:
                # rated (the kernels' thread, the pipeline's client), read over HTTP (the reads' client),
                # probed (the health ping's thread and client)
                await asyncio.wait_for(_until_rated(svc), 120)
                assert await loop.run_in_executor(http, get, "/pools/m/leaderboard") == 200
                assert await loop.run_in_executor(http, get, "/healthz") == 200
                during = connections()
            finally:
                await svc.app.stop()
        left = set(threading.enumerate()) - before
        for t in left:  # the kernels' thread ends after the kernel it runs, if any
            t.join(10)
        return during, sorted(t.name for t in left if t.is_alive())

    try:
        during, threads = asyncio.run(run())
        assert {f"{s.app_id}/{role}" for role in ("rating", "reads", "health")} <= during
        assert threads == []
        assert connections() == set()
    finally:
        client.close()


async def _until_rated(svc: Service) -> None:
    """Until the worker stored ratings of pool ``m``."""
    while (await svc.store.page("m", 0, 1))[1] == 0:
        await asyncio.sleep(0.1)
