"""Writes the replicas confirm: the ``WAIT`` half of ``RedisStore`` (stream.state.redis_store).

Replication is asynchronous: a master that dies right after a commit can take the commit with it,
while the worker has already acked the batch to Kafka. So every write the worker acks on (the
commit, the pool's listing, pending round results) goes in one pipeline with ``WAIT n timeout`` on
one connection of the slot's master (WAIT counts the replicas holding everything that connection
wrote), and counts as done only once ``n`` replicas confirmed it: ``min_replicas``
(MMR_REDIS_MIN_REPLICAS), by default 1 when the master has a replica (``INFO replication``, asked
again every ``REPLICAS_TTL_S`` and after any failure), else 0. Fewer within the timeout:
``StoreUnavailable`` (the batch is retried, never acked) and the pool is marked unconfirmed; its
next use first sends a write that changes nothing (``INCRBY gen 0``) with a ``WAIT``, which confirms
everything the master holds before anything else is done or acked.

``RedisStore`` inherits these methods; they use its client, key space and the state declared
below, which ``RedisStore.__init__`` sets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import TYPE_CHECKING, Any

from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import MovedError, ResponseError
from redis.exceptions import TimeoutError as RedisTimeoutError

from stream.state.id_index import PoolIds
from stream.state.keys import KeySpace
from stream.state.redis_client import StoreUnavailable

#: seconds a master's count of replicas (``INFO replication``) is trusted before it is asked again
REPLICAS_TTL_S = 10.0

#: a command as its arguments, or as a frame of the protocol already written (sent as it is)
Command = tuple[Any, ...] | bytes | memoryview
#: what a write sends on one connection of the slot's master (None: the single server), given the replicas
#: that must confirm it: its replies, the last one WAIT's when that number is not 0
Exchange = Callable[[Any, int], Awaitable[list[Any]]]


class ReplicatedWrites:
    """The replicated writes of ``RedisStore`` (module docstring)."""

    if TYPE_CHECKING:  # set by RedisStore.__init__, defined by RedisStore
        r: Any
        keys: KeySpace
        min_replicas: int | None
        wait_timeout_ms: int
        _ids: dict[str, PoolIds]
        _replicas: dict[str, tuple[float, int]]
        _unconfirmed: set[str]

        @property
        def is_cluster(self) -> bool: ...

        def key(self, pool: str, suffix: str) -> str: ...

    async def _replicated(self, mark: str, key: str, commands: list[tuple[Any, ...]] | Exchange,
                          wrote: Callable[[list[Any]], bool]) -> list[Any]:
        """The replies of ``commands`` (all in ``key``'s slot; or an ``Exchange``, a transaction on the
        connection it holds), sent in one pipeline on one connection of the slot's master, then ``WAIT``
        there when replicas must confirm them. ``wrote``: whether the replies say the commands wrote (a
        WAIT after no write confirms older writes only). The first error reply is raised (after MOVED:
        sent again to the slot's new master); ``StoreUnavailable`` when too few replicas confirmed in
        time. ``mark`` (a pool) stays unconfirmed until a WAIT after a write confirmed it."""
        for redirected in range(3):
            node = self.r.get_node_from_key(key) if self.is_cluster else None
            need = await self._required(node)
            if need:
                self._unconfirmed.add(mark)
            if callable(commands):
                replies = await commands(node, need)
            else:
                replies = await self._pipeline_on(node, commands, need)
            out = replies[:-1] if need else replies
            error = next((r for r in replies if isinstance(r, BaseException)), None)
            if error is None:
                break
            self._replicas.pop("" if node is None else node.name, None)
            if not isinstance(error, MovedError) or node is None or redirected == 2:
                raise error
            await self.r.nodes_manager.move_slot(error)  # the slot's new master, then again there
        waited = int(replies[-1]) if need else 0
        if not need:
            self._unconfirmed.discard(mark)  # nothing to wait for (no replica, or MMR_REDIS_MIN_REPLICAS=0)
        elif waited >= need:
            if wrote(out):
                self._unconfirmed.discard(mark)
        else:
            self._replicas.pop("" if node is None else node.name, None)
            self._ids.pop(mark, None)  # the write may be lost with its master: the index reloads from Redis
            raise StoreUnavailable(f"{mark!r}: a write reached {waited} of the {need} replicas required "
                                   f"within {self.wait_timeout_ms} ms (MMR_REDIS_MIN_REPLICAS, "
                                   "MMR_REDIS_WAIT_TIMEOUT_MS); retrying")
        return out

    async def _pipeline_on(self, node: Any, commands: list[tuple[Any, ...]], need: int) -> list[Any]:
        """``commands`` and ``WAIT need`` (if ``need``) in one pipeline on one connection of ``node``
        (None: the single server); replies and error replies, no redirect followed."""
        pipe = self.r.pipeline(transaction=False) if node is None else self.r.pipeline()
        target = {} if node is None else {"target_nodes": node}
        for cmd in [*commands, ("WAIT", need, self.wait_timeout_ms)] if need else commands:
            pipe.execute_command(*cmd, **target)
        return list(await pipe.execute(raise_on_error=False, **({} if node is None else {"allow_redirections": False})))

    @contextlib.asynccontextmanager
    async def _connection(self, node: Any) -> AsyncIterator[Any]:
        """One connection of ``node`` (None: the single server) held for several round trips (a WATCH holds
        on its connection only); closed when the exchange fails half-way (replies unread, a WATCH open)."""
        pool = self.r.connection_pool if node is None else None
        conn = await pool.get_connection() if pool is not None else node.acquire_connection()
        try:
            yield conn
        except BaseException:
            with contextlib.suppress(Exception):
                await conn.disconnect(nowait=True)
            raise
        finally:
            if pool is not None:
                await pool.release(conn)
            else:
                node.release(conn)

    @staticmethod
    async def _round_trip(conn: Any, commands: Sequence[Command]) -> list[Any]:
        """Sends ``commands`` on ``conn`` at once and reads one reply each (an error reply as its exception).
        A frame already written is sent as it is: redis-py would pack its arguments one by one."""
        packed: list[bytes | memoryview] = []
        for cmd in commands:
            packed.extend(conn.pack_command(*cmd) if isinstance(cmd, tuple) else (cmd,))
        await _send(conn, packed)
        replies: list[Any] = []
        for _ in commands:
            try:
                replies.append(await conn.read_response())
            except ResponseError as exc:
                replies.append(exc)
        return replies

    async def _confirm(self, pool: str) -> None:
        """For a pool marked unconfirmed: a write that changes nothing (``INCRBY gen 0``) and WAIT, which
        confirms everything its master holds; ``StoreUnavailable`` until the replicas have it."""
        if pool in self._unconfirmed:
            await self._replicated(pool, self.key(pool, "gen"), [("INCRBY", self.key(pool, "gen"), 0)],
                                   wrote=lambda _: True)

    async def _list_pool(self, pool: str) -> None:
        """Adds ``pool`` to the set of pools, confirmed by the replicas like a commit. A SADD of a member
        already there writes nothing, so (on a retry) the set is rewritten as it is (SUNIONSTORE)."""
        key, mark = self.keys.pools_key(), f"{pool}\0listed"
        added = (await self._replicated(mark, key, [("SADD", key, pool)], wrote=lambda r: bool(r[0])))[0]
        if not added and mark in self._unconfirmed:
            await self._replicated(mark, key, [("SUNIONSTORE", key, key)], wrote=lambda _: True)

    async def _required(self, node: Any) -> int:
        """Replicas that must confirm a write on ``node`` (None: the single server)."""
        if self.min_replicas is not None:
            return self.min_replicas
        return 1 if await self._replicas_of(node) else 0

    async def _replicas_of(self, node: Any) -> int:
        """Connected replicas of ``node`` (``INFO replication``), asked at most every ``REPLICAS_TTL_S``."""
        name = "" if node is None else node.name
        now = time.monotonic()
        known = self._replicas.get(name)
        if known is not None and now - known[0] < REPLICAS_TTL_S:
            return known[1]
        info = await self.r.info("replication", **({} if node is None else {"target_nodes": node}))
        n = int(info.get("connected_slaves", 0))
        self._replicas[name] = (now, n)
        return n


async def _send(conn: Any, packed: list[bytes | memoryview]) -> None:
    """Writes ``packed`` to ``conn`` piece by piece, as redis-py's ``send_packed_command`` does but
    without joining the pieces first.

    Why: a commit's frames are tens of MB. Joined, asyncio copies them once for the join, once more
    for what the socket did not take at once, and a third time into its buffer, all on the event loop
    (BENCHMARKS.md); written as memoryviews, only the last copy remains. The stream is redis-py's
    private ``_writer`` (redis is pinned; a test checks it is there): without one, ``send_packed_command``."""
    writer = getattr(conn, "_writer", None) if conn.is_connected else None
    if not isinstance(writer, asyncio.StreamWriter):
        await conn.send_packed_command(packed)
        return
    try:
        for piece in packed:
            writer.write(piece)
        if conn.socket_timeout:
            await asyncio.wait_for(writer.drain(), conn.socket_timeout)
        else:
            await writer.drain()
    except TimeoutError:
        raise RedisTimeoutError("Timeout writing to socket") from None
    except OSError as exc:
        raise RedisConnectionError(f"Error while writing to socket: {exc}") from exc
