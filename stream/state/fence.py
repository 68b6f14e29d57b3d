"""Redis restarts, noticed before anything is written to the restarted server.

Why: a Redis restarting from its AOF (``appendfsync everysec``) may come back without its last writes,
commits the worker already had replies for; writing on would apply later batches on a state that
lacks earlier ones. So every new connection of the store first asks the server its ``run_id`` (new
on every start) and compares it with the one seen at that address. Another value *trips* the fence:
the connection is closed before any command is sent and ``StoreRestarted`` (a ``StoreUnavailable``)
is raised, for every new connection, until the owner has put its state back in line and calls
``accept`` (stream.service.durability). An existing connection cannot outlive its server process,
so checking new ones is enough; on a Redis Cluster each node is checked at its own address.

Work begun before a restart never reaches the server after it: the fence counts *epochs* (one more
on each trip and each ``accept``), and work that may write marks its task with the epoch it began in
(``begin``, a context variable its subtasks inherit). Once the epoch moved on, every use of the store
(``guard``) and every new connection refuse such work with ``Superseded``, which no caller retries:
a step still running when the owner took its batch back cannot write ahead of the batches rated again.
"""

from __future__ import annotations

import contextvars
import logging
from collections.abc import Callable
from typing import Any

from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from stream.state.redis_client import StoreUnavailable

log = logging.getLogger(__name__)


class StoreRestarted(StoreUnavailable):
    """The Redis server restarted since this store last used it (its ``run_id`` changed): writes that
    it had acknowledged may be lost. Nothing was sent; retry after ``ServerFence.accept``."""


class Superseded(StoreRestarted):
    """Work begun before the fence's current epoch (``ServerFence.begin``): Redis restarted since, and
    the owner does that work again after its rewind. Nothing was sent; never retried."""


#: the fence epoch in which the current task's work began (``ServerFence.begin``); None: not marked
_BEGUN: contextvars.ContextVar[int | None] = contextvars.ContextVar("mmr_fence_epoch", default=None)


def run_id_of(info: bytes | str) -> str:
    """The ``run_id`` field of an ``INFO server`` reply."""
    text = info.decode() if isinstance(info, bytes) else info
    for line in text.splitlines():
        if line.startswith("run_id:"):
            return line[7:].strip()
    return ""


class ServerFence:
    """See the module docstring. ``on_connect`` is redis-py's ``redis_connect_func``."""

    def __init__(self) -> None:
        #: address -> run_id of the server last accepted there
        self.known: dict[str, str] = {}
        #: address -> run_id met after a restart, accepted by ``accept``
        self._new: dict[str, str] = {}
        #: called (on the event loop) when the fence trips
        self.on_trip: list[Callable[[], Any]] = []
        self.restarts = 0  # trips so far (observability, tests)
        #: one more on each trip and each ``accept``: work begun in an older epoch is superseded
        self.epoch = 0
        self._blind = False  # the server refused INFO (warned once)

    @property
    def tripped(self) -> bool:
        return bool(self._new)

    async def on_connect(self, conn: Any) -> None:
        """Set the connection up (``on_connect``), then check the server's ``run_id``."""
        await conn.on_connect()
        await conn.send_command("INFO", "server")
        try:
            run_id = run_id_of(await conn.read_response())
        except ResponseError as exc:  # INFO refused (renamed or denied by an ACL): restarts go unnoticed
            if not self._blind:
                log.warning("Redis refused INFO (%s): restarts of the server cannot be noticed; commits it loses "
                            "in a restart are lost for good (docs/operator.md)", exc)
                self._blind = True
            run_id = ""
        where = f"{getattr(conn, 'host', '')}:{getattr(conn, 'port', '')}{getattr(conn, 'path', '')}"
        self.check(where, run_id)
        self.guard()  # a connection made for superseded work: closed before it sends anything

    def check(self, where: str, run_id: str) -> None:
        """Record or compare ``run_id`` at ``where``; raise ``StoreRestarted`` when the fence is tripped."""
        known = self.known.setdefault(where, run_id)
        if known != run_id and self._new.get(where) != run_id:
            first = not self._new
            self._new[where] = run_id
            self.restarts += 1
            log.error("Redis at %s restarted (run_id %s -> %s): writes it acknowledged may be lost; nothing is "
                      "written to it until the inputs since the last durable point are replayed", where, known, run_id)
            if first:
                self.epoch += 1
                for callback in self.on_trip:
                    callback()
        if self._new:
            self.guard()
            raise StoreRestarted(f"Redis at {where} restarted; waiting for the worker to replay its recent inputs")

    def accept(self) -> None:
        """The owner's state is in line with the restarted servers: use them again (work begun
        before this call stays superseded)."""
        self.known.update(self._new)
        self._new.clear()
        self.epoch += 1

    def begin(self) -> None:
        """Mark the current task (and the tasks it starts from now on) as work begun in this epoch."""
        _BEGUN.set(self.epoch)

    def superseded(self) -> bool:
        """The current task's work began in an older epoch (see the module docstring)."""
        begun = _BEGUN.get()
        return begun is not None and begun != self.epoch

    def guard(self) -> None:
        """Raise ``Superseded`` if the current task's work began in an older epoch."""
        if self.superseded():
            raise Superseded(f"work begun in fence epoch {_BEGUN.get()}, before Redis restarted "
                             f"(epoch {self.epoch}): taken back and done again by the rewind")


def fence_cluster(client: RedisCluster, fence: ServerFence) -> None:
    """Every connection of ``client`` to any node, now or discovered later, goes through ``fence``.

    redis-py's cluster client takes no connect hook: each node copies the client's connection
    arguments when it is created, so the hook goes into the client's arguments and the startup
    nodes' copies (``connection_kwargs``; the client sets ``redis_connect_func`` only to read from
    replicas, which the store never does)."""
    kwargs = getattr(client, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or "redis_connect_func" in kwargs:
        raise RuntimeError("redis-py's cluster client changed: cannot fence its connections (stream.state.fence)")
    kwargs["redis_connect_func"] = fence.on_connect
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_kwargs["redis_connect_func"] = fence.on_connect
