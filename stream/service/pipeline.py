"""Two-stage batch pipeline: rate batch N+1 while the broker acknowledges batch N.

Why: a worker that handles one take batch at a time pays the broker's round trip on every batch
and keeps less than one core busy. Here the Faust agent only hands batches over, and two tasks, each
strictly in submission order, do the rest: **rate** merges the queued batches (up to ``max_merge``
messages and ``max_merge_bytes``: one Redis read, kernel call and commit for all) and runs
``work(msgs)``, which commits and hands the outputs to the producer, returning their delivery
futures; **ack** waits for those, then calls ``done``, which acks the input. So each batch still goes
commit → publish → ack, in input order; a crash re-delivers the unacked input.

Back-pressure: ``submit`` waits while more than ``max_inflight`` messages or ``max_inflight_bytes``
bytes are in flight (the byte bound for large messages, held decoded), so the consumer stops taking.
A failure in either stage is fatal for the worker (``on_error``): waiting ``submit``/``drain`` raise.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Sequence
from typing import Any, Generic, TypeVar

log = logging.getLogger(__name__)

M = TypeVar("M")  # a message
T = TypeVar("T")  # what ``done`` needs to ack a submitted batch (e.g. Faust events)

Work = Callable[[list[M]], Awaitable[Sequence[Awaitable[Any]]]]


class BatchPipeline(Generic[M, T]):
    """See the module docstring."""

    def __init__(self, work: Work[M], done: Callable[[list[T], list[M]], Any], *,
                 max_inflight: int = 16384, max_merge: int = 8192, max_merge_bytes: int = 0,
                 max_inflight_bytes: int = 0, size: Callable[[M], int] | None = None,
                 on_error: Callable[[BaseException], Awaitable[None]] | None = None,
                 on_queued: Callable[[float], Any] | None = None) -> None:
        self.work = work
        self.done = done
        self.max_inflight = max_inflight
        self.max_merge = max_merge
        #: merging also stops at this many bytes (``size`` of each message; 0: no limit), so
        #: one merged batch never becomes one huge Redis script that blocks Redis for seconds
        self.max_merge_bytes = max_merge_bytes
        #: ``submit`` also waits while this many bytes are in flight (0: no limit); a batch is
        #: always admitted when nothing is in flight, however large
        self.max_inflight_bytes = max_inflight_bytes if size is not None else 0
        self.size = size
        self.on_error = on_error
        #: called with the seconds the oldest batch of each merged group waited in the queue
        self.on_queued = on_queued
        #: (messages, tokens, when queued, their bytes), and (delivery futures, tokens, messages, bytes)
        self._queue: asyncio.Queue[tuple[list[M], list[T], float, int]] = asyncio.Queue()
        self._acks: asyncio.Queue[tuple[Sequence[Awaitable[Any]], list[T], list[M], int]] = asyncio.Queue()
        self.inflight = 0  # messages submitted and not done
        self.inflight_bytes = 0  # their ``size`` (0 without ``size``)
        self._batches = 0  # batches submitted and not done (an empty batch counts too)
        self._failed: BaseException | None = None
        self._paused = False  # between ``reset`` and ``resume``: nothing is admitted
        self._changed = asyncio.Condition()
        self._tasks: list[asyncio.Task[None]] = []
        #: the merged batch the rate stage works on, and the one the ack stage waits for (``reset``)
        self._rating: tuple[list[M], list[T]] | None = None
        self._acking: tuple[Sequence[Awaitable[Any]], list[T], list[M], int] | None = None
        self.merged_batches = 0  # batches that were merged into an earlier one (observability)

    def start(self) -> None:
        if not self._tasks:
            self._tasks = [asyncio.create_task(self._guard(self._rate_loop())),
                           asyncio.create_task(self._guard(self._ack_loop()))]

    async def submit(self, msgs: list[M], token: T) -> None:
        """Queue one batch (in order); waits while too many messages are in flight."""
        self.start()
        nbytes = self._nbytes(msgs)
        async with self._changed:
            await self._changed.wait_for(self._admits)
            self._raise_if_failed()
            self._count(len(msgs), nbytes, 1)
        self._queue.put_nowait((msgs, [token], time.perf_counter(), nbytes))

    def _nbytes(self, msgs: list[M]) -> int:
        return sum(map(self.size, msgs)) if self.size is not None else 0

    def _count(self, msgs: int, nbytes: int, batches: int) -> None:
        self.inflight += msgs
        self.inflight_bytes += nbytes
        self._batches += batches

    def _admits(self) -> bool:
        if self._failed is not None:
            return True
        if self._paused:
            return False
        if self.inflight == 0:
            return True
        return self.inflight < self.max_inflight and (not self.max_inflight_bytes
                                                      or self.inflight_bytes < self.max_inflight_bytes)

    async def drain(self) -> None:
        """Wait until everything submitted so far is done (e.g. before giving up partitions)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._batches == 0 or self._failed is not None)
            self._raise_if_failed()

    def _raise_if_failed(self) -> None:
        if self._failed is not None:
            raise RuntimeError("the batch pipeline failed; nothing more is acknowledged") from self._failed

    async def stop(self) -> None:
        tasks = self._tasks
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        self._tasks = []

    async def reset(self) -> list[tuple[list[M], list[T]]]:
        """Stop both stages and give back every batch submitted and not done, in submission order, as
        (messages, tokens), once the delivery futures ``work`` returned for them are settled (what was
        rated goes out). For a rewind: the pipeline is paused from the call on (a batch admitted while
        this waits would be rated before those given back) until ``resume``."""
        self._paused = True  # before the first await: ``submit`` admits nothing more (``_admits``)
        await self.stop()
        out: list[tuple[list[M], list[T]]] = []
        futs: list[Awaitable[Any]] = []
        if self._acking is not None:
            f, tokens, msgs, _ = self._acking
            futs += f
            out.append((msgs, tokens))
        while not self._acks.empty():
            f, tokens, msgs, _ = self._acks.get_nowait()
            futs += f
            out.append((msgs, tokens))
        if self._rating is not None:
            out.append(self._rating)
        while not self._queue.empty():
            msgs, tokens, _, _ = self._queue.get_nowait()
            out.append((msgs, tokens))
        self._acking = self._rating = None
        if futs:
            await asyncio.gather(*futs, return_exceptions=True)
        async with self._changed:
            self.inflight = self.inflight_bytes = self._batches = 0
            self._paused = True
            self._changed.notify_all()
        return out

    async def resume(self, batches: list[tuple[list[M], list[T]]]) -> None:
        """Queue ``batches`` (as ``reset`` gave them) ahead of anything waiting in ``submit``, and run again."""
        self.start()
        async with self._changed:
            for msgs, tokens in batches:
                nbytes = self._nbytes(msgs)
                self._count(len(msgs), nbytes, len(tokens))
                self._queue.put_nowait((msgs, tokens, time.perf_counter(), nbytes))
            self._paused = False
            self._changed.notify_all()

    async def _guard(self, coro: Awaitable[None]) -> None:
        try:
            await coro
        except asyncio.CancelledError as exc:
            task = asyncio.current_task()
            if task is not None and task.cancelling():  # stop(): this stage itself is cancelled
                raise
            await self._fail(exc)  # e.g. a delivery future cancelled under us: a failure, not a stop
            raise
        except BaseException as exc:  # a stage died: nothing more would ever be acked
            await self._fail(exc)
            raise

    async def _fail(self, exc: BaseException) -> None:
        log.error("batch pipeline failed: %r", exc, exc_info=exc)
        async with self._changed:
            self._failed = exc
            self._changed.notify_all()  # submit() and drain() waiters raise instead of hanging
        if self.on_error is not None:
            await self.on_error(exc)

    async def _rate_loop(self) -> None:
        while True:
            msgs, tokens, queued_at, nbytes = self._merged(await self._queue.get())
            if self.on_queued is not None:
                self.on_queued(time.perf_counter() - queued_at)
            self._rating = (msgs, tokens)
            futs = await self.work(msgs)
            self._acks.put_nowait((futs, tokens, msgs, nbytes))
            self._rating = None

    def _merged(self, first: tuple[list[M], list[T], float, int]) -> tuple[list[M], list[T], float, int]:
        """``first`` with the batches queued behind it merged in (up to ``max_merge`` and ``max_merge_bytes``)."""
        msgs, tokens, queued_at, nbytes = first
        tokens = list(tokens)
        if not self._queue.empty() and len(msgs) < self.max_merge:
            msgs = list(msgs)
            limit = self.max_merge_bytes
            while not self._queue.empty() and len(msgs) < self.max_merge and (not limit or nbytes < limit):
                more, toks, _, more_bytes = self._queue.get_nowait()
                msgs += more
                tokens += toks
                nbytes += more_bytes
                self.merged_batches += 1
        return msgs, tokens, queued_at, nbytes

    async def _ack_loop(self) -> None:
        while True:
            futs, tokens, msgs, nbytes = self._acking = await self._acks.get()
            if futs:  # shielded: stopping this stage must not cancel deliveries under way (``reset`` waits for them)
                await asyncio.shield(asyncio.gather(*futs))
            self._acking = None
            self.done(tokens, msgs)
            async with self._changed:
                self._count(-len(msgs), -nbytes, -len(tokens))
                self._changed.notify_all()
