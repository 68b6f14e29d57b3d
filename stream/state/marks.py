"""Lost Redis writes, detected: how far each input partition's (and each pool's) commits are held by Redis.

Why: a Redis that restarts without persistence (or from an old snapshot, or from an AOF that lost
more than its fsync interval) comes back without commits whose input records the worker has
already acknowledged to Kafka. Those events are never delivered again, so rating on would publish
versions that conflict with those on the ratings topic. The fence (stream.state.fence) sees *that*
the server restarted; these marks tell *whether it kept what was acknowledged*. What the worker and
the operator see and do: docs/operator.md, "Redis lost acknowledged writes".

The marker, one key outside every pool's slot::

    {prefix}:marks   HASH  "topic/partition" -> highest input offset of a batch whose commits this Redis holds
                           "pool:<pool>"     -> the pool's commit counter (``gen``) as of commits acknowledged
                           "lost:<pool>"     -> that counter, where a worker found the pool's commits lost

Why a mark covers what was acknowledged: the worker writes a batch's highest offsets once all its
commits landed (``LostWrites.mark``: raised, never lowered, confirmed by the replicas like a commit),
and only then holds the batch until its commits are on disk (stream.service.durability) and
acknowledges it; Redis persists its writes in the order it applied them (the AOF is a prefix of the
writes, an RDB snapshot a point in time), so a Redis that kept the acknowledged commits kept the mark.

After a restart (the fence tripped), and when the worker takes the first records of a partition it
got (``LostWrites.taken_up``: its committed offset counts as acknowledged), a partition whose mark is
below what was acknowledged, or has none, is lost (``check``): the worker rates nothing until
``mmr rebuild`` wrote the marks again (``wait_until_whole``).

Why pools have marks too: on a Redis Cluster a node other than the marks' can restart empty while the
marks, on their own node, cover every offset. A pool's ``gen`` is raised by every commit in the pool's
own transaction, so its node cannot keep a commit and lose the counter. The worker remembers each
pool's counter as of its last commit acknowledged to Kafka (``committed``, then ``acked``: a crash
that loses commits not yet on disk is not a loss) and writes them into ``pool:<pool>`` fields at most
once a second (``flush``); a counter below the acknowledged one is a loss, recorded as ``lost:<pool>``
(seen by every worker, a restarted one too) until ``mmr rebuild`` removes those fields
(``clear_pool_marks``). A server with pools but no marks at all, or marks without pool fields, was
written by a version before them: its marks are set to the committed offsets, or only what this
worker acknowledged since it started is checked.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from stream.state.fence import StoreRestarted
from stream.state.keys import KeySpace, strings_blob
from stream.state.redis_client import StoreUnavailable, infrastructure_errors
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
#: seconds between two writes of the pools' acknowledged counters into the marks (with a batch's marks)
GENS_EVERY_S = 1.0


class _Offsets(Protocol):
    topic: str
    partition: int
    offset: int


#: fields of the marks hash beside the partitions' (a topic's name holds no ``:``): a pool's commit counter
#: acknowledged to Kafka, and the one a worker found lost (until a rebuild removes it)
POOL_FIELD, LOST_FIELD = "pool:", "lost:"


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


async def read_gens(client: Any, keys: KeySpace, pools: Iterable[str]) -> dict[str, int]:
    """Each pool's commit counter (0: none) through ``client``, in one pipeline (every node of a cluster)."""
    names = sorted(pools)
    if not names:
        return {}
    pipe = client.pipeline(transaction=False)
    for p in names:
        pipe.get(keys.key(p, "gen"))
    return {p: int(v or 0) for p, v in zip(names, await pipe.execute(), strict=True)}


async def clear_pool_marks(store: RedisStore) -> int:
    """Remove the pools' fields from the marks (``mmr rebuild``, at its end: the counters of before are void,
    and so are the losses found); how many."""
    key = marks_key(store.prefix)
    async with store._io():
        fields = [f for f in await store.r.hkeys(key) if f.startswith((POOL_FIELD.encode(), LOST_FIELD.encode()))]
        return int(await store.r.hdel(key, *fields)) if fields else 0


