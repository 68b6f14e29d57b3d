"""The worker's patches of Faust (stream.service.faust_app).

The patched ``wait_first`` runs on a stand-in with the three events Faust's consumer has; it
calls mode's real ``Service.wait_first`` for everything it does not handle inline. The last
tests check that the Faust and aiokafka code the patches replace is still what they expect.
"""

from __future__ import annotations

import asyncio
import inspect
import warnings
from types import SimpleNamespace
from typing import Any

import pytest
from conftest import in_loop
from faust.transport.drivers import aiokafka as faust_aiokafka

from stream.service.faust_app import DeliveryStats, FetchWaits, _Resumed, patch_inline_delivery


@pytest.fixture(scope="module")
def patched() -> Any:
    cls: Any = faust_aiokafka.Consumer
    before = cls.wait_first
    patch_inline_delivery()
    patch_inline_delivery()  # idempotent: wraps Faust's method once
    try:
        yield cls.wait_first
    finally:
        cls.wait_first = before


def consumer() -> Any:
    return SimpleNamespace(suspend_flow=asyncio.Event(), _stopped=asyncio.Event(), _crashed=asyncio.Event(),
                           loop=asyncio.get_running_loop())


def test_the_patch_wraps_faust_once(patched: Any) -> None:
    cls: Any = faust_aiokafka.Consumer
    assert cls._mmr_original_wait_first.__qualname__ == "Service.wait_first"


@in_loop
async def test_a_delivery_that_does_not_suspend_runs_inline_without_tasks(patched: Any) -> None:
    c = consumer()
    seen: list[str] = []
    ran_in: list[asyncio.Task[Any] | None] = []

    async def deliver(m: str) -> str:
        seen.append(m)
        ran_in.append(asyncio.current_task())
        return m.upper()

    waited = DeliveryStats.waited
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "coroutine ... was never awaited" would be a leak
        res = await patched(c, deliver("a"), c.suspend_flow.wait())
    assert seen == ["a"] and res.results == ["A"] and not res.stopped
    assert DeliveryStats.waited == waited
    assert ran_in == [asyncio.current_task()]  # no task was made for it


@in_loop
async def test_after_an_inline_delivery_the_loop_runs_what_is_ready(patched: Any) -> None:
    """The fetch loop yields once per inline delivery, as Faust's own ``asyncio.wait`` did, so
    the stream's consumer takes each message before the next is handed over."""
    c = consumer()
    order: list[str] = []

    async def deliver() -> None:
        asyncio.get_running_loop().call_soon(order.append, "the stream's consumer ran")
        order.append("delivered")

    await patched(c, deliver(), c.suspend_flow.wait())
    order.append("wait_first returned")
    assert order == ["delivered", "the stream's consumer ran", "wait_first returned"]


