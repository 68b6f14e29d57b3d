"""The consumer's long-poll against the real broker (``faust_app.FetchWaits``): it grows while
the worker's input topics are quiet, drops back as soon as a fetch brings a message, and no
message waits for it beyond one fetch."""

from __future__ import annotations

import asyncio
import time

import pytest
from aiokafka import AIOKafkaConsumer, AIOKafkaProducer, TopicPartition
from aiokafka.consumer.fetcher import Fetcher
from service_utils import make_settings

from stream.service.config import Settings
from stream.service.faust_app import FetchWaits, patch_fetcher_waits
from stream.service.topics import ensure_topics

pytestmark = [pytest.mark.integration, pytest.mark.timeout(120)]


class RecordedWaits(FetchWaits):
    """``FetchWaits`` that keeps what each fetch brought and the wait it set."""

    __slots__ = ("log",)

    def __init__(self, busy_ms: int, idle_ms: int) -> None:
        super().__init__(busy_ms, idle_ms)
        self.log: list[tuple[bool, int]] = []

    def after(self, brought: bool) -> int:
        ms = super().after(brought)
        self.log.append((brought, ms))
        return ms


async def _quiet_then_one_message(s: Settings) -> tuple[RecordedWaits, list[tuple[bool, int]], float]:
    await ensure_topics(s)
    patch_fetcher_waits(Fetcher)
    consumer = AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, enable_auto_commit=False,
                                auto_offset_reset="earliest", fetch_max_wait_ms=10)
    producer = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap)
    await consumer.start()
    await producer.start()
    try:
        # the worker's shape: several input topics, most of them quiet
        consumer.assign([TopicPartition(t, p) for t in (s.topic_matches, s.topic_rounds, s.topic_results)
                         for p in range(s.partitions)])
        waits = RecordedWaits(10, 160)
        consumer._fetcher._mmr_fetch_waits = waits  # what patch_fetch_wait's consumer start sets
        quiet = await consumer.getmany(timeout_ms=1500)
        assert not quiet
        before = list(waits.log)
        t0 = time.perf_counter()
        await producer.send_and_wait(s.topic_rounds, b"x", key=b"pool", partition=0)
        got = await consumer.getmany(timeout_ms=5000)
        delay = time.perf_counter() - t0
        assert [r.value for records in got.values() for r in records] == [b"x"]
        await asyncio.sleep(0.3)  # quiet again
        return waits, before, delay
    finally:
        await producer.stop()
        await consumer.stop()


def test_the_long_poll_grows_while_quiet_and_drops_back_when_a_message_arrives(kafka_bootstrap: str,
                                                                              redis_url: str) -> None:
    s = make_settings(kafka_bootstrap, redis_url, partitions=2)
    waits, quiet, delay = asyncio.run(_quiet_then_one_message(s))
    # quiet: nothing brought, the wait doubled up to its bound and stayed there
    assert quiet and not any(brought for brought, _ in quiet)
    assert [ms for _, ms in quiet[:4]] == [20, 40, 80, 160] and quiet[-1][1] == 160
    assert len(quiet) < 1500 / 160 + 8  # a fixed 10 ms wait would have fetched ~150 times
    # the message came with the first fetch that could take it (at most a whole idle wait on a
    # broker that answers only when the wait expires, plus the next fetch), and the wait dropped back
    assert delay < 2.0
    after = waits.log[len(quiet):]
    first = next(i for i, (brought, _) in enumerate(after) if brought)
    assert after[first] == (True, 10)
    assert [ms for _, ms in after[first + 1:first + 4]] == [20, 40, 80]  # and grew again, quiet again
