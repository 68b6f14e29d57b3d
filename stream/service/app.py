"""The Faust application: one agent over batches of the three input topics' records, publishing
ratings and dead letters (the logic is stream.service.processor's; this module only wires it).

Per batch, in order (``BatchPipeline``, so batch N+1 is rated while batch N's ratings travel):
Redis commit → outputs handed to the producer → the broker acks them → the input records held
until their commit is on Redis's disk (``stream.service.durability``) → the records acked. A crash
anywhere re-delivers the batch and the Redis step applies nothing twice; a Redis restart makes the
worker rate every batch not yet acked again, in order (``Service.rewind``). docs/operator.md,
"Delivery semantics", states the guarantees.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import contextvars
import functools
import logging
import os
import signal
import socket
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import faust
from faust.types import TP
from prometheus_client import Gauge

from stream.events.model import RatingOutput
from stream.runtime import thread_names
from stream.service import http, pool_api
from stream.service.config import Settings
from stream.service.delivery import BatchDelivery
from stream.service.durability import Durability
from stream.service.faust_app import DeliveryStats, faust_app, pause_fetching
from stream.service.halts import Halt
from stream.service.metrics import Metrics
from stream.service.pipeline import BatchPipeline
from stream.service.processor import BatchResult, DeadLetter, Message, Processor
from stream.service.publish import Delivery, Publisher
from stream.service.read_api import ReadApi, RedisPing
from stream.service.topics import OutputTopics
from stream.state.fence import ServerFence, StoreRestarted
from stream.state.marks import LostWrites
from stream.state.redis_client import CredentialsRefused, StoreUnavailable, connect_blocking, connect_error
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)


@dataclass
class Service:
    """Everything the agent, the timer and the HTTP server share."""

    settings: Settings
    app: faust.App
    store: RedisStore
    executor: ThreadPoolExecutor
    metrics: Metrics
    processor: Processor
    positions: dict[tuple[str, int], int] = field(default_factory=dict)  # next offset per input partition
    started: float = field(default_factory=time.time)
    batches_done: int = 0
    pipeline: BatchPipeline[Message, list[Any]] = field(init=False)
    #: batches done but not yet acknowledged to Kafka: their commits may not be on Redis's disk yet
    durability: Durability[list[Any], Message] = field(init=False)
    _rewinding: asyncio.Task[None] | None = None
    rewinds: int = 0  # Redis restarts met (batches rated again from the last durable point)
    _delivery: Delivery | None = None  # the last batch's outputs (``stream.service.publish``)
    #: publishes the outputs until the broker holds them; ``topics`` checks that its topics are there
    publisher: Publisher = field(init=False)
    topics: OutputTopics | None = None
    #: the HTTP API's listening socket, bound when the app is built (``http.bind``)
    http_socket: socket.socket | None = None
    #: the Faust app has started (``/healthz`` answers 503 "starting" before: the warm-up, joining)
    running: bool = False
    _http_runner: http.HttpServer | None = None
    #: the HTTP API's own Redis clients (``http_clients``): its reads, and the health probes' ping
    http_store: RedisStore | None = None
    http_health: RedisPing | None = None
    #: fetching of the input partitions is paused while Redis is unavailable (``pause_fetch``)
    fetch_paused: bool = False
    _input_topics: frozenset[str] = frozenset()
    _pausing: asyncio.Lock = field(default_factory=asyncio.Lock)
    #: per assigned input partition: since when (monotonic s) this worker holds it, and its last known lag
    owned_since: dict[tuple[str, int], float] = field(default_factory=dict)
    lags: dict[tuple[str, int], int] = field(default_factory=dict)
    #: the worker stops: the housekeeping timer does nothing more (``stop_housekeeping``)
    stopping: bool = False
    _tick: asyncio.Future[None] | None = None  # the housekeeping tick under way
    #: the state marks: what a restarted Redis must hold of what was acknowledged (stream.state.marks)
    lost_writes: LostWrites | None = None
    #: why the worker stops by itself (Redis refused the credentials): readiness answers it until the end
    fatal: str | None = None
    #: stops the process (``fatal``): SIGTERM, so that Faust stops as on any stop; tests swap it
    on_fatal: Callable[[], None] = field(default=lambda: os.kill(os.getpid(), signal.SIGTERM))
    #: the latest dead letters handed to the producer (the console's health page: stream.service.pool_api)
    recent_dead: collections.deque[DeadLetter] = field(
        default_factory=lambda: collections.deque(maxlen=pool_api.RECENT_DEAD))

    def __post_init__(self) -> None:
        self._input_topics = frozenset(self.settings.input_topics())
        self.processor.on_store_down = self.pause_fetch
        self.metrics.inflight.set_function(lambda: self.pipeline.inflight)
        self.pipeline = BatchPipeline(self.rate, self.done, max_inflight=self.settings.max_inflight,
                                      max_inflight_bytes=self.settings.max_inflight_bytes,
                                      max_merge=self.settings.take_max, max_merge_bytes=self.settings.max_merge_bytes,
                                      size=lambda m: len(m.value), on_error=self.app.crash,
                                      on_queued=self.metrics.stage.labels("queued").observe)
        self.durability = Durability(self.settings.redis_durable_after_s, self._ack, self._alive)
        if self.store.fence is not None:
            self.store.fence.on_trip.append(self.schedule_rewind)
        self.publisher = Publisher(self.settings, lambda: self.app.producer._ensure_producer(),  # type: ignore[attr-defined]
                                   self.metrics, self.topics)
        self.processor.halts.on_halt = self.pause

    @property
    def http_port(self) -> int | None:
        """The HTTP API's bound port (None before ``create_app`` bound it)."""
        return None if self.http_socket is None else http.bound_port(self.http_socket)

    def read_api(self) -> ReadApi:
        port = self.http_port
        return ReadApi(self.store if self.http_store is None else self.http_store, self.metrics.registry,
                       self.executor, 0 if port is None else port, lambda: self.running,
                       health=self.http_health, concurrency=self.settings.http_redis_connections,
                       halted=self.processor.halts.listing, blocked=self.not_rating,
                       token=self.settings.http_bearer_token(), max_requests=self.settings.http_max_requests,
                       cpu_share=self.settings.http_cpu_share, status=functools.partial(pool_api.worker_status, self))

    async def serve_http(self) -> None:
        """Serve the HTTP API on the bound socket (once; the worker starts it before its warm-up)."""
        if self._http_runner is None and self.http_socket is not None:
            server = http.HttpServer(self.read_api(), self.http_socket)
            await server.start()
            self._http_runner = server

    async def close(self) -> None:
        """Release the HTTP server, the Redis clients and the threads once Faust's services stopped: a worker
        stopped in a process that goes on (a program that embeds it, the tests) must leave none behind."""
        if self._http_runner is not None:
            runner, self._http_runner = self._http_runner, None
            await runner.cleanup()  # closes the listening socket
        elif self.http_socket is not None:
            self.http_socket.close()  # bound, never served
        if self.http_health is not None:
            await self.http_health.close()
        if self.http_store is not None:
            await self.http_store.close()
        await self.store.close()
        if self.topics is not None:
            await self.topics.close()
        self.executor.shutdown(wait=False, cancel_futures=True)

    async def rate(self, msgs: list[Message]) -> list[Awaitable[Any]]:
        """The pipeline's first stage: rate the batch, its outputs handed on as its steps commit
        (``_publish``). Returns once the batch is committed."""
        started = time.perf_counter()
        before, delivery = self._delivery, Delivery()
        self._delivery = delivery
        steps: asyncio.Queue[Sequence[RatingOutput] | tuple[BatchResult, float]] = asyncio.Queue()
        produced = min((m.timestamp for m in msgs if m.timestamp), default=None)
        publishing = asyncio.ensure_future(self._publish(steps, before, delivery, produced))

        try:
            res = await self.processor.start(msgs, safe=True, hand=steps.put_nowait)
        except BaseException:  # cancelled (a rewind, a stop) or failed: its ratings not handed yet stay unpublished
            publishing.cancel()
            if not delivery.handed.done():
                delivery.handed.set_result(None)
            raise
        done_at = time.perf_counter()
        self.metrics.stage.labels("rated").observe(done_at - started)
        self.batches_done += 1
        steps.put_nowait((res, done_at))
        if self.lost_writes is None:
            return [publishing]
        # the batch's commits all landed: its marks go to Redis before it is held (stream.state.marks)
        offsets = self.lost_writes.committed(msgs, res.gens)
        return [publishing, asyncio.ensure_future(self.lost_writes.mark(offsets))]

    async def _publish(self, steps: asyncio.Queue[Sequence[RatingOutput] | tuple[BatchResult, float]],
                       before: Delivery | None, delivery: Delivery, produced: float | None) -> None:
        """Hand one batch's outputs to the producer after the batch before it handed its own (input order):
        each step's ratings once it is committed (``steps``; last, the batch's result), so that a large take
        is handed while its later steps are rated instead of holding the event loop at its end; the dead
        letters once the batch is. Returns once the broker holds them all (``Publisher.settle``)."""
        pub = self.publisher
        try:
            try:
                if before is not None:
                    await before.handed
                if self.topics is not None and await self.topics.ensure(time.monotonic() - TOPICS_FRESH_S) is not None:
                    pub.retries.inc()  # a topic was missing: created again before this batch's outputs go out
                while True:
                    part = await steps.get()
                    if isinstance(part, tuple):
                        break
                    await pub.hand(delivery, part)
                res, done_at = part
                self.recent_dead.extend(res.dead)
                await pub.hand_dead(delivery, res.dead)
                if produced is not None:  # clamped: the producer's clock may run ahead of ours
                    self.metrics.input_age.observe(max(0.0, time.time() - produced))
            finally:
                if not delivery.handed.done():
                    delivery.handed.set_result(None)
            await pub.settle(delivery, before)
        finally:
            if not delivery.done.done():  # cancelled before it settled: the batch after it must not wait
                delivery.done.set_result(None)
        self.metrics.stage.labels("published").observe(time.perf_counter() - done_at)

    def done(self, tokens: list[list[Any]], msgs: list[Message]) -> None:
        """The pipeline's last stage, after the broker acked the outputs: hold the input records until their
        commits are on Redis's disk (``stream.service.durability``), which acks them. Records of a halted
        partition from its halt on are never acked: its committed offset stays at the offending message."""
        halts = self.processor.halts
        if halts:
            tokens = [[r for r in records if not halts.holds(r.topic, r.partition, r.offset)] for records in tokens]
            msgs = [m for m in msgs if not halts.held(m)]
        self.durability.hold(tokens, msgs)
        self.metrics.messages_done.inc(len(msgs))
        self.metrics.done_at.set(time.time())
        for m in msgs:
            self.positions[(m.topic, m.partition)] = m.offset + 1

    def _ack(self, tokens: list[list[Any]]) -> None:
        consumer = self.app.consumer
        for records in tokens:
            for record in records:
                record.ack(consumer)
            if self.lost_writes is not None:
                self.lost_writes.acked(records)

    async def _alive(self) -> None:
        """Answers only when the server that took the held commits is still up (the fenced ``ping``)."""
        await self.store.ping()
        if self.store.fence is not None and self.store.fence.tripped:
            raise StoreRestarted("Redis restarted")

    def schedule_rewind(self) -> None:
        """The fence tripped (Redis restarted): rewind, as a task of its own, until the fence is not tripped
        (Redis may restart again while a rewind runs)."""
        if self._rewinding is None or self._rewinding.done():
            # a context of its own: not the one of the step whose connection tripped the fence, which marks
            # its work as begun before the restart (stream.state.fence), nor inherited by the stages it starts
            self._rewinding = asyncio.get_running_loop().create_task(self._rewind_while_tripped(),
                                                                     context=contextvars.Context())

    async def _rewind_while_tripped(self) -> None:
        fence = self.store.fence
        while fence is not None and fence.tripped:
            await self.rewind()

    async def rewind(self) -> None:
        """Redis restarted and may have lost commits it acknowledged: rate again, in their first order, every
        batch not known to be on its disk (those held, then those in the pipeline) before anything newer.
        The restarted Redis kept a prefix of the commits: the dedup skips it (re-publishing its players'
        ratings) and the rest is applied again. Outputs of batches already rated are published first
        (``BatchPipeline.reset``), so each version a commit made reaches the topic even when Redis kept it;
        the pipeline admits nothing new meanwhile. What mirrors Redis in memory is dropped first."""
        held = self.durability.take()
        pending = await self.pipeline.reset()
        await self.processor.settle()  # no step of a batch taken back outlives it (stream.state.fence)
        self.processor.reset()
        self._delivery = None
        batches = [(msgs, tokens) for tokens, msgs in held] + pending
        self.rewinds += 1
        log.warning("Redis restarted: rating %d batch(es) (%d messages) again from the last durable point",
                    len(batches), sum(len(m) for m, _ in batches))
        if self.store.fence is not None:
            if self.lost_writes is not None:  # a server that lost acknowledged commits: wait for a rebuild
                self.lost_writes.rewound()
                await self.lost_writes.wait_until_whole(*self.state_lost_whole())
            self.store.fence.accept()
        await self.pipeline.resume(batches)

    def state_lost_whole(self) -> tuple[Callable[[], Awaitable[None]], Callable[[], Awaitable[None]]]:
        """What Redis losing acknowledged writes does, and its rebuild undoes (stream.state.marks): as Redis
        being unavailable, nothing is rated, fetching is paused and round expiry skipped (``store_down``)."""
        return (functools.partial(self.processor.set_store_down, True),
                functools.partial(self.processor.set_store_down, False))

    async def earliest_offsets(self, tps: list[tuple[str, int]]) -> dict[tuple[str, int], int]:
        """The broker's earliest offset of each input partition (stream.state.marks, ``taken_up``)."""
        got = await self.app.consumer.earliest_offsets(*[TP(t, p) for t, p in tps])
        return {(tp[0], tp[1]): int(off) for tp, off in got.items()}

    def credentials_refused(self, exc: CredentialsRefused) -> None:
        """Redis refused the worker's credentials (changed under it): one ERROR line, readiness says it, and
        the worker stops, because a running worker cannot learn new credentials and retrying would only hide
        the fault behind an endless back-off; a restart reads them again."""
        if self.fatal is not None:
            return
        err = connect_error(exc.__cause__ or exc, self.settings.redis_url)
        what = str(err) if err is not None else str(exc)
        self.fatal = (f"{what}; the worker stops (waiting does not fix refused credentials): start it again with "
                      "the right ones (REDIS_URL, MMR_REDIS_USERNAME, MMR_REDIS_PASSWORD or their *_FILE)")
        log.error("%s", self.fatal)
        self.on_fatal()

    def not_rating(self) -> str | None:
        """Why the worker rates nothing now (readiness answers 503 with it), or None."""
        if self.fatal is not None:
            return self.fatal
        if self.lost_writes is not None and self.lost_writes.reason is not None:
            return self.lost_writes.reason
        if self.topics is not None and self.topics.changed is not None:
            return self.topics.changed
        if self.publisher.waiting:
            return (f"the broker has not acknowledged the outputs of {self.publisher.waiting} batch(es); "
                    "sending them again with backoff")
        if self.processor.store_down:
            return ("Redis unavailable: the batch under way is retried with back-off and fetching is paused "
                    "(mmr_store_unavailable, mmr_store_retries_total)")
        return None

    async def stop_housekeeping(self) -> None:
        """Start no housekeeping tick from now on, and wait (within ``STOP_GRACE_S``) for the one under way
        while the producer still runs: Faust cancels its timers only after stopping the producer, and a
        sweep of timed-out rounds would hand their dead letters to a stopped producer. A sweep cancelled
        loses none: a slice's dead letters are on the broker before it is marked done in Redis."""
        self.stopping = True
        tick = self._tick
        if tick is None:
            return
        done, _ = await asyncio.wait({tick}, timeout=STOP_GRACE_S)
        if not done:
            tick.cancel()
            await asyncio.gather(tick, return_exceptions=True)
            log.warning("stopping: the sweep of timed-out rounds did not end within %.0f s; the rounds it did not "
                        "mark done stay open in Redis, for the partitions' next owner", STOP_GRACE_S)

    async def stop_rating(self) -> None:
        """Stop the housekeeping and the pipeline before Faust stops its producer (``on_before_shutdown``):
        the pipeline's tasks are not Faust services and would go on publishing to a stopped producer.
        Outputs handed already go out (within ``STOP_GRACE_S``); the batches not done stay unacknowledged."""
        await self.stop_housekeeping()
        if self._rewinding is not None:
            self._rewinding.cancel()
            await asyncio.gather(self._rewinding, return_exceptions=True)
        try:
            async with asyncio.timeout(STOP_GRACE_S):
                await self.pipeline.reset()
        except TimeoutError:
            log.warning("stopping: outputs not on the broker after %.0f s; their inputs stay unacknowledged",
                        STOP_GRACE_S)

    async def housekeeping(self) -> None:
        """One tick of the housekeeping timer: the lag gauge, the fetch pause while Redis is unavailable,
        and the rounds that timed out dead-lettered. None once the worker stops (``stop_housekeeping``)."""
        if self.stopping:
            return
        self._tick = asyncio.ensure_future(self._housekeep())
        try:
            await self._tick
        finally:
            self._tick = None

    async def _housekeep(self) -> None:
        self.update_lag()
        if self.topics is not None:
            await self.topics.check_partitions()
        if self.processor.store_down:
            await self.pause_fetch(True)  # partitions assigned since the pause (a rebalance) too
        try:
            dead = [] if self.processor.store_down else await self.processor.expire(
                sources=self.round_sources(), stop=lambda: self.stopping, publish=self.publisher.dead_letters)
        except StoreUnavailable as exc:  # a timer that raises is never run again: retried on the next tick
            log.warning("expiring rounds: %r; retrying", exc)
            dead = []
        self.recent_dead.extend(dead)
        await self.publisher.dead_letters(dead)
        if self.lost_writes is not None and not self.processor.store_down:
            await self.lost_writes.flush()  # the pools' counters no batch carried (stream.state.marks)

    def pause(self, halt: Halt) -> None:
        """Stop fetching a halted partition (records fetched already are held back by the processor).
        Faust resumes it when the partition is revoked."""
        self.app.consumer.pause_partitions([TP(halt.topic, halt.partition)])

    async def pause_fetch(self, paused: bool) -> None:
        """Pause (or resume) fetching the assigned input partitions while Redis is unavailable, so that the
        consumer does not fill memory with messages that cannot be rated (``faust_app.pause_fetching``:
        offsets and the group untouched). One call at a time; a call whose ``paused`` is no longer the
        processor's state when its turn comes does nothing (a pause that waited behind a resume must not win)."""
        async with self._pausing:
            if paused != self.processor.store_down:
                return
            try:
                async with asyncio.timeout(5.0):  # the consumer thread answers within a fetch's wait
                    n = await pause_fetching(self.app, self._input_topics, paused)
            except Exception as exc:  # not started, or stopping: nothing to pause (the batch itself is retried)
                log.warning("could not %s fetching: %r", "pause" if paused else "resume", exc)
                return
            self.metrics.fetch_paused.set(n if paused else 0)
            if paused != self.fetch_paused:
                log.warning("%s fetching %d input partitions (Redis %s)", "pausing" if paused else "resuming", n,
                            "unavailable" if paused else "answers again")
            self.fetch_paused = paused

    def update_lag(self) -> None:
        """Consumer lag gauge: broker highwater minus the next offset we will handle."""
        try:
            consumer = self.app.consumer
            assignment = consumer.assignment()
        except Exception:  # not started / rebalancing: keep the last values
            return
        for tp in assignment:
            hw = consumer.highwater(tp)
            pos = self.positions.get((tp.topic, tp.partition))
            if hw is not None and pos is not None:
                self.lags[(tp.topic, tp.partition)] = max(hw - pos, 0)
                self.metrics.lag.labels(tp.topic, str(tp.partition)).set(max(hw - pos, 0))

    def disown(self, tps: Iterable[tuple[str, int]]) -> None:
        """Partitions revoked: their hold time, positions and ``mmr_consumer_lag`` are dropped (a lag left
        at its last value would be summed with the new owner's by every dashboard)."""
        for tp in tps:  # (topic, partition) pairs: Faust's TP or plain tuples
            key = (tp[0], tp[1])
            self.owned_since.pop(key, None)
            self.lags.pop(key, None)
            self.positions.pop(key, None)
            if self.lost_writes is not None:
                self.lost_writes.forget([key])
            with contextlib.suppress(KeyError):  # never reported by this worker
                self.metrics.lag.remove(key[0], str(key[1]))

    def round_sources(self) -> list[str]:
        """The input partitions ("topic/partition") whose open rounds this worker times out: assigned to it
        (no two workers expire one pool's rounds), held for at least the round timeout and without lag (a
        completion may wait in the partition), and not halted."""
        try:
            assignment = self.app.consumer.assignment()
        except Exception:  # not started / rebalancing: nothing this tick
            return []
        now = time.monotonic()
        owned = {(tp.topic, tp.partition) for tp in assignment if tp.topic in self._input_topics}
        self.disown([tp for tp in self.owned_since if tp not in owned])
        halts = self.processor.halts
        out = []
        for tp in sorted(owned):
            since = self.owned_since.setdefault(tp, now)
            if (now - since >= self.settings.round_timeout_s and not self.lags.get(tp)
                    and not halts.holds(tp[0], tp[1], 2**62)):
                out.append(f"{tp[0]}/{tp[1]}")
        return out


