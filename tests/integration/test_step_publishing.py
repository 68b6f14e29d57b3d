"""A batch's ratings handed to the producer step by step (``Processor.start``'s ``hand``,
``Service.rate``), on a real Redis with a stand-in for Faust's producer.

A batch cut into several steps (``MMR_MAX_STEP_PLAYERS``) must hand each step's ratings over once
that step is committed, before the batch's last step is, while publishing exactly what the batch
publishes when its ratings are handed over at its end (the same records, in the same order); the
batch's input is acknowledged only once every record is on the broker; and a batch tried again after
a step committed hands no version of a player twice.
"""

from __future__ import annotations

import asyncio
import random
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

import orjson
import pytest
from prometheus_client import generate_latest
from service_utils import sample

from stream.events.model import RatingOutput, rating_key, rating_value
from stream.service.app import Service
from stream.service.config import Settings
from stream.service.metrics import Metrics
from stream.service.processor import Handed, Message, Processor
from stream.state.redis_client import StoreUnavailable
from stream.state.redis_store import RedisStore

pytestmark = pytest.mark.integration

POOL = "h"
PLAYERS = [f"p{i}" for i in range(120)]


def _round(k: int, size: int = 40) -> Message:
    who = random.Random(k).sample(PLAYERS, size)
    body = {"type": "round", "pool": POOL, "event_id": f"r{k}", "round_id": f"r{k}", "time": 1000 + k,
            "standings": [{"player": p, "rank": j + 1} for j, p in enumerate(who)]}
    return Message("rounds", 0, k, orjson.dumps(body))


ROUNDS = [_round(k) for k in range(8)]  # each a step of its own (60 players at most a step)


def _settings(**kw: Any) -> Settings:
    return Settings(system="elo-mmr", max_step_players=60, **kw)


def _store(redis_url: str) -> RedisStore:
    return RedisStore.from_url(redis_url, prefix=f"steps{uuid.uuid4().hex[:6]}")


class _Batch:
    def __init__(self) -> None:
        self.records: list[tuple[bytes, bytes]] = []

    def append(self, key: bytes, value: bytes, timestamp: None) -> object:
        self.records.append((key, value))
        return self


class _Producer:
    """aiokafka's producer as ``Publisher.ratings`` uses it: each record batch sent is noted with the
    number of Redis commits made by then; its delivery future is resolved by the test (``deliver``)."""

    def __init__(self, commits: Callable[[], int]) -> None:
        self.commits = commits
        self.sent: list[tuple[int, list[tuple[bytes, bytes]]]] = []
        self.futures: list[asyncio.Future[None]] = []

    async def partitions_for(self, topic: str) -> set[int]:
        return {0}

    def create_batch(self) -> _Batch:
        return _Batch()

    async def send_batch(self, batch: _Batch, topic: str, partition: int) -> asyncio.Future[None]:
        self.sent.append((self.commits(), batch.records))
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self.futures.append(fut)
        return fut

    def deliver(self) -> None:
        for f in self.futures:
            if not f.done():
                f.set_result(None)

    def records(self) -> list[tuple[bytes, bytes]]:
        return [r for _, batch in self.sent for r in batch]


def _counting_commits(store: RedisStore) -> Callable[[], int]:
    commit = store.commit
    n = 0

    async def counted(*args: Any, **kwargs: Any) -> int:
        nonlocal n
        gen = await commit(*args, **kwargs)
        n += 1
        return gen

    store.commit = counted  # type: ignore[method-assign]
    return lambda: n


def _service(s: Settings, store: RedisStore, ex: ThreadPoolExecutor) -> tuple[Service, _Producer, Callable[[], int]]:
    commits = _counting_commits(store)
    producer = _Producer(commits)

    async def crash(exc: BaseException) -> None:
        raise AssertionError(f"the pipeline failed: {exc!r}")

    app = SimpleNamespace(producer=SimpleNamespace(_ensure_producer=lambda: producer), crash=crash,
                          consumer=SimpleNamespace())
    metrics = Metrics()
    svc = Service(s, app, store, ex, metrics, Processor(s, store, ex, metrics))  # type: ignore[arg-type]
    return svc, producer, commits


async def _reference(s: Settings, redis_url: str, ex: ThreadPoolExecutor) -> list[tuple[bytes, bytes]]:
    """What the batch publishes when its ratings are handed over at its end (``Processor.process``)."""
    store = _store(redis_url)
    res = await Processor(s, store, ex).process(ROUNDS)
    await store.close()
    return [(rating_key(o.pool, o.player), rating_value(o)) for o in res.outputs]