@dataclass(frozen=True, slots=True)
class LostPool:
    """A pool whose node lost commits acknowledged to Kafka (a Redis Cluster node, see the module docstring)."""

    pool: str
    acknowledged: int  # the pool's commit counter as of its last commit acknowledged
    held: int  # the server's counter (0: none of its commits)

    def __str__(self) -> str:
        held = "none of its commits" if self.held == 0 else f"its commits up to {self.held}"
        return f"pool {self.pool!r}: acknowledged up to commit {self.acknowledged}, Redis holds {held}"


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
        self.missing: list[Lost | LostPool] = []
        #: pool -> commit counter of its last commit acknowledged (``committed`` then ``acked``), and those of
        #: them not yet written to the marks
        self.gens: dict[str, int] = {}
        self._unwritten: dict[str, int] = {}
        self._gens_due = 0.0  # monotonic time from which they go with a batch's marks again
        #: per batch committed and not yet acknowledged: its highest offsets, its pools' counters
        self._pending: list[tuple[dict[str, int], Mapping[str, int]]] = []
        self.since = 0.0  # wall time the loss was found
        self.checks = 0  # checks after restarts (observability, tests)
        #: the input partitions (topic, partition) whose first records this worker took since it got them
        self._taken_up: set[tuple[str, int]] = set()

    @property
    def unacknowledged_batches(self) -> int:
        """Batches committed whose pools' counters wait for their acknowledgement (``committed``, ``acked``)."""
        return len(self._pending)

    def committed(self, msgs: Iterable[_Offsets], gens: Mapping[str, int]) -> dict[str, int]:
        """A batch's commits landed, raising its pools' counters to ``gens``: they count once it is acknowledged.
        Returns the batch's highest offsets (for its ``mark``)."""
        offsets = highest_offsets(msgs)
        if gens:
            self._pending.append((offsets, gens))
        return offsets

    def acked(self, records: Iterable[_Offsets]) -> None:
        """Records acknowledged to Kafka (their offsets may be committed from now on). A batch is acknowledged
        whole, in order, once its commits are on disk (stream.service.durability): a batch with any record
        acknowledged has its counters acknowledged (those of a halted partition never are)."""
        for tp, off in highest_offsets(records).items():
            if off > self.acknowledged.get(tp, -1):
                self.acknowledged[tp] = off
        if not self._pending:
            return
        keep = []
        for offsets, gens in self._pending:
            if not any(self.acknowledged.get(tp, -1) >= off for tp, off in offsets.items()):
                keep.append((offsets, gens))
                continue
            for pool, gen in gens.items():
                if gen > self.gens.get(pool, 0):
                    self.gens[pool] = self._unwritten[pool] = gen
        self._pending = keep

    def rewound(self) -> None:
        """The batches not acknowledged were taken back (Redis restarted): their counters may be lost, never count."""
        self._pending.clear()

    def forget(self, sources: Iterable[tuple[str, int]]) -> None:
        """Partitions revoked: their next owner compares its own acknowledgements."""
        gone = set()
        for topic, partition in sources:
            gone.add(f"{topic}/{partition}")
            self.acknowledged.pop(f"{topic}/{partition}", None)
            self._taken_up.discard((topic, partition))
        self._pending = [(o, g) for o, g in self._pending if gone.isdisjoint(o)]

    async def taken_up(self, records: Iterable[_Offsets],
                       earliest: Callable[[list[tuple[str, int]]], Awaitable[Mapping[tuple[str, int], int]]],
                       on_lost: Any = None, on_whole: Any = None) -> None:
        """The first records of input partitions this worker got (its start, a rebalance), before any is rated:
        a first record past the partition's earliest offset (``earliest``: the broker's) stands where the
        group's committed offset was, so the records before it were acknowledged and are checked as after a
        restart (``wait_until_whole``; module docstring). Redis unavailable: checked with their next records."""
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

    async def mark(self, msgs: Iterable[_Offsets] | Mapping[str, int]) -> None:
        """Write the marks of a batch whose commits all landed (its messages, or their ``highest_offsets``);
        retried while Redis is unavailable. A restart of the server ends the attempts: the batch is taken back
        and rated (and marked) again."""
        offsets = msgs if isinstance(msgs, Mapping) else highest_offsets(msgs)
        delay, most = MARK_BACKOFF
        while True:
            gens = self._due()
            try:
                await write_marks(self.store, {**offsets, **{POOL_FIELD + p: g for p, g in gens.items()}})
                self._written(gens)
                return
            except StoreRestarted:  # Superseded included: the rewind takes the batch back
                return
            except StoreUnavailable as exc:
                log.warning("writing the state marks: Redis unavailable (%r); trying again in %.2f s", exc, delay)
                await asyncio.sleep(delay)
                delay = min(delay * 2, most)

    async def flush(self) -> None:
        """Write the counters acknowledged since they were last written when no batch carried them (the worker's
        housekeeping tick), so that a worker started after this one stopped compares them too. Redis unavailable
        (or restarted): left for the next batch or tick."""
        gens = self._due()
        if gens:
            try:
                await write_marks(self.store, {POOL_FIELD + p: g for p, g in gens.items()})
            except StoreUnavailable as exc:
                log.debug("writing the pools' counters into the state marks: %r", exc)
                return
            self._written(gens)

    def _due(self) -> dict[str, int]:
        """The counters acknowledged since they were last written, at most every GENS_EVERY_S (a field per pool)."""
        return dict(self._unwritten) if time.monotonic() >= self._gens_due else {}

    def _written(self, gens: Mapping[str, int]) -> None:
        if gens:
            self._gens_due = time.monotonic() + GENS_EVERY_S
        for p, g in gens.items():
            if self._unwritten.get(p) == g:
                del self._unwritten[p]

    @property
    def reason(self) -> str | None:
        """Why the worker does not rate (readiness), or None."""
        if not self.missing:
            return None
        shown = "; ".join(map(str, self.missing[:4])) + (f"; and {len(self.missing) - 4} more"
                                                           if len(self.missing) > 4 else "")
        return (f"Redis lost acknowledged writes ({shown}): not rating until the state is rebuilt "
                "(mmr rebuild; docs/operator.md, 'Redis lost acknowledged writes')")

    @property
    def lost_partitions(self) -> int:
        return sum(isinstance(x, Lost) for x in self.missing)

    @property
    def lost_pools(self) -> int:
        return sum(isinstance(x, LostPool) for x in self.missing)

    async def check(self) -> list[Lost | LostPool]:
        """Compare the server's marks and pool counters with what was acknowledged (StoreUnavailable: not answered);
        a pool newly found lost is recorded in the marks."""
        marks = await self._read()
        self.checks += 1
        flagged = {k[len(LOST_FIELD):]: v for k, v in marks.items() if k.startswith(LOST_FIELD)}
        if not flagged and self.lost_pools:  # a rebuild removed them: the counters of before are void
            self._rebuilt()
        acked = {k[len(POOL_FIELD):]: v for k, v in marks.items() if k.startswith(POOL_FIELD)}
        for pool, gen in (*self.gens.items(), *flagged.items()):
            acked[pool] = max(gen, acked.get(pool, 0))
        with self.store.errors():
            held = await read_gens(self.reads, self.store.keys, acked)
            pools = [LostPool(p, g, held[p]) for p, g in sorted(acked.items()) if p in flagged or held[p] < g]
            found = {LOST_FIELD + x.pool: x.acknowledged for x in pools if x.pool not in flagged}
            if found:  # every worker that checks sees it, until a rebuild
                await self.reads.hset(marks_key(self.store.prefix), mapping=found)
        return [*lost(self.acknowledged, marks), *pools]

    def _rebuilt(self) -> None:
        self.gens.clear()
        self._unwritten.clear()
        self._pending.clear()

    async def _read(self) -> dict[str, int]:
        """The server's marks through ``reads``."""
        with self.store.errors():
            return await read_marks(self.reads, self.store.prefix)

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
                    self._rebuilt()
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
