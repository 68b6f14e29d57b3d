"""Lost Redis writes, detected: how far each input partition's commits are held by the Redis server.

Why: a Redis that restarts without persistence (or from an old snapshot, or from an AOF that lost
more than its fsync interval) comes back without commits whose input records the worker has
already acknowledged to Kafka. Those events are never delivered again, so rating on from that
state would publish new versions of ratings computed without them -- versions that conflict with
those already on the ratings topic, and lower than some of them. The fence (stream.state.fence)
sees *that* the server restarted; these marks tell *whether it kept what was acknowledged*.

The marker, one key outside every pool's slot::

    {prefix}:marks   HASH  "topic/partition" -> highest input offset of a batch whose commits this Redis holds

The worker writes a batch's highest offset per input partition once all of the batch's commits
have landed (``StateMarks.write``: raised, never lowered, confirmed by the replicas like a commit),
and only then holds the batch until its commits are on disk (stream.service.durability), after
which its records are acknowledged. So an acknowledged offset is always at or below a mark that
went to the server before the commits it covers were proven on disk, and a Redis that kept its
acknowledged commits also kept the mark: Redis persists its writes in the order it applied them
(the AOF is a prefix of the writes; an RDB snapshot a point in time).

After a restart (the fence tripped) the worker compares, for every input partition, the highest
offset it acknowledged with the server's mark (``lost``). A mark below it, or none, means the
server lost acknowledged writes: the worker rates nothing more (``LostWrites``: the fence stays
tripped, fetching paused, ``/readyz`` 503 with the reason, ``mmr_redis_lost_writes_partitions``,
one ERROR line) until an operator has rebuilt the state from the input topics
(``mmr rebuild``, stream.tools.rebuild), which writes the marks up to where it read; the worker
then sees every acknowledged offset covered and goes on by itself (docs/operator.md, "Redis lost
acknowledged writes").

The same check runs when the worker takes the first records of a partition it got (its start, a
rebalance: ``LostWrites.taken_up``), with the partition's committed offset (where its first record
is) as acknowledged: a Redis that restarted empty together with the worker, or while none ran, is not
rated over either. A server with no marks at all but pools listed was written by a version before
the marks: they are set to the committed offsets then (upgrade all workers together).

Limits: on a Redis Cluster the marks live on the node that owns their slot: a node that restarts
empty is detected only when it is that one. Another node's restart trips the fence, but the marks,
intact on their own node, cover every acknowledged offset, and the worker rates that node's pools
on from no belief. Replicas with ``WAIT`` (MMR_REDIS_MIN_REPLICAS) and AOF on the masters are the
protection there (docs/operator.md, "Limit: on a Redis Cluster the marks cover one node", with the
two designs that would close it).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from stream.state.fence import StoreRestarted
from stream.state.keys import strings_blob
from stream.state.redis_client import CredentialsRefused, StoreUnavailable, infrastructure_errors
from stream.state.redis_scripts import ITEMS_LUA
from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)

#: KEYS the marks hash; ARGV 1 n, 2 blob of "topic/partition", offset pairs: each field raised to its offset
MARKS_LUA = ITEMS_LUA + """
local it = items(ARGV[2], 2 * tonumber(ARGV[1]))
local raised = 0
for k = 1, #it, 2 do
  local old = redis.call('HGET', KEYS[1], it[k])
  if not old or tonumber(it[k + 1]) > tonumber(old) then
    redis.call('HSET', KEYS[1], it[k], it[k + 1])
    raised = raised + 1
  end