def test_each_step_is_handed_to_the_producer_once_committed_and_the_input_acked_after_all(redis_url: str) -> None:
    s = _settings()

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            want = await _reference(s, redis_url, ex)
            store = _store(redis_url)
            svc, producer, commits = _service(s, store, ex)
            await svc.pipeline.submit(list(ROUNDS), [])
            for _ in range(500):  # until the batch is committed and handed over
                if svc.batches_done and producer.records() == want:
                    break
                await asyncio.sleep(0.01)
            steps = commits()
            assert steps == len(ROUNDS)
            assert producer.records() == want  # the same records, in the same order
            first = producer.sent[0][0]
            assert first < steps, f"the first ratings reached the producer only after commit {first} of {steps}"
            await asyncio.sleep(0.05)
            assert sample(svc.metrics, "mmr_messages_done_total") == 0  # not acked before the broker has every record
            assert sample(svc.metrics, "mmr_messages_done_timestamp_seconds") == 0
            delivered = time.time()
            producer.deliver()
            await asyncio.wait_for(svc.pipeline.drain(), 10)
            assert sample(svc.metrics, "mmr_messages_done_total") == len(ROUNDS)
            done_at = sample(svc.metrics, "mmr_messages_done_timestamp_seconds")
            assert delivered <= done_at <= time.time()  # stamped when they were done
            assert sample(svc.metrics, "mmr_ratings_out_total") == len(want)
            await svc.pipeline.stop()
            await store.close()

    asyncio.run(run())


def test_a_batch_tried_again_after_a_step_committed_hands_no_version_twice(redis_url: str) -> None:
    """The third step's read fails (Redis unavailable before its commit was sent): the batch is tried again
    whole, finds its first two steps applied and re-publishes their players' ratings -- the versions handed
    already, left out -- and publishes exactly what the batch publishes without the failure."""
    s = _settings()

    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            want = await _reference(s, redis_url, ex)
            store = _store(redis_url)
            svc, producer, commits = _service(s, store, ex)
            snapshot = store.snapshot
            failed = False

            async def failing(*args: Any, **kwargs: Any) -> Any:
                nonlocal failed
                if commits() == 2 and not failed:
                    failed = True
                    raise StoreUnavailable("injected: Redis unavailable at the third step's read")
                return await snapshot(*args, **kwargs)

            store.snapshot = failing  # type: ignore[method-assign]
            svc.processor.on_store_down = None  # no consumer to pause here
            await svc.pipeline.submit(list(ROUNDS), [])
            producer.deliver()
            for _ in range(500):
                producer.deliver()
                if sample(svc.metrics, "mmr_messages_done_total"):
                    break
                await asyncio.sleep(0.01)
            assert failed
            got = producer.records()
            assert got == want, (len(got), len(want))
            await svc.pipeline.stop()
            await store.close()

    asyncio.run(run())


def _out(player: str, version: int) -> RatingOutput:
    return RatingOutput(POOL, player, 1500.0, 1500.0, 350.0, version, version, "e", 0, "elo-mmr")


def test_handed_leaves_out_only_versions_handed_before_a_retry() -> None:
    got: list[list[tuple[str, int]]] = []
    handed = Handed(lambda outs: got.append([(o.player, o.version) for o in outs]))
    handed([_out("a", 1), _out("b", 1)])
    handed([_out("a", 2)])
    assert got == [[("a", 1), ("b", 1)], [("a", 2)]]  # no retry: nothing left out
    handed.again()
    handed([_out("a", 1), _out("b", 1), _out("c", 1)])
    handed([_out("a", 2), _out("b", 2)])
    handed([_out("c", 1)])  # handed after the retry began: left out too
    assert got[2:] == [[("c", 1)], [("b", 2)]]


def test_a_revoked_partition_takes_its_consumer_lag_with_it(redis_url: str) -> None:
    """Its last lag, left behind, would be summed with its new owner's by every dashboard and alert."""
    async def run() -> None:
        with ThreadPoolExecutor(1) as ex:
            store = _store(redis_url)
            svc, _, _ = _service(_settings(), store, ex)
            svc.metrics.lag.labels("rounds", "0").set(7)
            svc.metrics.lag.labels("rounds", "1").set(3)
            svc.disown([("rounds", 0), ("results", 5)])  # the second never reported by this worker
            text = generate_latest(svc.metrics.registry).decode()
            assert 'mmr_consumer_lag{partition="1",topic="rounds"} 3.0' in text
            assert 'partition="0"' not in text
            await store.close()

    asyncio.run(run())
