"""Redis restarts, noticed before anything is written to the restarted server.

Why: a Redis that restarts from its AOF with ``appendfsync everysec`` may come back without its
last second or two of writes -- commits whose replies the worker already had. A worker that kept
writing into it would apply later batches on top of a state that lacks earlier ones (out of
order), and a re-delivery of the lost batches afterwards would no longer give the state the
embedded replay gives. So every new connection of the worker's store first asks the server its
``run_id`` (``INFO server``: a new value on every start of the process) and compares it with
the one this store has seen at that address:

* the first connection to an address records it;
* the same value: the connection is used as usual;
* another value: the fence *trips*. The connection is closed before any command of the caller
  is sent, ``StoreRestarted`` is raised (a ``StoreUnavailable``: callers retry), and so is every
  later connection until the owner has put its own state back in line with the server's and
  calls ``accept`` (the worker replays every input whose commit may have been lost: see
  stream.service.durability).

An existing connection cannot outlive the server process that accepted it, so checking new
connections is enough: nothing reaches a restarted server but this check. On a Redis Cluster every
node is checked at its own address (``fence_cluster``); a replica promoted at another address is a
first connection there (its data is what ``WAIT`` confirmed: stream.state.redis_store).
"""

from __future__ import annotations

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
                            "in a restart are lost for good (docs/service.md)", exc)
                self._blind = True
            run_id = ""
        where = f"{getattr(conn, 'host', '')}:{getattr(conn, 'port', '')}{getattr(conn, 'path', '')}"
        self.check(where, run_id)

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
                for callback in self.on_trip:
                    callback()
        if self._new:
            raise StoreRestarted(f"Redis at {where} restarted; waiting for the worker to replay its recent inputs")

    def accept(self) -> None:
        """The owner's state is in line with the restarted servers: use them again."""
        self.known.update(self._new)
        self._new.clear()


def fence_cluster(client: RedisCluster, fence: ServerFence) -> None:
    """Every connection of ``client`` to any node, now or discovered later, goes through ``fence``.

    redis-py's cluster client takes no connect hook: each node copies the client's connection
    arguments when it is created (the startup nodes at once, the others when the slot map is read),
    and makes its connections from its copy; the client sets ``redis_connect_func`` itself only to
    read from replicas, which the store never does. So the hook goes into the client's arguments
    and into the startup nodes' copies (redis-py 8.1: ``connection_kwargs``)."""
    kwargs = getattr(client, "connection_kwargs", None)
    if not isinstance(kwargs, dict) or "redis_connect_func" in kwargs:
        raise RuntimeError("redis-py's cluster client changed: cannot fence its connections (stream.state.fence)")
    kwargs["redis_connect_func"] = fence.on_connect
    for node in client.nodes_manager.startup_nodes.values():
        node.connection_kwargs["redis_connect_func"] = fence.on_connect