end
return raised
"""

#: seconds between attempts at a mark while Redis is unavailable: doubling up to the second value
MARK_BACKOFF = (0.05, 5.0)


class _Offsets(Protocol):
    topic: str
    partition: int
    offset: int


def marks_key(prefix: str) -> str:
    return f"{prefix}:marks"


def highest_offsets(msgs: Iterable[_Offsets]) -> dict[str, int]:
    """"topic/partition" -> the highest offset among ``msgs`` (input messages or Kafka records)."""
    out: dict[str, int] = {}
    for m in msgs:
        tp = f"{m.topic}/{m.partition}"
        if m.offset > out.get(tp, -1):
            out[tp] = m.offset
    return out


async def write_marks(store: RedisStore, offsets: Mapping[str, int]) -> int:
    """Raise the marks to ``offsets`` (never lowering one); how many were raised. Confirmed by the replicas
    like a commit (stream.state.replication). Raises ``StoreUnavailable`` as every store method does."""
    if not offsets:
        return 0
    key = marks_key(store.prefix)
    blob = strings_blob([str(x) for tp, off in offsets.items() for x in (tp, off)])
    async with store._io():
        replies = await store._replicated("\0marks", key, [("EVAL", MARKS_LUA, 1, key, len(offsets), blob)],
                                          wrote=lambda r: int(r[0]) > 0)
    return int(replies[0])


async def read_marks(client: Any, prefix: str) -> dict[str, int]:
    """The marks a server holds ("topic/partition" -> offset) through ``client`` (a redis-py client, which
    must not be the fenced one: the check reads the restarted server before it is accepted)."""
    raw = await client.hgetall(marks_key(prefix))
    return {(k.decode() if isinstance(k, bytes) else k): int(v) for k, v in raw.items()}


@dataclass(frozen=True, slots=True)
class Lost:
    """An input partition whose acknowledged records the server lost the commits of."""

    source: str  # "topic/partition"
    acknowledged: int  # the highest offset acknowledged to Kafka
    mark: int | None  # the server's mark (None: none)

    def __str__(self) -> str:
        held = "no mark" if self.mark is None else f"commits up to offset {self.mark}"
        return f"{self.source}: acknowledged up to offset {self.acknowledged}, Redis holds {held}"


def lost(acknowledged: Mapping[str, int], marks: Mapping[str, int]) -> list[Lost]:
    """The partitions of ``acknowledged`` whose offset the server's ``marks`` do not cover."""
    out = []
    for tp, off in sorted(acknowledged.items()):
        mark = marks.get(tp)
        if mark is None or mark < off:
            out.append(Lost(tp, off, mark))
    return out


