"""Input offsets are committed to Kafka only once their Redis commits are on Redis's disk.

Why: Redis acknowledges a write before it is fsynced. With ``appendfsync everysec`` the AOF is
fsynced once a second (and a write that Redis postpones while a slow fsync runs waits up to two
seconds more), so a crash of the host -- or of Redis while it postponed a write -- loses the
commits of the last second or two. Had the worker acknowledged their input records to Kafka,
those events would never be rated again. So a batch whose outputs the broker acknowledged is
*held* here, not acknowledged, until its commit is old enough to be on disk:

* every ``tick`` (a timer of the worker) pings the store. An answer from the same server process
  (stream.state.fence: a new connection checks the server's ``run_id``; an old one cannot outlive
  its server) proves the server did not restart since the batches were held; those held at least
  ``after_s`` (MMR_REDIS_DURABLE_AFTER_S) before the ping are then on disk, and are acknowledged
  (their offsets committed by Faust's commit timer), in order;
* when the server did restart (the fence tripped), everything held is taken back (``take``) and
  rated again, in the order it was first taken, before anything newer (stream.service.app,
  ``Service.rewind``): the restarted Redis kept some prefix of the commits, the event-id
  dedup skips what it kept and re-publishes those players' ratings, and the rest is
  applied again in order. A worker that restarts with Redis resumes from the committed offsets,
  which only ever cover commits that were on disk.

Memory: the records of the last ``after_s`` seconds (plus a tick) stay referenced here.
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