#: seconds between checks that held batches are on Redis's disk (stream.service.durability)
DURABLE_TICK_S = 0.25
#: a listing of the output topics at most this old answers for a batch about to be handed over (``_publish``)
TOPICS_FRESH_S = 0.1
#: seconds a stopping worker waits for the outputs it handed to the producer (``Service.stop_rating``)
STOP_GRACE_S = 10.0


def set_numba_threads(n: int) -> None:
    """Threads of numba's parallel kernels called from *this* thread (the setting is per thread);
    0 keeps numba's default (all cores)."""
    if n <= 0:
        return
    import numba

    numba.set_num_threads(max(1, min(n, numba.config.NUMBA_NUM_THREADS)))  # type: ignore[attr-defined]


def http_clients(s: Settings, cluster: bool) -> tuple[RedisStore, RedisPing]:
    """The HTTP API's Redis clients, apart from the pipeline's so that neither starves the other: a read
    store of ``MMR_HTTP_REDIS_CONNECTIONS`` connections, and the health probes' ping on a client of its own."""
    reads = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, cluster=cluster, history_limit=s.history_limit,
                                max_connections=s.http_redis_connections, client_name=s.redis_client_name("reads"),
                                **s.redis_kwargs())
    health = RedisPing(lambda: connect_blocking(s.redis_url, cluster, socket_connect_timeout=http.HEALTH_TIMEOUT_S,
                                                     socket_timeout=http.HEALTH_TIMEOUT_S,
                                                     client_name=s.redis_client_name("health"), **s.redis_kwargs()))
    return reads, health