class LostWrites:
    """The worker's side (see the module docstring): the offsets it acknowledged, the marks it writes after
    each batch's commits, and the check after a restart of the server, which waits while writes are lost."""

    def __init__(self, store: RedisStore, reads: Any, poll_s: float = 1.0) -> None:
        self.store = store  # the rating pipeline's (fenced) store: marks of superseded work are refused
        self.reads = reads  # an unfenced redis-py client of the same server (the check reads before ``accept``)
        self.poll_s = poll_s
        #: "topic/partition" -> highest offset this worker acknowledged to Kafka
        self.acknowledged: dict[str, int] = {}
        #: what the last check found missing (empty: nothing lost, or not checked)
        self.missing: list[Lost] = []
        self.since = 0.0  # wall time the loss was found
        self.checks = 0  # checks after restarts (observability, tests)
        #: the input partitions (topic, partition) whose first records this worker took since it got them
        self._taken_up: set[tuple[str, int]] = set()

    def acked(self, records: Iterable[_Offsets]) -> None:
        """Records acknowledged to Kafka (their offsets may be committed from now on)."""
        for tp, off in highest_offsets(records).items():
            if off > self.acknowledged.get(tp, -1):
                self.acknowledged[tp] = off

    def forget(self, sources: Iterable[tuple[str, int]]) -> None:
        """Partitions revoked: their next owner compares its own acknowledgements."""
        for topic, partition in sources:
            self.acknowledged.pop(f"{topic}/{partition}", None)
            self._taken_up.discard((topic, partition))

    async def taken_up(self, records: Iterable[_Offsets],
                       earliest: Callable[[list[tuple[str, int]]], Awaitable[Mapping[tuple[str, int], int]]],
                       on_lost: Any = None, on_whole: Any = None) -> None:
        """The first records of input partitions this worker got (its start, a rebalance), before any is rated.

        A partition's first record after its earliest offset (``earliest``: the broker's, per partition) is
        where the group's committed offset was: the records before it were acknowledged, by this worker
        before it restarted or by another, and their commits must be in the server. So the same check as
        after a restart (``wait_until_whole``), with those offsets as acknowledged: a Redis that restarted
        empty together with the worker, or while no worker ran, is not rated over either.

        A server with no marks at all but with pools listed was written by a version before the marks: its
        marks are set to those offsets (a warning). Redis unavailable: the partitions are checked with
        their next records."""
        taken = self._taken_up
        first: dict[tuple[str, int], tuple[str, int, int]] = {}
        for r in records:  # (a tuple a record: this runs on every batch the worker takes)
            key = (r.topic, r.partition)
            if key not in taken and key not in first:  # a partition's records come in offset order
                first[key] = (r.topic, r.partition, r.offset)
        if not first:
            return
        try:
            begin = await earliest([(t, p) for t, p, _ in first.values()])
            behind = {f"{t}/{p}": off - 1 for t, p, off in first.values() if off > begin.get((t, p), 0)}
            if behind:
                marks = await self._read()
                with infrastructure_errors():
                    written_before = not marks and bool(await self.reads.exists(self.store.keys.pools_key()))
                if written_before:
                    log.warning("Redis holds pools but no state marks (written by a version before them): marking "
                                "the committed offsets of %s as held", ", ".join(sorted(behind)))
                    await write_marks(self.store, behind)
        except StoreUnavailable as exc:
            log.warning("checking the state marks of newly taken partitions: %r; checked with their next records",
                        exc)
            return
        taken.update(first)
        for tp, off in behind.items():
            if off > self.acknowledged.get(tp, -1):
                self.acknowledged[tp] = off
        if behind:
            await self.wait_until_whole(on_lost, on_whole)

    async def mark(self, msgs: Iterable[_Offsets]) -> None:
        """Write the marks of a batch whose commits all landed; retried while Redis is unavailable. A restart
        of the server ends the attempts: the batch is taken back and rated (and marked) again."""
        offsets = highest_offsets(msgs)
        delay, most = MARK_BACKOFF
        while True:
            try:
                await write_marks(self.store, offsets)
                return
            except StoreRestarted:  # Superseded included: the rewind takes the batch back
                return
            except StoreUnavailable as exc:
                log.warning("writing the state marks: Redis unavailable (%r); trying again in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, most)

    @property
    def reason(self) -> str | None:
        """Why the worker does not rate (readiness), or None."""
        if not self.missing:
            return None
        shown = "; ".join(map(str, self.missing[:4])) + (f"; and {len(self.missing) - 4} more"
                                                           if len(self.missing) > 4 else "")
        return (f"Redis lost acknowledged writes ({shown}): not rating until the state is rebuilt "
                "(mmr rebuild; docs/operator.md, 'Redis lost acknowledged writes')")

    async def check(self) -> list[Lost]:
        """Compare the server's marks with what this worker acknowledged (StoreUnavailable: not answered)."""
        marks = await self._read()
        self.checks += 1
        return lost(self.acknowledged, marks)

    async def _read(self) -> dict[str, int]:
        """The server's marks through ``reads``; refused credentials are told to the store's owner as the
        store's own uses tell them (``RedisStore.on_refused``: the worker stops), not only retried."""
        try:
            with infrastructure_errors():
                return await read_marks(self.reads, self.store.prefix)
        except CredentialsRefused as exc:
            if self.store.on_refused is not None:
                self.store.on_refused(exc)
            raise

    async def wait_until_whole(self, on_lost: Any = None, on_whole: Any = None) -> None:
        """Return once the server holds every acknowledged offset's commits: at once when nothing was lost;
        otherwise after one ERROR line, ``on_lost()``, polling until a rebuild covered them, then ``on_whole()``."""
        while True:
            try:
                missing = await self.check()
            except StoreUnavailable as exc:  # down again: wait, then ask again
                log.debug("state marks not readable: %r", exc)
                await asyncio.sleep(self.poll_s)
                continue
            if not missing:
                if self.missing:
                    log.warning("the state marks cover every acknowledged offset again (rebuilt after %.0f s): "
                                "rating again", time.time() - self.since)
                    self.missing = []
                    if on_whole is not None:
                        await on_whole()
                return
            if not self.missing:
                self.since = time.time()
                self.missing = missing
                log.error("%s", self.reason)
                if on_lost is not None:
                    await on_lost()
            self.missing = missing
            await asyncio.sleep(self.poll_s)
