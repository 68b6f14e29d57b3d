"""Input offsets are committed to Kafka only once their Redis commits are on Redis's disk.

Why: Redis acknowledges a write before it is fsynced (``appendfsync everysec``: up to a second or
two), and an event whose input record was acknowledged would never be rated again had a crash lost
its commit. So a batch whose outputs the broker acknowledged is *held* here until its commit is old
enough: every ``tick`` pings the store, and an answer from the same server process (the fence of
stream.state.fence) proves that the batches held ``after_s`` (MMR_REDIS_DURABLE_AFTER_S) before the
ping are on disk; they are acknowledged in order. A restarted server (the fence tripped) makes the
worker take back everything held (``take``) and rate it again, in order (``Service.rewind``).
"""

from __future__ import annotations

import logging
import time
from collections import deque
from collections.abc import Awaitable, Callable
from typing import Any, Generic, TypeVar

from stream.state.redis_client import StoreUnavailable

log = logging.getLogger(__name__)

T = TypeVar("T")  # what acknowledges a batch (the worker: its Faust records)
M = TypeVar("M")  # a message


class Durability(Generic[T, M]):
    """See the module docstring. ``ack(tokens)`` acknowledges the records of held batches."""

    def __init__(self, after_s: float, ack: Callable[[list[T]], Any], alive: Callable[[], Awaitable[Any]]) -> None:
        self.after_s = after_s
        self.ack = ack
        #: answers only from the server the held commits went to (the store's ``ping``, fenced)
        self.alive = alive
        #: (monotonic time held, tokens, messages), in the order the batches were taken
        self.held: deque[tuple[float, list[T], list[M]]] = deque()

    def hold(self, tokens: list[T], msgs: list[M]) -> None:
        """A batch whose commit and outputs are done: acknowledged at once when ``after_s`` is 0."""
        if self.after_s <= 0 and not self.held:
            self.ack(tokens)
            return
        self.held.append((time.monotonic(), tokens, msgs))

    @property
    def held_messages(self) -> int:
        return sum(len(m) for _, _, m in self.held)

    async def tick(self) -> int:
        """Acknowledge the held batches proven on disk (see the module docstring); how many."""
        if not self.held:
            return 0
        started = time.monotonic()
        try:
            await self.alive()
        except StoreUnavailable as exc:  # down, or restarted (then the owner rewinds): nothing is proven
            log.debug("not acknowledging held batches: %r", exc)
            return 0
        n = 0
        while self.held and self.held[0][0] <= started - self.after_s:
            _, tokens, _ = self.held.popleft()
            self.ack(tokens)
            n += 1
        return n

    def take(self) -> list[tuple[list[T], list[M]]]:
        """Everything held, in order, no longer held (to be rated again, or dropped on revocation)."""
        out = [(tokens, msgs) for _, tokens, msgs in self.held]
        self.held.clear()
        return out
