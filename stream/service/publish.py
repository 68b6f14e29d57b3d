"""Publishing a batch's outputs (ratings, dead letters) until the broker holds them.

A produce that fails is the infrastructure's fault, never the batch's: its outputs are kept
(``Delivery``) and handed to the producer again, with backoff and jitter, for as long as the broker
refuses them; the batch's input is not acknowledged meanwhile and the worker never exits on it
(``mmr_publish_waiting``, readiness 503). Ratings reach the topic in input order even when a batch is
sent again: the batches after it are sent again too, after it (``settle``), so the last version of
each player on the compacted topic is the newest. A batch counts as published only once its output
topics are on the broker (``OutputTopics``; a missing one is created again and the batch sent again).
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from aiokafka.partitioner import DefaultPartitioner
from prometheus_client import Counter, Gauge

from stream.events.model import RatingOutput, rating_key, rating_value
from stream.service.config import Settings
from stream.service.messages import DeadLetter
from stream.service.metrics import Metrics
from stream.service.topics import OutputTopics

log = logging.getLogger(__name__)

#: ratings handed to the producer between two yields of the event loop (``Publisher.ratings``)
SEND_SLICE = 4096
#: seconds between two attempts of a batch the broker refused: doubling from the first up to the second,
#: each drawn at random between half and the whole of it (jitter: workers that lost the same broker do
#: not all come back at once)
BACKOFF_S = (0.1, 5.0)

_PARTITIONER = DefaultPartitioner()


@dataclass(eq=False)
class Delivery:
    """One batch's outputs, kept until the broker holds them: ``parts`` (each committed step's ratings)
    and ``dead``; ``futures`` of their last hand-over, ``sent`` when that began (``Publisher.clock``),
    ``handed`` once all were handed the first time (the worker's next batch hands its own after that),
    ``done`` once ``settle`` ended (both resolved, never failed)."""

    parts: list[Sequence[RatingOutput]] = field(default_factory=list)
    dead: list[DeadLetter] = field(default_factory=list)
    futures: list[Awaitable[Any]] = field(default_factory=list)
    sent: int = 0
    handed: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())
    done: asyncio.Future[None] = field(default_factory=lambda: asyncio.get_running_loop().create_future())

    def ratings(self) -> int:
        return sum(map(len, self.parts))


class Publisher:
    """See the module docstring. ``producer()`` is the aiokafka producer (Faust's, started by Faust)."""

    def __init__(self, settings: Settings, producer: Callable[[], Any], metrics: Metrics,
                 topics: OutputTopics | None = None, backoff: tuple[float, float] = BACKOFF_S) -> None:
        self.settings = settings
        self.producer = producer
        self.metrics = metrics
        self.topics = topics
        self.backoff = backoff
        self.clock = 0  # hand-overs begun (``Delivery.sent``)
        self.waiting = 0  # deliveries the broker refused and that wait to be sent again
        self._spell = (0.0, 0)  # since when (monotonic s) deliveries wait, and the retries counted by then
        self._last: Delivery | None = None  # the delivery handed last
        self._hold: Delivery | None = None  # no first hand-over until it is done (``_begin``)
        self._partition_cache: dict[bytes, int] = {}  # rating key -> partition
        self._cache_parts: list[int] = []
        r = metrics.registry
        Gauge("mmr_publish_waiting", "Batches whose outputs the broker refused and that wait to be sent again "
              "(their input is not acknowledged meanwhile)", registry=r).set_function(lambda: self.waiting)
        self.retries = Counter("mmr_publish_retries", "Batches (or dead letters) handed to the producer again after "
                               "the broker refused them or lost their topic", registry=r)

    async def hand(self, d: Delivery, part: Sequence[RatingOutput]) -> None:
        """Hand a committed step's ratings of ``d`` to the producer (the first time)."""
        await self._begin(d)
        d.parts.append(part)
        await self._send(d, [part], [])

    async def hand_dead(self, d: Delivery, dead: list[DeadLetter], batch: bool = True) -> None:
        """Hand ``d``'s dead letters to the producer (the first time); ``batch``: of a batch's delivery."""
        await self._begin(d, batch)
        d.dead += dead
        await self._send(d, [], dead)

    async def settle(self, d: Delivery, before: Delivery | None = None) -> None:
        """Until the broker holds every output of ``d`` (sent after those of ``before``, the batch before
        it), sending them again as long as it does not. ``d.done`` is resolved at the end, however it ends."""
        delay, waited = self.backoff[0], False
        try:
            while True:
                error = await self._failure(d.futures)
                if error is None and self.topics is not None:
                    error = await self.topics.ensure(since=time.monotonic())  # a listing begun after the acks
                follow = False
                if error is None and before is not None:
                    await before.done
                    follow = before.sent > d.sent  # the batch before was sent again after this one: follow it
                if error is None and not follow:
                    break
                if self._hold is None or self._hold.done.done():
                    self._hold = self._last  # the batches handed so far are sent again before any new one
                self.retries.inc()
                if error is not None:
                    if not waited:
                        waited = True
                        self._wait_begins(error)
                    await asyncio.sleep(random.uniform(delay / 2, delay))
                    delay = min(2 * delay, self.backoff[1])
                    if self.topics is not None:
                        await self.topics.ensure()  # creates a missing topic before the outputs go out again
                log.debug("batch of %d ratings, %d dead letters sent again: %s", d.ratings(), len(d.dead),
                          error or "the batch before it was sent again")
                d.sent = self._tick()
                d.futures = []
                await self._send(d, d.parts, d.dead)
            self.metrics.ratings_out.inc(d.ratings())
        finally:
            if waited:
                self._wait_ends()
            if not d.done.done():
                d.done.set_result(None)

    def _wait_begins(self, error: str) -> None:
        """A batch waits to be sent again; the first of a spell is logged (one line a spell, not one a batch)."""
        self.waiting += 1
        if self.waiting == 1:
            self._spell = (time.monotonic(), int(self.retries._value.get()))
            log.warning("the broker does not hold a batch's outputs (%s): sending them again with backoff; the "
                        "worker waits meanwhile, and acknowledges no input behind them", error)

    def _wait_ends(self) -> None:
        self.waiting -= 1
        if self.waiting == 0:
            began, retries = self._spell
            log.warning("the broker holds the outputs again: %d sending(s) again over %.1f s",
                        int(self.retries._value.get()) - retries, time.monotonic() - began)

    async def dead_letters(self, dead: list[DeadLetter]) -> None:
        """Publish ``dead`` (not of a batch: rounds that timed out) and wait until the broker holds them."""
        if dead:
            d = Delivery()
            await self.hand_dead(d, dead, batch=False)
            await self.settle(d)

    def _tick(self) -> int:
        self.clock += 1
        return self.clock

    async def _begin(self, d: Delivery, batch: bool = True) -> None:
        """Before ``d``'s first hand-over: wait while batches handed before a failure are sent again (a batch
        handed meanwhile would overtake them, and have to be sent again too, as long as batches keep coming)."""
        if d.sent:
            return
        while self._hold is not None and not self._hold.done.done():
            await asyncio.shield(self._hold.done)
        d.sent = self._tick()
        if batch:  # the dead letters of timed-out rounds are in no order with the batches
            self._last = d

    @staticmethod
    async def _attempt(handing: Awaitable[list[Awaitable[Any]]]) -> list[Awaitable[Any]]:
        """The futures of one hand-over; a hand-over the producer refused outright (a record too large, the
        producer not started) is a future that failed, so that ``settle`` sends it again."""
        try:
            return await handing
        except asyncio.CancelledError:
            raise
        except Exception as exc:
            failed: asyncio.Future[Any] = asyncio.get_running_loop().create_future()
            failed.set_exception(exc)
            return [failed]

    @staticmethod
    async def _failure(futures: Iterable[Awaitable[Any]]) -> str | None:
        """None once every future succeeded, else the first error (all of them waited for)."""
        results = await asyncio.gather(*futures, return_exceptions=True)  # a future cancelled by the producer too
        return next((repr(res) for res in results if isinstance(res, BaseException)), None)

    async def _send(self, d: Delivery, parts: Iterable[Sequence[RatingOutput]], dead: Iterable[DeadLetter]) -> None:
        """Hand ``parts`` and ``dead`` to the producer, the futures of their acks to ``d``."""
        for part in parts:
            d.futures += await self._attempt(self.ratings(part))
        for letter in dead:
            d.futures += await self._attempt(self._send_dead(letter))

    async def _send_dead(self, d: DeadLetter) -> list[Awaitable[Any]]:
        return [await self.producer().send(self.settings.topic_dead, d.encode(), key=d.key())]

    async def ratings(self, outputs: Sequence[RatingOutput]) -> list[Awaitable[Any]]:
        """Ratings as record batches built by aiokafka's ``BatchBuilder``, one per partition at a time; the
        futures of the broker's acks. Why: ``producer.send`` is a Python call and a future per message,
        ``BatchBuilder.append`` one C call. Partitions are aiokafka's murmur2 of the same key, as
        per-message sends would give; a key's partition is remembered."""
        topic = self.settings.topic_ratings
        kp = self.producer()
        parts = sorted(await kp.partitions_for(topic))
        futs: list[Awaitable[Any]] = []
        batches: dict[int, Any] = {}
        single = parts[0] if len(parts) == 1 else None
        cache = self._partition_cache
        if len(cache) > 1_000_000 or self._cache_parts != parts:  # bounded; reset when partitions change
            cache.clear()
            self._cache_parts = parts
        # (made as they are sent, between the yields below)
        messages = ((rating_key(o.pool, o.player), rating_value(o)) for o in outputs)
        for i, (key, value) in enumerate(messages):
            if i and not i % SEND_SLICE:  # let a step committing meanwhile go on (a step is ~25,000 ratings)
                await asyncio.sleep(0)
            if single is not None:
                p = single
            else:  # murmur2 is pure Python in aiokafka; players come back again and again
                p = cache.get(key, -1)
                if p < 0:
                    p = cache[key] = _PARTITIONER(key, parts, parts)
            b = batches.get(p)
            if b is None:
                b = batches[p] = kp.create_batch()
            if b.append(key=key, value=value, timestamp=None) is None:  # full: ship it, start another
                futs.append(await kp.send_batch(b, topic, partition=p))
                b = batches[p] = kp.create_batch()
                b.append(key=key, value=value, timestamp=None)
        for p, b in batches.items():
            futs.append(await kp.send_batch(b, topic, partition=p))
        return futs

