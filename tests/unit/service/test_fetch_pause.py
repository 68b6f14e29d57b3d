"""``Service.pause_fetch``: the worker pauses fetching its input partitions while Redis is unavailable.

The aiokafka consumer and Faust's consumer thread are stand-ins here (the real ones are driven by
tests/integration/test_store_outage.py); what is checked is the order of pauses and resumes when a
pause (the housekeeping timer's) is still under way as Redis comes back.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace
from typing import Any

from aiokafka import TopicPartition

from stream.service.app import Service
from stream.service.config import Settings
from stream.service.metrics import Metrics


class _Consumer:
    def __init__(self, tps: set[TopicPartition]) -> None:
        self.tps = tps
        self.calls: list[str] = []

    def assignment(self) -> set[TopicPartition]:
        return self.tps

    def pause(self, *tps: TopicPartition) -> None:
        self.calls.append("pause")

    def resume(self, *tps: TopicPartition) -> None:
        self.calls.append("resume")


class _Thread:
    """Faust's consumer thread: runs each call in turn; the first one waits for ``gate``."""

    def __init__(self, consumer: _Consumer) -> None:
        self.consumer = consumer
        self.gate = asyncio.Event()
        self.first = True

    def _ensure_consumer(self) -> _Consumer:
        return self.consumer

    async def call_thread(self, fun: Callable[[], Awaitable[Any]]) -> Any:
        if self.first:
            self.first = False
            await self.gate.wait()
        return await fun()


def test_a_pause_under_way_when_redis_comes_back_does_not_win() -> None:
    s = Settings()
    consumer = _Consumer({TopicPartition(t, 0) for t in s.input_topics()} | {TopicPartition("other", 0)})

    async def run() -> None:
        thread = _Thread(consumer)
        app = SimpleNamespace(consumer=SimpleNamespace(_thread=thread), crash=None)
        processor = SimpleNamespace(store_down=True, on_store_down=None, halts=SimpleNamespace(on_halt=None))
        store = SimpleNamespace(fence=None)  # a store that does not check for Redis restarts
        with ThreadPoolExecutor(1) as ex:
            svc = Service(s, app, store, ex, Metrics(), processor)  # type: ignore[arg-type]
            assert processor.on_store_down == svc.pause_fetch
            paused = asyncio.ensure_future(svc.pause_fetch(True))  # the housekeeping timer's, held up
            await asyncio.sleep(0.01)
            processor.store_down = False  # a batch committed: the processor resumes
            resumed = asyncio.ensure_future(svc.pause_fetch(False))
            await asyncio.sleep(0.01)
            thread.gate.set()
            await asyncio.gather(paused, resumed)
            assert consumer.calls == ["pause", "resume"] and not svc.fetch_paused
            assert svc.metrics.registry.get_sample_value("mmr_fetch_paused_partitions") == 0
            late = asyncio.ensure_future(svc.pause_fetch(True))  # a pause decided before the resume, run after it
            await late
            assert consumer.calls == ["pause", "resume"]  # changed nothing

    asyncio.run(run())