def create_app(s: Settings) -> Service:
    """Build the Faust app, its agent and timers around one Processor, and bind the HTTP API's
    socket (``http.HttpPortTaken`` if the configured port is in use)."""
    sock = http.bind(s.http_host, s.http_port)
    app = faust_app(s, s.app_id)
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, seen_max_ids=s.seen_max_ids, cluster=s.redis_cluster,
                               history_limit=s.history_limit,
                               fence=ServerFence(), client_name=s.redis_client_name("rating"),
                               **s.replication_kwargs(), **s.redis_kwargs())
    # the numba kernels run on one thread of their own (their parallel kernels: MMR_NUMBA_THREADS)
    executor = thread_names.named_executor(thread_names.NUMBA, set_numba_threads, (s.numba_threads,))
    metrics = Metrics()
    metrics.id_index_bytes.set_function(store.ids_nbytes)
    metrics.count_from("mmr_deliveries_waited", "Fetched messages whose hand-over to the agent had to wait "
                       "(the batch channel full: the agent is behind)", lambda: DeliveryStats.waited)
    svc = Service(s, app, store, executor, metrics, Processor(s, store, executor, metrics), http_socket=sock,
                  topics=OutputTopics(s))
    Gauge("mmr_inputs_held", "Input messages rated and published but not yet acknowledged to Kafka: their Redis "
          "commits may not be on Redis's disk yet (MMR_REDIS_DURABLE_AFTER_S)",
          registry=metrics.registry).set_function(lambda: svc.durability.held_messages)
    metrics.count_from("mmr_output_topics_recreated", "Output topics found missing on the broker and created "
                       "again (the outputs sent since were sent again)",
                       lambda: svc.topics.recreated if svc.topics else 0)
    metrics.count_from("mmr_redis_restarts", "Redis restarts met by the worker (a new run_id): each made it rate "
                       "again every batch not yet acknowledged", lambda: svc.rewinds)
    store.on_refused = svc.credentials_refused
    metrics.count_from("mmr_http_rested_seconds", "Seconds the HTTP API's thread rested to stay within "
                       "MMR_HTTP_CPU_SHARE of a CPU (requests waited meanwhile)",
                       lambda: svc._http_runner.cpu.rested if svc._http_runner and svc._http_runner.cpu else 0.0)
    svc.http_store, svc.http_health = http_clients(s, store.is_cluster)
    svc.lost_writes = LostWrites(store, svc.http_store.r)
    Gauge("mmr_redis_lost_writes_partitions", "Input partitions whose acknowledged records a restarted Redis lost "
          "the commits of (stream.state.marks): while not 0 nothing is rated until the state is rebuilt "
          "(mmr rebuild)", registry=metrics.registry).set_function(
              lambda: 0 if svc.lost_writes is None else svc.lost_writes.lost_partitions)
    Gauge("mmr_redis_lost_writes_pools", "Pools whose acknowledged commits a restarted Redis (Cluster) node lost "
          "(stream.state.marks): while not 0 nothing is rated until the state is rebuilt (mmr rebuild)",
          registry=metrics.registry).set_function(lambda: 0 if svc.lost_writes is None else svc.lost_writes.lost_pools)
    Gauge("mmr_http_port", "The TCP port the worker's HTTP API listens on (MMR_HTTP_PORT 0: chosen at start)",
          registry=metrics.registry).set(http.bound_port(sock))

    fetched = metrics.stage.labels("fetched")

    async def take(records: list[Any]) -> None:
        """One batch of Faust messages into the pipeline, which acks them when done."""
        msgs = [Message(r.topic, r.partition, r.offset, r.value or b"", None, r.timestamp) for r in records]
        oldest = min((m.timestamp for m in msgs if m.timestamp), default=None)
        if oldest is not None:  # clamped: the producer's clock may run ahead of ours
            fetched.observe(max(0.0, time.time() - oldest))
        svc.processor.predecode(msgs)  # while the pipeline's previous batch waits on numba or Redis
        if svc.lost_writes is not None:  # partitions just got: their committed offsets held by Redis? (waits if not)
            await svc.lost_writes.taken_up(msgs, svc.earliest_offsets, *svc.state_lost_whole())
        await svc.pipeline.submit(msgs, records)

    delivery = BatchDelivery(app, set(s.input_topics()), max_batch=s.take_max, within=s.take_within,
                             max_batch_bytes=s.take_max_bytes)
    delivery.serve(take, name="mmr-ratings-agent")
    metrics.count_from("mmr_delivery_dropped", "Fetched records dropped before rating because partitions "
                       "were revoked (Faust fetches them again from the committed offset)",
                       lambda: delivery.dropped)

    async def _revoked(sender: Any, *args: Any, **kwargs: Any) -> None:
        delivery.clear()  # records not yet handed to the agent: Faust fetches them again
        await svc.pipeline.drain()  # finish (commit, publish, ack) what this worker already took
        svc.processor.reset()  # what mirrors Redis: another worker may write these partitions' pools from now on
        # a halted partition's next owner (this worker again, or another) starts at its committed
        # offset, the offending message, and halts there again if it runs the same code
        svc.processor.halts.clear()
        svc.durability.take()  # not acknowledged: whoever takes the partitions rates them again (dedup)
        svc.disown(args[0] if args else kwargs.get("revoked", ()))

    app.on_partitions_revoked.connect(_revoked)  # type: ignore[arg-type]  # mode's stub is stricter than its call

    async def _stopping(sender: Any, **kwargs: Any) -> None:
        await svc.stop_rating()

    app.on_before_shutdown.connect(_stopping)  # type: ignore[arg-type]  # as on_partitions_revoked above

    app.async_exit_stack.push_async_callback(svc.close)  # run at the end of the app's stop

    @app.timer(interval=1.0)
    async def housekeeping() -> None:
        await svc.housekeeping()

    @app.timer(interval=DURABLE_TICK_S)
    async def durable() -> None:
        await svc.durability.tick()

    @app.task
    async def http_server() -> None:
        svc.running = True
        await svc.serve_http()

    return svc