@in_loop
async def test_a_delivery_that_suspends_is_finished_by_fausts_wait_first(patched: Any) -> None:
    c = consumer()
    gate = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def deliver() -> str:
        steps.append("before")
        value = await gate
        steps.append(f"after {value}")
        return "done"

    waited = DeliveryStats.waited
    task = asyncio.ensure_future(patched(c, deliver(), c.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    assert steps == ["before"] and not task.done()
    assert DeliveryStats.waited == waited + 1  # counted as a hand-over that had to wait
    gate.set_result(7)
    res = await task
    assert steps == ["before", "after 7"] and res.results == ["done"]


@in_loop
async def test_a_rebalance_abandons_a_suspended_delivery(patched: Any) -> None:
    c = consumer()
    gate = asyncio.get_running_loop().create_future()
    steps: list[str] = []

    async def deliver() -> None:
        try:
            await gate
            steps.append("delivered")
        except asyncio.CancelledError:
            steps.append("cancelled")
            raise

    task = asyncio.ensure_future(patched(c, deliver(), c.suspend_flow.wait()))
    await asyncio.sleep(0.01)
    c.suspend_flow.set()  # what Faust's consumer does when partitions are revoked
    await task
    await asyncio.sleep(0)
    assert steps == ["cancelled"]


@in_loop
async def test_while_the_flow_is_suspended_nothing_runs_inline(patched: Any) -> None:
    c = consumer()
    c.suspend_flow.set()
    ran_in: list[asyncio.Task[Any] | None] = []

    async def deliver() -> None:
        ran_in.append(asyncio.current_task())

    await patched(c, deliver(), c.suspend_flow.wait())
    await asyncio.sleep(0.01)
    assert asyncio.current_task() not in ran_in  # Faust's path: in a task of its own, if at all


@in_loop
async def test_an_error_in_the_delivery_propagates(patched: Any) -> None:
    c = consumer()

    async def deliver() -> None:
        raise KeyError("boom")

    with pytest.raises(KeyError), warnings.catch_warnings():
        warnings.simplefilter("error")
        await patched(c, deliver(), c.suspend_flow.wait())


@in_loop
async def test_other_calls_are_fausts(patched: Any) -> None:
    c = consumer()

    async def work() -> int:
        await asyncio.sleep(0)
        return 3

    res = await patched(c, work(), timeout=1.0)
    assert res.results == [3]


@in_loop
async def test_resumed_forwards_values_and_exceptions() -> None:
    loop = asyncio.get_running_loop()
    fut1, fut2 = loop.create_future(), loop.create_future()
    log: list[object] = []

    async def body() -> str:
        log.append(await fut1)
        try:
            await fut2
        except ValueError as exc:
            log.append(f"caught {exc}")
        return "end"

    coro = body()
    first = coro.send(None)
    assert first is fut1
    task = asyncio.ensure_future(_Resumed(coro, first))
    fut1.set_result(1)
    await asyncio.sleep(0)
    fut2.set_exception(ValueError("x"))
    assert await task == "end"
    assert log == [1, "caught x"]


# The code the patches replace or rely on is still where they were written against; an upgrade
# of faust-streaming, mode-streaming or aiokafka that moves it fails here, not silently in production.


def test_faust_still_hard_codes_the_fetch_wait_and_aiokafka_still_reads_the_attribute_set() -> None:
    """``patch_fetch_wait`` sets ``_fetch_max_wait_ms`` on the consumer Faust builds, which
    aiokafka reads when it starts. If Faust makes the wait a setting, use that instead."""
    from aiokafka.consumer.consumer import AIOKafkaConsumer

    cls = faust_aiokafka.AIOKafkaConsumerThread  # Faust's own method, whether or not a worker patched it
    built = inspect.getsource(getattr(cls, "_mmr_original_create_worker_consumer", cls._create_worker_consumer))
    assert "fetch_max_wait_ms=1500" in built
    assert "self._fetch_max_wait_ms = fetch_max_wait_ms" in inspect.getsource(AIOKafkaConsumer.__init__)
    assert "fetch_max_wait_ms=self._fetch_max_wait_ms" in inspect.getsource(AIOKafkaConsumer.start)


@in_loop
async def test_the_patched_consumer_long_polls_as_configured() -> None:
    import faust

    from stream.service.faust_app import patch_fetch_wait

    cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    before = cls._create_worker_consumer
    try:
        patch_fetch_wait(7)
        patch_fetch_wait(7)  # idempotent: wraps Faust's method once
        app = faust.App(f"mmr-test-fetch-{id(object())}", broker="kafka://127.0.0.1:1", store="memory://")
        thread = cls(app.consumer)
        built = thread._create_worker_consumer(app.transport)  # no connection is made
        assert built._fetch_max_wait_ms == 7
        assert "start" not in vars(built)  # a fixed wait: aiokafka's own start
        assert cls._mmr_original_create_worker_consumer.__qualname__.endswith("._create_worker_consumer")
        patch_fetch_wait(7, 100)
        built = thread._create_worker_consumer(app.transport)
        assert built._fetch_max_wait_ms == 7 and "start" in vars(built)  # its fetcher gets FetchWaits once built
    finally:
        cls._create_worker_consumer = before


def test_fetch_waits_double_while_nothing_arrives_and_drop_back_when_something_does() -> None:
    waits = FetchWaits(10, 100)
    assert [waits.after(False) for _ in range(6)] == [20, 40, 80, 100, 100, 100]
    assert waits.after(True) == 10
    assert waits.after(False) == 20
    assert FetchWaits(10, 5).after(False) == 10  # an idle wait below the busy one: fixed
    zero = FetchWaits(0, 50)  # a zero wait still grows
    assert [zero.after(False) for _ in range(3)] == [1, 2, 4]


def test_aiokafka_still_builds_each_fetch_with_the_fetchers_wait_and_reports_what_it_brought() -> None:
    """``patch_fetcher_waits`` sets ``_fetch_max_wait_ms`` between fetches, which aiokafka reads each
    time it builds a request, and reads ``_proc_fetch_request``'s result as "records arrived"."""
    from aiokafka.consumer.fetcher import Fetcher

    built = inspect.getsource(Fetcher._get_actions_per_node)
    assert "FetchRequest(" in built and "self._fetch_max_wait_ms," in built
    proc = inspect.getsource(getattr(Fetcher, "_mmr_original_proc_fetch_request", Fetcher._proc_fetch_request))
    assert "# We added at least 1 successful record\n" in proc and "return needs_wakeup" in proc
    assert list(inspect.signature(Fetcher._proc_fetch_request).parameters) == ["self", "assignment", "node_id",
                                                                                "request"]


def test_fausts_fetch_loop_still_delivers_through_wait_first() -> None:
    """``patch_inline_delivery`` recognises exactly this call of ``wait_first``."""
    drain = inspect.getsource(faust_aiokafka.Consumer._drain_messages)
    assert "self.wait_first(" in drain and "callback(message), self.suspend_flow.wait()" in drain
    params = inspect.signature(faust_aiokafka.Consumer.wait_first).parameters
    assert [p.kind for p in params.values()][1] is inspect.Parameter.VAR_POSITIONAL and "timeout" in params
    from mode.services import WaitResults

    assert WaitResults._fields == ("done", "results", "stopped")


@in_loop
async def test_an_event_wait_is_recognised_by_its_frame() -> None:
    from stream.service.faust_app import _waits_on

    event, other = asyncio.Event(), asyncio.Event()
    wait = event.wait()
    try:
        assert _waits_on(wait, event) and not _waits_on(wait, other)
    finally:
        wait.close()


def test_fausts_producer_still_hands_out_its_aiokafka_producer() -> None:
    """``Publisher.ratings`` ships pre-built record batches through the aiokafka producer
    Faust wraps (Faust has no public batch send)."""
    from aiokafka import AIOKafkaProducer

    assert "return self._producer" in inspect.getsource(faust_aiokafka.Producer._ensure_producer)
    for name, params in (("create_batch", []), ("send_batch", ["batch", "topic", "partition"]),
                         ("partitions_for", ["topic"])):
        assert list(inspect.signature(getattr(AIOKafkaProducer, name)).parameters)[1:] == params, name


def test_fausts_consumer_still_owns_an_aiokafka_consumer_on_its_thread() -> None:
    """``pause_fetching`` reaches the aiokafka consumer through Faust's consumer thread, and relies
    on aiokafka's pause dropping what the fetcher buffered for a paused partition without
    consuming it (so that resuming fetches it again)."""
    from aiokafka import AIOKafkaConsumer
    from aiokafka.consumer.fetcher import FetchResult
    from faust.transport.consumer import ThreadDelegateConsumer

    assert "self._thread = self._new_consumer_thread()" in inspect.getsource(ThreadDelegateConsumer.__init__)
    assert issubclass(faust_aiokafka.Consumer, ThreadDelegateConsumer)
    assert "return self._consumer" in inspect.getsource(faust_aiokafka.AIOKafkaConsumerThread._ensure_consumer)
    assert list(inspect.signature(faust_aiokafka.AIOKafkaConsumerThread.call_thread).parameters)[1:] == \
        ["fun", "args", "kwargs"]
    for name in ("pause", "resume", "assignment"):
        assert callable(getattr(AIOKafkaConsumer, name)), name
    check = inspect.getsource(FetchResult.check_assignment)
    assert "tp_state.paused" in check and "self._partition_records = None" in check
