"""The places where the worker reaches into Faust's private code, because no setting or public call does it.

Each stays because it carries a win a user sees (docs/ARCHITECTURE.md lists them with their
measurements). Three are class-level patches, of Faust's aiokafka driver and aiokafka's fetcher:
idempotent, and process-wide (every app the process builds after the call gets them; the worker
builds one). ``faust_app.faust_app`` applies them (the fetch waits as configured:
``MMR_FETCH_MAX_WAIT_MS``, ``MMR_FETCH_IDLE_WAIT_MS``). The fourth, ``pause_fetching``, calls the
aiokafka consumer that Faust's consumer thread owns; ``stream.service.publish`` sends record batches
through the aiokafka producer Faust wraps. They were written against faust-streaming 0.15,
mode-streaming 0.7 and aiokafka 0.14 (pinned in pyproject.toml);
tests/unit/service/test_faust_patches.py checks that the code they replace is still there, so an upgrade
that moves it fails those tests instead of silently undoing the patch.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Iterable
from types import CoroutineType
from typing import Any


def patch_fetch_wait(ms: int, idle_ms: int = 0) -> None:
    """Make Faust's consumer long-poll ``ms`` instead of its hard-coded 1,500 ms while records
    arrive, and up to ``idle_ms`` while none do (``FetchWaits``; ``idle_ms <= ms``: ``ms`` always).

    Why short: Tansu answers a fetch that spans several partitions, some of them empty, only when
    ``fetch_max_wait_ms`` expires, even when another partition has data (a single-partition fetch
    returns at once). Faust subscribes the worker to three input topics, so with Faust's wait every
    message waited up to the whole of it. Why longer when nothing arrives: every fetch costs the
    worker's consumer thread, its event loop and the broker some CPU, so a fixed short wait keeps an
    idle worker and its broker busy, and in a backfill, where the worker's own input partitions wait
    in its buffer, the idle topics' fetches take a share of the worker's CPU. On Kafka a fetch
    returns as soon as data arrives, so the longer wait costs nothing;
    on Tansu it bounds the delay of the first message after a quiet spell.
    """
    from aiokafka.consumer.fetcher import Fetcher
    from faust.transport.drivers import aiokafka as faust_aiokafka

    cls: Any = faust_aiokafka.AIOKafkaConsumerThread
    original = getattr(cls, "_mmr_original_create_worker_consumer", None) or cls._create_worker_consumer

    def create(self: Any, transport: Any) -> Any:
        consumer = original(self, transport)
        consumer._fetch_max_wait_ms = ms  # read by AIOKafkaConsumer.start() when it builds its Fetcher
        if idle_ms > ms:
            start = consumer.start

            async def started() -> None:
                await start()
                consumer._fetcher._mmr_fetch_waits = FetchWaits(ms, idle_ms)

            consumer.start = started
        return consumer

    cls._mmr_original_create_worker_consumer = original
    cls._create_worker_consumer = create
    patch_fetcher_waits(Fetcher)


class FetchWaits:
    """The long-poll of a consumer's next fetch: ``busy_ms`` after a fetch that brought records
    (or an error to report), doubled after each one that brought nothing, up to ``idle_ms``.

    Doubling rather than jumping: a fetch that comes back empty in a stream of light traffic is
    usually followed by one that brings something, and on Tansu a long wait would hold that
    message back; a quiet spell reaches ``idle_ms`` within a few fetches."""

    __slots__ = ("busy_ms", "idle_ms", "ms")

    def __init__(self, busy_ms: int, idle_ms: int) -> None:
        self.busy_ms = busy_ms
        self.idle_ms = max(idle_ms, busy_ms)
        self.ms = busy_ms

    def after(self, brought: bool) -> int:
        """The wait of the next fetch, after one that ``brought`` records or not."""
        self.ms = self.busy_ms if brought else min(self.idle_ms, max(1, 2 * self.ms))
        return self.ms


def patch_fetcher_waits(fetcher_cls: Any) -> None:
    """Let a fetcher that carries ``_mmr_fetch_waits`` (a ``FetchWaits``) set the wait of its next
    fetch from what the last one brought; other fetchers are untouched. aiokafka reads
    ``_fetch_max_wait_ms`` each time it builds a fetch request, and ``_proc_fetch_request``
    returns whether the fetch added records or an error for the consumer (``needs_wakeup``)."""
    original = getattr(fetcher_cls, "_mmr_original_proc_fetch_request", None) or fetcher_cls._proc_fetch_request

    async def proc_fetch_request(self: Any, assignment: Any, node_id: Any, request: Any) -> bool:
        brought = await original(self, assignment, node_id, request)
        waits = getattr(self, "_mmr_fetch_waits", None)
        if waits is not None:
            self._fetch_max_wait_ms = waits.after(bool(brought))
        return bool(brought)

    fetcher_cls._mmr_original_proc_fetch_request = original
    fetcher_cls._proc_fetch_request = proc_fetch_request


class _Resumed:
    """Awaitable that finishes a coroutine which already ran up to its first suspension.

    ``first`` is what the coroutine yielded (a future to wait on, or ``None`` for a bare
    yield); the task that awaits this object waits on it exactly as it would have, then
    everything sent or thrown in (results, ``CancelledError``) is forwarded unchanged.
    """

    __slots__ = ("coro", "first")

    def __init__(self, coro: Coroutine[Any, Any, Any], first: Any) -> None:
        self.coro = coro
        self.first = first

    def __await__(self) -> Generator[Any, Any, Any]:
        coro, signal = self.coro, self.first
        while True:
            try:
                sent = yield signal
            except GeneratorExit:
                coro.close()
                raise
            except BaseException as exc:  # forwarded into the coroutine, not handled here
                try:
                    signal = coro.throw(exc)
                except StopIteration as stop:
                    return stop.value
                continue
            try:
                signal = coro.send(sent)
            except StopIteration as stop:
                return stop.value


class DeliveryStats:
    """Process-wide count of hand-overs that could not finish inline (``patch_inline_delivery``):
    the batch channel was full (the agent is behind: back-pressure) or a rebalance stopped the
    flow. Served as ``mmr_deliveries_waited_total``."""

    waited = 0


def _waits_on(coro: object, event: object) -> bool:
    """Is ``coro`` an unstarted ``event.wait()``?"""
    frame = getattr(coro, "cr_frame", None)
    return frame is not None and frame.f_locals.get("self") is event


def patch_inline_delivery() -> None:
    """Hand each fetched message to the agent inline, not through four tasks.

    Why: Faust's fetch loop (``Consumer._drain_messages``) delivers every message with
    ``await consumer.wait_first(on_message(message), suspend_flow.wait())`` so that a
    rebalance (``suspend_flow`` set) abandons a delivery that is stuck on a full buffer.
    ``wait_first`` wraps both coroutines and the service's ``stopped`` and ``crashed`` events
    in four tasks and an ``asyncio.wait``, per message, on the event-loop thread that also runs
    the agent and the rating pipeline: the largest single item of that thread's time in a
    profile of the worker under single matches. The batch delivery (``stream.service.delivery``)
    does not change that: the fetch loop still calls ``wait_first`` once per record. The worker's
    throughput and produce-to-rating latency with and without it: BENCHMARKS.md, "Faust delivery
    and hand-written wire formats".

    Almost always ``on_message`` finishes without suspending: it appends the record to the
    open batch, or the batch channel has room for the closed one. So, when the flow is not
    suspended and the consumer is neither stopping nor crashed, run its first step inline;
    if it finishes, that is the whole delivery, no task made. If it suspends (a full channel,
    a stopped flow), the rest of it goes through Faust's own ``wait_first`` as before, so a
    rebalance still abandons it. Any other call of ``wait_first`` is Faust's, unchanged.
    The messages, their order and the offsets Faust records are the same either way.

    After an inline delivery the fetch loop yields to the event loop once, as Faust's own
    ``asyncio.wait`` did, so the agent and the batch timer run between records. Without that
    yield, Faust's fetch loop (which yields every 100 messages) runs ahead of its consumer, and
    the hand-overs wait on a full buffer (Faust's four tasks again).
    """
    from faust.transport.drivers import aiokafka as faust_aiokafka
    from mode.services import WaitResults

    cls: Any = faust_aiokafka.Consumer
    original = getattr(cls, "_mmr_original_wait_first", None) or cls.wait_first

    async def wait_first(self: Any, *coros: Any, timeout: Any = None) -> Any:
        if (len(coros) == 2 and timeout is None and type(coros[0]) is CoroutineType
                and not (self.suspend_flow.is_set() or self._stopped.is_set() or self._crashed.is_set())
                and _waits_on(coros[1], self.suspend_flow)):
            delivery, flow_wait = coros
            try:
                pending = delivery.send(None)
            except StopIteration as stop:
                flow_wait.close()
                await asyncio.sleep(0)  # let the stream take it before the next one (see the docstring)
                return WaitResults([delivery], [stop.value], False)
            except BaseException:
                flow_wait.close()
                raise
            DeliveryStats.waited += 1
            return await original(self, _Resumed(delivery, pending), flow_wait)
        return await original(self, *coros, timeout=timeout)

    cls._mmr_original_wait_first = original
    cls.wait_first = wait_first


async def pause_fetching(app: Any, topics: Iterable[str], paused: bool) -> int:
    """Pause (``paused``) or resume fetching every assigned partition of ``topics``; returns how many.

    Why the aiokafka consumer and not Faust's ``Consumer.pause_partitions``: Faust's only takes the
    partitions out of the set its fetch loop passes to aiokafka, and that set is passed by
    reference into a fetch that may be waiting: emptied under it, the fetch returns records of
    every partition, which Faust's loop then drops as not active -- after aiokafka counted them
    consumed, so they are not fetched again until a restart or a rebalance (seen here: messages
    of the outage never rated until the worker restarted). aiokafka's own ``pause`` stops the
    fetcher and discards what it had buffered for the partition without moving its position, so
    ``resume`` fetches from the first record not yet handed to Faust. The call runs on Faust's
    consumer thread, which owns the aiokafka consumer (``call_thread``).
    """
    from aiokafka import TopicPartition

    wanted = frozenset(topics)
    thread = app.consumer._thread  # Faust's AIOKafkaConsumerThread

    async def apply() -> int:
        consumer = thread._ensure_consumer()
        tps = [TopicPartition(tp.topic, tp.partition) for tp in consumer.assignment() if tp.topic in wanted]
        if paused:
            consumer.pause(*tps)
        else:
            consumer.resume(*tps)
        return len(tps)

    return int(await thread.call_thread(apply))
