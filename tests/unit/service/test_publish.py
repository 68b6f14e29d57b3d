"""``stream.service.publish.Publisher``: outputs the broker refuses are sent again until it holds them,
in input order; the batch is settled (and counted) only then.

The producer here is a stand-in with aiokafka's batch calls whose acknowledgements the test decides;
tests/integration/test_broker_restart.py does the same against a real broker that is killed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable
from typing import ClassVar

import pytest
from conftest import in_loop

from stream.events.model import RatingOutput
from stream.service.config import Settings
from stream.service.messages import DeadLetter
from stream.service.metrics import Metrics
from stream.service.publish import Delivery, Publisher
from stream.service.topics import OutputTopics


class _Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes]] = []

    def append(self, key: bytes, value: bytes, timestamp: None) -> object:
        self.records.append((key, value))
        return self


class _Producer:
    """Each record batch or message sent is noted; ``fail`` says whether its acknowledgement fails."""

    def __init__(self, fail: Callable[[int], bool] = lambda _: False, refuse: int = 0) -> None:
        self.fail = fail
        self.refuse = refuse  # dead letters refused outright (as aiokafka refuses one too large)
        self.sent: list[list[tuple[bytes, bytes]]] = []
        self.acked: list[list[tuple[bytes, bytes]]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    def create_batch(self) -> _Batch:
        return _Batch()

    def _future(self, records: list[tuple[bytes, bytes]]) -> asyncio.Future[None]:
        n = len(self.sent)
        self.sent.append(records)
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        if self.fail(n):
            fut.set_exception(ConnectionError(f"injected: send {n} not acknowledged"))
        else:
            fut.set_result(None)
            self.acked.append(records)
        return fut

    async def send_batch(self, batch: _Batch, topic: str, partition: int) -> asyncio.Future[None]:
        return self._future(batch.records)

    async def send(self, topic: str, value: bytes, key: bytes | None = None) -> asyncio.Future[None]:
        if self.refuse > 0:
            self.refuse -= 1
            raise ValueError("injected: the message is larger than the producer's request limit")
        return self._future([(key or b"", value)])


def _out(player: str, version: int) -> RatingOutput:
    return RatingOutput("p", player, 1500.0 + version, 1500.0, 350.0, version, version, "e", 0, "elo")


def _publisher(producer: _Producer, topics: OutputTopics | None = None) -> Publisher:
    return Publisher(Settings(), lambda: producer, Metrics(), topics, backoff=(0.001, 0.004))


def _sample(pub: Publisher, name: str) -> float | None:
    return pub.metrics.registry.get_sample_value(name)


@in_loop
async def test_a_batch_the_broker_refuses_is_sent_again_until_it_holds_it() -> None:
    producer = _Producer(fail=lambda n: n < 3)
    pub = _publisher(producer)
    d = Delivery()
    await pub.hand(d, [_out("a", 1), _out("b", 1)])
    await pub.hand_dead(d, [DeadLetter("bad", "in", 0, 7)])
    assert not d.done.done()
    await asyncio.wait_for(pub.settle(d), 5)
    assert d.done.done() and pub.waiting == 0
    assert producer.acked[-2:] == producer.sent[-2:] and len(producer.sent) >= 6  # the whole batch again
    assert _sample(pub, "mmr_ratings_out_total") == 2  # counted once, when held
    assert (_sample(pub, "mmr_publish_retries_total") or 0) >= 1


@in_loop
async def test_while_it_waits_the_publisher_says_so() -> None:
    refused = asyncio.Event()
    producer = _Producer(fail=lambda _: not refused.is_set())
    pub = _publisher(producer)
    d = Delivery()
    await pub.hand(d, [_out("a", 1)])
    task = asyncio.ensure_future(pub.settle(d))
    for _ in range(100):
        if pub.waiting:
            break
        await asyncio.sleep(0.005)
    assert pub.waiting == 1 and _sample(pub, "mmr_publish_waiting") == 1
    assert not task.done()
    refused.set()  # the broker is back
    await asyncio.wait_for(task, 5)
    assert pub.waiting == 0 and _sample(pub, "mmr_publish_waiting") == 0


@in_loop
async def test_a_batch_acknowledged_before_the_one_before_it_was_sent_again_follows_it() -> None:
    """Compaction keeps a key's last record: the newer version must be last on the topic again."""
    producer = _Producer(fail=lambda n: n == 0)  # the first batch's first send only
    pub = _publisher(producer)
    first, second = Delivery(), Delivery()
    await pub.hand(first, [_out("a", 1)])
    await pub.hand(second, [_out("a", 2)])
    await asyncio.wait_for(asyncio.gather(pub.settle(first), pub.settle(second, first)), 5)
    values = [v for batch in producer.acked for _, v in batch]
    assert len(values) == 3 and values[1] != values[2] and values[0] == values[2]  # v2, v1 again, v2 again
    assert _sample(pub, "mmr_ratings_out_total") == 2


