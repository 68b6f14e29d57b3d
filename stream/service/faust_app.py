"""The worker's Faust app: its settings, and the places where it reaches into Faust's private code
because no setting or public call does it.

Faust settings: short rebalance/session timeouts (with Faust's 60 s defaults the first join waits
for most of them), no idempotent producer (Tansu answers InitProducerId with an error), at-least-once processing
with the effectively-once step in Redis, memory:// store (state is in Redis), topics created by
``stream.service.topics`` (never declared by Faust), our own HTTP server.

Each departure stays for a win a user sees (docs/ARCHITECTURE.md, "Where the worker departs from its
libraries"). The class-level patches (Faust's aiokafka driver, aiokafka's fetcher) are idempotent
and process-wide; ``faust_app`` applies them. They were written against faust-streaming
0.15, mode-streaming 0.7 and aiokafka 0.14 (pinned in pyproject.toml);
tests/unit/service/test_faust_patches.py checks that the code they replace is still there.
"""

from __future__ import annotations

import asyncio
from collections.abc import Coroutine, Generator, Iterable
from types import CoroutineType
from typing import Any

import faust

from stream.service.config import Settings

#: seconds the producer waits for the broker's acknowledgement of a request before it fails it
PRODUCER_REQUEST_TIMEOUT_S = 30.0


def faust_kwargs(s: Settings) -> dict[str, Any]:
    kw: dict[str, Any] = dict(
        broker=";".join(f"kafka://{h.strip()}" for h in s.kafka_bootstrap.split(",") if h.strip()),
        store="memory://",
        value_serializer="raw",
        key_serializer="raw",
        processing_guarantee="at_least_once",
        broker_rebalance_timeout=4.0,
        broker_session_timeout=6.0,
        broker_heartbeat_interval=1.0,
        broker_commit_interval=0.5,
        consumer_auto_offset_reset="earliest",
        producer_acks=-1,
        producer_linger_ms=1,
        producer_max_batch_size=s.producer_batch_bytes,
        producer_max_request_size=s.producer_max_request_bytes,
        # a batch the broker has not acknowledged by then fails and is sent again by the worker
        # (stream.service.publish), which then reports that it waits; Faust's default is 20 minutes
        producer_request_timeout=PRODUCER_REQUEST_TIMEOUT_S,
        topic_disable_leader=True,
        topic_allow_declare=False,  # created up front by stream.service.topics
        web_enabled=False,  # our own aiohttp server (stream.service.http)
        stream_wait_empty=False,
        # Faust wants a data directory even with memory:// stores; keep it out of the cwd
        datadir=s.faust_state_dir(),
    )
    ctx = s.ssl_context()
    if "SASL" in s.security_protocol.upper():
        kw["broker_credentials"] = faust.SASLCredentials(
            username=s.sasl_username, password=s.sasl_password.get_secret_value(), ssl_context=ctx,
            mechanism=s.sasl_mechanism)
    elif ctx is not None:
        kw["broker_credentials"] = faust.SSLCredentials(ctx)
    return kw


def faust_app(s: Settings, app_id: str, *, worker_patches: bool = True) -> faust.App:
    """A Faust app with the worker's settings and its departures from Faust (below):
    the fetch wait and, with ``worker_patches``, the inline hand-over of fetched records (without: Faust's
    own, the bare loop of ``mmr bench service``)."""
    patch_fetch_wait(s.fetch_max_wait_ms, s.fetch_idle_wait_ms)
    if worker_patches:
        patch_inline_delivery()
    return faust.App(app_id, **faust_kwargs(s))


def patch_fetch_wait(ms: int, idle_ms: int = 0) -> None:
    """Make Faust's consumer long-poll ``ms`` instead of its hard-coded 1,500 ms while records
    arrive, and up to ``idle_ms`` while none do (``FetchWaits``; ``idle_ms <= ms``: ``ms`` always).

    Why short: Tansu answers a fetch spanning several partitions, some empty, only when the wait
    expires, and the worker reads three topics. Why longer when nothing arrives: every fetch costs
    the worker and the broker CPU; on Kafka a fetch returns as soon as data arrives anyway."""
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
    """The long-poll of a consumer's next fetch: ``busy_ms`` after a fetch that brought records (or an
    error), doubled after each one that brought nothing, up to ``idle_ms``. Doubling, not jumping: in
    light traffic an empty fetch is usually followed by one that brings something."""

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
    fetch (``_fetch_max_wait_ms``) from whether the last one brought anything (``_proc_fetch_request``)."""
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
    """Awaitable that finishes a coroutine which already ran up to its first suspension, where it
    yielded ``first``: the awaiting task waits on that, then everything sent or thrown in is forwarded."""

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
    ``mmr_deliveries_waited_total``."""

    waited = 0


def _waits_on(coro: object, event: object) -> bool:
    """Is ``coro`` an unstarted ``event.wait()``?"""
    frame = getattr(coro, "cr_frame", None)
    return frame is not None and frame.f_locals.get("self") is event


def patch_inline_delivery() -> None:
    """Hand each fetched message to the agent inline, not through four tasks.

    Why: Faust's fetch loop delivers every message with ``wait_first(on_message(message),
    suspend_flow.wait())``, so that a rebalance abandons a delivery stuck on a full buffer, and
    ``wait_first`` makes four tasks and an ``asyncio.wait`` per message on the thread that also
    rates (BENCHMARKS.md, "Faust delivery"). Almost always ``on_message`` finishes without
    suspending, so, when the flow is not suspended and the consumer neither stopping nor crashed,
    its first step runs inline; if it suspends, the rest goes through Faust's own ``wait_first``, so a
    rebalance still abandons it. Messages, order and offsets are the same either way. After an inline
    delivery the loop yields once, as ``asyncio.wait`` did, so the agent runs between records."""
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

    Why aiokafka's consumer (on Faust's consumer thread, which owns it) and not Faust's
    ``pause_partitions``: Faust's empties the set a waiting fetch holds by reference, and the records
    that fetch returns are dropped after aiokafka counted them consumed (lost until a restart).
    aiokafka's ``pause`` keeps the position, so ``resume`` fetches from the first record not handed on."""
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
