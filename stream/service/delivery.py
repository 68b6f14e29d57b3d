"""Batch delivery: the input topics' records reach the Faust agent as one event per batch.

Why: Faust hands every fetched record to an agent as its own ``Event`` (decoded, queued, tracked
by a ``Stream``, acked, re-collected by ``take_events``): for a worker that rates whole batches,
pure overhead on the thread that also runs the rating pipeline. So the conductor's per-record
callback is replaced (``BatchDelivery.on_message``): an input record joins the open batch, which
goes as *one* value on an in-memory Faust channel ``within`` seconds after its first record or at
``max_batch`` records or ``max_batch_bytes`` bytes. Other topics' records take Faust's own path.
Faust still runs the group, fetching, offsets, rebalances, flow control and the producer; the agent
acks each record itself once its outputs are on the broker.

Rebalances keep Faust's meaning: ``on_message`` waits while the flow is stopped, the channel is
one of the buffers Faust clears, ``clear()`` drops the open batch, and a record fetched before the
last rebalance (``generation_id``) is dropped as Faust's streams drop it.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any


class BatchDelivery:
    """See the module docstring. ``install`` before the app starts its consumer."""

    def __init__(self, app: Any, topics: set[str], *, max_batch: int, within: float, queue_batches: int = 1,
                 max_batch_bytes: int = 0) -> None:
        self.app = app
        self.topics = frozenset(topics)
        self.max_batch = max(1, max_batch)
        #: the open batch also closes at this many bytes of record values (0: no byte bound): with large
        #: records, ``max_batch`` alone would let a batch grow to gigabytes while the agent is behind
        self.max_batch_bytes = max(0, max_batch_bytes)
        self.within = within
        #: the channel the agent iterates, one value per batch. While ``queue_batches`` wait there the
        #: open batch keeps growing, up to ``max_batch``, where ``on_message`` (and Faust's fetch loop) waits
        self.channel = app.channel(maxsize=queue_batches + 1)
        self.queue_batches = max(1, queue_batches)
        self._queued = 0  # batches put on the channel that the agent has not taken yet
        self._room = asyncio.Event()
        self._open: list[Any] = []
        self._open_bytes = 0  # bytes of the open batch's record values
        self._nonempty = asyncio.Event()
        #: set while the agent waits for a batch (``agent_busy``/``agent_idle``): the timer closes the
        #: open batch only then (``run_timer``)
        self._idle = asyncio.Event()
        self._idle.set()
        self._lock = asyncio.Lock()  # one flush at a time: batches reach the channel in order
        self._faust_on_message: Callable[[Any], Awaitable[Any]] | None = None
        self.batches = 0  # batches put on the channel (observability, tests)
        self.dropped = 0  # records dropped by ``clear`` or as stale (re-fetched by Faust)

    @property
    def open_records(self) -> int:
        """Records in the open batch, not yet put on the channel (observability, tests)."""
        return len(self._open)

    def serve(self, on_batch: Callable[[list[Any]], Awaitable[None]], name: str | None = None) -> None:
        """``install``, the window timer as an app task, and the agent over ``channel`` handing each batch's
        current records (``current``) to ``on_batch``. Call it while building the app, before it starts."""
        self.install()
        self.app.task(self.run_timer)

        async def agent(stream: Any) -> None:
            async for batch in stream:
                self.agent_busy()
                try:
                    records = self.current(batch)
                    if records:
                        await on_batch(records)
                finally:
                    self.agent_idle()

        self.app.agent(self.channel, name=name)(agent)

    def install(self) -> None:
        """Route the input topics' records here instead of through Faust's conductor (which still
        subscribes them: ``aiter`` registers them, as an agent's stream would)."""
        conductor = self.app.topics
        if self._faust_on_message is None:
            self._faust_on_message = conductor.on_message
            conductor.on_message = self.on_message
        for name in sorted(self.topics):
            aiter(self.app.topic(name, key_type=bytes, value_type=bytes))  # subscribe

    async def on_message(self, message: Any) -> None:
        """Faust's per-record callback (runs on the event loop, in Faust's fetch loop)."""
        if message.topic not in self.topics:
            assert self._faust_on_message is not None
            await self._faust_on_message(message)
            return
        flow = self.app.flow_control
        if not flow.is_active():
            await flow.acquire()  # a rebalance: wait as Faust's own delivery does
        self._open.append(message)
        self._open_bytes += len(message.value or b"")
        if len(self._open) == 1:
            self._nonempty.set()
        if len(self._open) >= self.max_batch or (self.max_batch_bytes and self._open_bytes >= self.max_batch_bytes):
            await self.flush()

    async def flush(self) -> None:
        """Put the open batch on the channel once the agent has room for it: waiting before taking the
        batch, not after, lets it take in what arrives meanwhile instead of queueing small batches."""
        async with self._lock:
            while self._queued >= self.queue_batches:
                self._room.clear()
                await self._room.wait()
            batch, self._open = self._open, []
            self._open_bytes = 0
            self._nonempty.clear()
            if batch:
                self.batches += 1
                self._queued += 1
                await self.channel.put(batch)

    async def run_timer(self) -> None:
        """Close each batch ``within`` seconds after its first record, or later, once the agent has finished
        the batch it works on (a Faust app task). Why not while it works: a batch closed then only waits,
        and under a backlog becomes a small step of its own between full ones; left open, it takes in
        what arrives until the agent is free, and no record is taken later."""
        while True:
            await self._nonempty.wait()
            if self.within > 0:
                await asyncio.sleep(self.within)
            while not self._idle.is_set():  # checked again once woken: the agent may have taken the next batch
                await self._idle.wait()
            await self.flush()

    def agent_busy(self) -> None:
        """The agent took a batch and works on it (``serve``'s agent calls it)."""
        self._idle.clear()

    def agent_idle(self) -> None:
        """The agent has finished its batch and waits for the next one."""
        self._idle.set()

    def clear(self) -> None:
        """Drop the open batch (partitions revoked: Faust fetches those records again, and has cleared the
        channel's queue by then)."""
        self.dropped += len(self._open)
        self._open = []
        self._open_bytes = 0
        self._nonempty.clear()
        self._queued = 0
        self._room.set()

    def current(self, batch: list[Any]) -> list[Any]:
        """The records of a batch the agent took (making room for the next) fetched in the current
        consumer generation, none while a rebalance stops the flow (as Faust's streams drop them)."""
        self._queued = max(0, self._queued - 1)  # the agent took one: room for the next
        self._room.set()
        gen = self.app.consumer_generation_id
        active = self.app.flow_control.is_active()
        fresh = [m for m in batch if m.generation_id == gen] if active else []
        self.dropped += len(batch) - len(fresh)
        return fresh