@in_loop
async def test_batches_acknowledged_in_order_are_sent_once() -> None:
    producer = _Producer()
    pub = _publisher(producer)
    ds = [Delivery() for _ in range(3)]
    for k, d in enumerate(ds):
        await pub.hand(d, [_out("a", k + 1)])
    await asyncio.gather(*(pub.settle(d, ds[k - 1] if k else None) for k, d in enumerate(ds)))
    assert len(producer.sent) == 3 and _sample(pub, "mmr_publish_retries_total") == 0


@in_loop
async def test_a_dead_letter_the_producer_refuses_is_tried_again() -> None:
    producer = _Producer(refuse=3)
    pub = _publisher(producer)
    await asyncio.wait_for(pub.dead_letters([DeadLetter("too large", "in", 0, 3)]), 5)
    assert len(producer.acked) == 1 and _sample(pub, "mmr_publish_retries_total") == 3


class _Topics(OutputTopics):
    """The output topics' check with the broker's answers decided by the test."""

    def __init__(self, answers: list[str | None]) -> None:
        super().__init__(Settings())
        self.answers = answers
        self.checks = 0

    async def ensure(self, since: float | None = None) -> str | None:
        self.checks += 1
        return self.answers.pop(0) if self.answers else None


@in_loop
async def test_a_batch_whose_topic_was_lost_after_its_acknowledgement_is_sent_again() -> None:
    producer = _Producer()
    topics = _Topics(["output topic(s) r were missing"])
    pub = _publisher(producer, topics)
    d = Delivery()
    await pub.hand(d, [_out("a", 1)])
    await asyncio.wait_for(pub.settle(d), 5)
    assert len(producer.acked) == 2 and topics.checks >= 2


class _Admin:
    """aiokafka's admin client with the broker's partition counts decided by the test (``counts``)."""

    counts: ClassVar[dict[str, int]] = {}

    def __init__(self, **_: object) -> None:
        pass

    async def start(self) -> None:
        pass

    async def close(self) -> None:
        pass

    async def list_topics(self) -> list[str]:
        return list(self.counts)

    async def describe_topics(self, names: list[str]) -> list[dict[str, object]]:
        return [{"topic": n, "partitions": [{}] * self.counts[n], "error_code": 0} for n in names if n in self.counts]


@in_loop
async def test_a_topic_whose_partition_count_changed_stops_the_worker_in_one_line(
        caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch) -> None:
    from stream.service import topics as topics_module

    monkeypatch.setattr(topics_module, "AIOKafkaAdminClient", _Admin)
    monkeypatch.setattr(_Admin, "counts", {"r": 2, "d": 2})
    stopped: list[str] = []
    topics = OutputTopics(Settings(topic_ratings="r", topic_dead="d"), on_changed=stopped.append)
    assert await topics.check_partitions() is None
    assert await topics.check_partitions() is None
    _Admin.counts["r"] = 4
    changed = await topics.check_partitions()
    assert changed is not None and "r has 4 partitions, the worker started with 2" in changed
    assert stopped == [changed] and [r.getMessage() for r in caplog.records] == [changed]
    assert await topics.check_partitions() == changed and len(stopped) == 1  # said once
    await topics.close()
