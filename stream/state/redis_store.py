"""Redis state of the service: encoded beliefs, leaderboards, and what makes re-delivery a no-op.

Key layout (every key of a pool carries the hash tag ``{pool}`` so that everything one batch
touches lives in one Redis Cluster slot and one transaction can update it atomically; pool,
player and round names are escaped so that no two names share a key: stream.state.keys)::

    {prefix}:{<pool>}:p:<player>      STRING  encoded belief (stream.ratings.codec), one per player
    {prefix}:{<pool>}:lb              ZSET    player -> displayed rating (the leaderboard; members unescaped)
    {prefix}:{<pool>}:ids             STRING  event ids already applied (rounds, matches, round results):
                                              their 16-byte digests, appended (stream.state.id_index)
    {prefix}:{<pool>}:ids:old         STRING  the previous generation of ``:ids`` (MMR_SEEN_MAX_IDS only)
    {prefix}:{<pool>}:ids:epoch       STRING  how many times ``:ids`` was rotated (MMR_SEEN_MAX_IDS only)
    {prefix}:{<pool>}:gen             STRING  commit counter; the compare-and-set token of a batch
    {prefix}:{<pool>}:wm              HASH    "topic/partition" -> highest input offset of the pool applied
    {prefix}:{<pool>}:chg             HASH    player -> the explanation of their latest change (JSON
                                              ``[version, event_id, time, {the fields of stream.engine.explain}]``),
                                              written by the commit with the belief (members unescaped)
    {prefix}:{<pool>}:adv             HASH    side -> its learned advantage, '<dd' mean and variance (bit for bit;
                                              stream.ratings.advantage), written by the commit that learned it
    {prefix}:{<pool>}:meta            HASH    system, params (JSON): fixed at the pool's first commit;
                                              keys: the key format (stream.state.keys.KEY_FORMAT)
    {prefix}:{<pool>}:pend:<round_id> HASH    results of a round still being assembled (event_id -> JSON)
    {prefix}:{<pool>}:done            SET     round ids already rated or expired (late results -> DLQ)
    {prefix}:{<pool>}:done:old        SET     the previous generation of ``:done`` (MMR_SEEN_MAX_IDS only)
    {prefix}:{<pool>}:open            ZSET    round id -> ms its first result was saved: the rounds with a
                                              ``pend`` hash (added with it, removed when the round is done)
    {prefix}:open-rounds:<topic>/<p>  ZSET    pool -> earliest ``open`` time (ms) of its rounds from that input
                                              partition; a hint, written before the round's ``open`` entry
                                              (outside any pool slot): what round expiry sweeps
                                              (stream.state.round_state)
    {prefix}:{<pool>}:h:<player>      LIST    the player's last ``history_limit`` published ratings, oldest
                                              first (MMR_HISTORY_LIMIT; written by the commit with the belief:
                                              stream.state.history)
    {prefix}:pools                    SET     pool names (outside any pool slot; written idempotently,
                                              before the pool's first commit)

The rest of the store: the history lists in stream.state.history, the console's reads in
stream.state.pool_reads, rounds being assembled in stream.state.round_state,
the writes the replicas confirm (``WAIT``: replication is asynchronous, and the worker acks only what
the replicas hold) in stream.state.replication, the errors in stream.state.store_errors. Errors of
Redis itself are ``StoreUnavailable`` from every method (stream.state.redis_client): retry later.

A commit is one transaction on one connection of the slot's master: WATCH of the pool's keys, a
check script (``COMMIT_CHECK_LUA``: ``gen``, the log of applied ids, the offsets, the meta), and only
when it passed MULTI, the apply script (``COMMIT_APPLY_LUA``: ids, rounds done, watermarks, meta,
``gen``), the beliefs, leaderboard scores and explanations as plain MSET/ZADD/HSET (``bulk_commands``),
EXEC. Why not one script: a script cutting tens of thousands of values out of its arguments costs
Redis more CPU than the same writes sent as commands. The scores go in ascending order: a sorted set
whose members arrive in score order finds each one's place along the path the one before it took.
WATCH makes EXEC write nothing when a key changed after the check (another writer, a round opened
meanwhile); the commit is then checked again. A ``gen`` moved since the caller's read is a
``Conflict``: it re-reads and recomputes. Event ids go in the same transaction as the beliefs, so a
batch is applied with its ids or not at all; the per-player version is the ``rounds`` counter inside
the belief, so it moves with it.

Neither a script nor a transaction is rolled back when a command in it fails, so the check looks
first at everything that could make a write fail (the type of every key written, the numbers
incremented or compared): a pool whose keys hold something else is refused with ``StateError`` and
left as it was. Pending-round keys are built inside the apply script from a prefix carrying the
pool's hash tag, so they are in the slot of the declared keys (Redis Cluster refuses only
cross-slot access).

A pool's meta records the key format (``keys``): ``meta`` (called before anything touches a pool) and
the commit's check refuse a pool of another format.

Which ids were applied is answered by the worker's index of the ``:ids`` log (stream.state.id_index),
not by Redis. The commit also advances the pool's highest applied offset per topic/partition
(``:wm``); a commit given a first offset to check is refused when that offset is at or below it.

With ``seen_max_ids`` (MMR_SEEN_MAX_IDS) ``:ids`` is kept in two generations: the commit that fills
it renames it to ``:ids:old`` (unlinking the one before) and increments ``:ids:epoch``; both are
checked. So an event is recognised as long as fewer than ``seen_max_ids`` ids were recorded after it.
``:done`` rotates into ``:done:old`` the same way: a result arriving after that many newer rounds
of its pool were closed opens its round again, which then times out instead of being "late".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import struct
from collections.abc import AsyncIterator, Awaitable, Callable, Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import hiredis
import numpy as np
import orjson
from redis.asyncio.cluster import RedisCluster
from redis.exceptions import ResponseError

from stream.runtime import thread_names
from stream.state.fence import ServerFence, fence_cluster
from stream.state.history import HISTORY_LIMIT, history_command, history_rows
from stream.state.id_index import PoolIds, digests, keys_of
from stream.state.keys import KEY_FORMAT, KeySpace, check_prefix, escape, escape_all, strings_blob
from stream.state.pool_reads import PoolReads
from stream.state.redis_client import AnyRedis, CredentialsRefused, connect, infrastructure_errors, is_cluster
from stream.state.redis_scripts import (
    BELIEFS_LUA,
    COMMIT_APPLY_LUA,
    COMMIT_CHECK_LUA,
    EXPIRE_LUA,
    SNAPSHOT_LUA,
)
from stream.state.replication import Command, Exchange, ReplicatedWrites
from stream.state.round_state import RoundState
from stream.state.store_errors import AlreadyApplied, Conflict, MetaConflict, StateError, raise_state

log = logging.getLogger(__name__)

#: transactions of one commit that a change of a watched key voided, before it counts as a conflict
COMMIT_TRIES = 5


@dataclass(slots=True)
class Snapshot:
    """What one read pipeline returned for a pool."""

    gen: str
    beliefs: dict[str, bytes | None]
    seen: set[str]
    watermarks: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> highest offset applied
    advantages: dict[bytes, bytes] | None = None  # ``:adv`` (None: not asked)


@dataclass(slots=True)
class Commit:
    """One atomic step for one pool."""

    beliefs: dict[str, bytes] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)  # leaderboard values
    event_ids: list[str] = field(default_factory=list)
    done_rounds: list[str] = field(default_factory=list)  # also deletes their pending hashes
    #: "topic/partition" -> (first offset to check or None, last offset): the pool's messages of the
    #: batch. The last offsets advance ``:wm``; ``check_ids`` also refuses the commit when a first
    #: offset is at or below the stored watermark (the worker gives none: it recognises events by id).
    offsets: dict[str, tuple[int | None, int]] = field(default_factory=dict)
    #: player -> the explanation of their change (``:chg``; stream.service.step_rating.change_records)
    changes: Mapping[str, bytes] = field(default_factory=dict)
    #: the ratings the step publishes (``RatingOutput`` rows): the players' history
    #: records, appended in the commit's transaction (stream.state.history; none where it is empty)
    published: Sequence[Any] = ()
    #: side -> its learned advantage's stored bytes: the sides the step changed (HSET into ``:adv``)
    advantages: dict[str, bytes] = field(default_factory=dict)


class RedisStore(RoundState, ReplicatedWrites, PoolReads):
    """Async access to the layout above on a single server or a Redis Cluster (stream.state.redis_client).
    ``StateError``: the pool's stored keys are unusable (nothing written)."""

    def __init__(self, client: AnyRedis, prefix: str = "mmr", seen_max_ids: int = 0,
                 min_replicas: int | None = None, wait_timeout_ms: int = 1000,
                 history_limit: int = HISTORY_LIMIT) -> None:
        self.r: Any = client  # redis-py's stubs type replies as bytes | str; ours are bytes (no decode_responses)
        self.keys = KeySpace(prefix)
        self.prefix = prefix
        #: ``:ids`` rotates into ``:ids:old`` at this many ids (0: one log, unbounded; module docstring)
        self.seen_max_ids = seen_max_ids
        #: published ratings kept per player (``:h:``; stream.state.history); 0: no history
        self.history_limit = history_limit
        self._snapshot = client.register_script(SNAPSHOT_LUA)
        self._beliefs = client.register_script(BELIEFS_LUA)
        self._expire = client.register_script(EXPIRE_LUA)
        #: per pool: the applied event ids as of a known prefix of its ``:ids`` log (stream.state.id_index)
        self._ids: dict[str, PoolIds] = {}
        #: the thread that writes commits' bulk frames (``_write``), made at the first commit, ended by ``close``
        self._frames: ThreadPoolExecutor | None = None
        #: a cluster client learns the slot map before its first commands run concurrently (redis-py's
        #: asyncio cluster client, 8.1, broke connections when dozens of first commands raced its setup)
        self._cold = isinstance(client, RedisCluster)
        self._warming: asyncio.Lock | None = None
        #: replicas a write must reach before it counts as done (None: 1 if the master has one, else 0)
        self.min_replicas = min_replicas
        self.wait_timeout_ms = wait_timeout_ms
        #: per master (node name; "" for a single server): (when asked, connected replicas)
        self._replicas: dict[str, tuple[float, int]] = {}
        #: pools with a write that may not have reached the replicas yet (stream.state.replication)
        self._unconfirmed: set[str] = set()
        #: checks every new connection for a restarted server (stream.state.fence); None: not checked
        self.fence: ServerFence | None = None
        #: told of every refusal of the credentials met by ``_io`` (the worker stops on it); still raised
        self.on_refused: Callable[[CredentialsRefused], None] | None = None
        #: pools whose keys ``meta`` found in the current format (or absent): round assembly, which can
        #: touch a pool before its first step does, reads ``meta`` first for the others
        self._current: set[str] = set()

    @classmethod
    def from_url(cls, url: str, prefix: str = "mmr", seen_max_ids: int = 0, cluster: bool | None = None,
                 min_replicas: int | None = None, wait_timeout_ms: int = 1000, fence: ServerFence | None = None,
                 history_limit: int = HISTORY_LIMIT, **kwargs: Any) -> RedisStore:
        """A store on ``url``: a Redis Cluster when ``cluster`` (None: ask the server; see ``connect``).
        ``min_replicas``/``wait_timeout_ms``: stream.state.replication (None: 1 if the master has a replica).
        ``fence``: every new connection checks that its server did not restart (stream.state.fence)."""
        check_prefix(prefix)
        if fence is not None:
            if cluster is None:
                cluster = is_cluster(url, **kwargs)
            if not cluster:
                kwargs["redis_connect_func"] = fence.on_connect
        client = connect(url, cluster, **kwargs)
        if fence is not None and isinstance(client, RedisCluster):
            fence_cluster(client, fence)
        store = cls(client, prefix, seen_max_ids, min_replicas, wait_timeout_ms, history_limit)
        store.fence = fence
        return store

    @contextlib.asynccontextmanager
    async def _io(self) -> AsyncIterator[None]:
        """Around every use of Redis: ``errors``; a cluster's slot map first; work begun before a restart
        of the server refused (``fence.Superseded``)."""
        if self.fence is not None:
            self.fence.guard()
        with self.errors():
            if self._cold:
                self._warming = self._warming or asyncio.Lock()
                async with self._warming:
                    if self._cold:
                        await self.r.initialize()
                        self._cold = False
            yield

    @contextlib.contextmanager
    def errors(self) -> Iterator[None]:
        """Infrastructure errors as StoreUnavailable; refused credentials also told to ``on_refused``."""
        try:
            with infrastructure_errors():
                yield
        except CredentialsRefused as exc:
            if self.on_refused is not None:
                self.on_refused(exc)
            raise

    @property
    def is_cluster(self) -> bool:
        return isinstance(self.r, RedisCluster)

    async def close(self) -> None:
        await self.r.aclose()
        if self._frames is not None:
            self._frames.shutdown(wait=True)  # (a frames pass takes milliseconds)
            self._frames = None

    async def ping(self) -> bool:
        """Whether Redis answers (every node of a cluster)."""
        async with self._io():
            return bool(await self.r.ping())

    # --- keys ------------------------------------------------------------------------
    def key(self, pool: str, suffix: str) -> str:
        return self.keys.key(pool, suffix)

    def player_key(self, pool: str, player: str) -> str:
        return self.keys.player_key(pool, player)

    # --- reads -----------------------------------------------------------------------
    async def snapshot(self, pool: str, players: Sequence[str], event_ids: Sequence[str],
                       watermarks: Sequence[str] = (), advantages: bool = False) -> Snapshot:
        """gen, which of ``event_ids`` were applied, beliefs, the watermarks asked for and (with
        ``advantages``) the learned side advantages, in one atomic round trip (``SNAPSHOT_LUA``; the
        names as blobs, as ``beliefs``). The ids are not sent: the script returns what the pool's
        ``:ids`` log gained since this store's index of it, which answers."""
        async with self._io():
            return await self._read(pool, list(players), event_ids, list(watermarks), advantages)

    async def _read(self, pool: str, players: list[str], event_ids: Sequence[str], fields: list[str],
                    advantages: bool = False) -> Snapshot:
        await self._confirm(pool)
        idx = self._ids.get(pool)
        held = (str(idx.epoch), idx.length) if idx is not None else ("", 0)
        try:
            res = await self._snapshot(keys=[self.key(pool, "gen"), self.key(pool, "ids"), self.key(pool, "wm"),
                                             self.key(pool, "ids:old"), self.key(pool, "ids:epoch"),
                                             self.key(pool, "adv")],
                                       args=[self.keys.player_prefix(pool), held[0], held[1],
                                             len(players), strings_blob(escape_all(players)), len(fields),
                                             strings_blob(fields), "1" if advantages else ""])
        except ResponseError as exc:
            if not str(exc).startswith("WRONGTYPE"):
                raise
            raise StateError(pool, f"a key holds another type than the store writes: {exc}") from exc
        gen = res[0].decode() if isinstance(res[0], bytes) else str(res[0])
        epoch = int(res[1])
        if int(res[2]):  # both generations in full: the index starts again from them
            idx = self._ids[pool] = PoolIds(epoch, res[3] or b"", res[4] or b"")
        elif idx is not None and self._ids.get(pool) is idx and (str(idx.epoch), idx.length) == held:
            idx.append(res[3] or b"")
        else:  # the index changed while this read was under way: read again from what it holds now
            return await self._read(pool, players, event_ids, fields, advantages)
        seen = _members(idx, event_ids)
        beliefs: dict[str, bytes | None] = dict(zip(players, res[5], strict=True))
        wms = {f: int(v) for f, v in zip(fields, res[6], strict=True) if v}
        adv = None if res[7] is None else dict(zip(res[7][::2], res[7][1::2], strict=True))
        return Snapshot(gen, beliefs, seen, wms, adv)

    def ids_nbytes(self) -> int:
        """Memory of the indexes of applied ids (all pools)."""
        return sum(idx.nbytes for idx in list(self._ids.values()))

    def ids_index(self, pool: str) -> PoolIds | None:
        """This store's index of ``pool``'s applied ids as of its last read (None: not read, or forgotten)."""
        return self._ids.get(pool)

    def forget_ids(self) -> None:
        """Drop every pool's index of applied ids (memory only: the next read of a pool reloads it)."""
        self._ids.clear()

    async def beliefs(self, pool: str, players: Sequence[str]) -> dict[str, bytes | None]:
        """The stored values of ``players`` (None: none), read by ``BELIEFS_LUA``: the names go as one
        argument, not one each (redis-py packs each argument in Python)."""
        if not players:
            return {}
        async with self._io():
            vals = await self._beliefs(keys=[self.key(pool, "gen")],
                                       args=[self.keys.player_prefix(pool), len(players),
                                             strings_blob(escape_all(list(players)))])
        return dict(zip(players, vals, strict=True))

    async def changes(self, pool: str, players: Sequence[str]) -> dict[str, bytes | None]:
        """The explanation of each player's latest change (``:chg``; None: none stored)."""
        if not players:
            return {}
        async with self._io():
            vals = await self.r.hmget(self.key(pool, "chg"), list(players))
        return dict(zip(players, vals, strict=True))

    async def player(self, pool: str, player: str) -> tuple[bytes | None, bytes | None]:
        """A player's stored belief and the explanation of their latest change, in one pipeline (a
        commit landing between the two commands pairs them wrongly: the caller compares versions)."""
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            pipe.get(self.player_key(pool, player))
            pipe.hget(self.key(pool, "chg"), player)
            raw, change = await pipe.execute()
        return raw, change

    async def meta(self, pool: str) -> dict[str, Any] | None:
        """The pool's system and parameters (None: a new pool). StateError: a meta without the current
        key format (a pool of a pre-release build, whose names were not escaped, is not migrated)."""
        async with self._io():
            try:
                raw = dict(await self.r.hgetall(self.key(pool, "meta")))
            except ResponseError as exc:
                raise_state(pool, exc)
            if raw and raw.get(b"keys") != KEY_FORMAT.encode():
                fmt = raw.get(b"keys", b"none").decode()
                raise StateError(pool, f"key format {fmt!r}, this version reads {KEY_FORMAT!r} (state of a "
                                 "pre-release build: run `mmr rebuild --wipe`)")
        self._current.add(pool)
        return None if not raw else {"system": raw[b"system"].decode(), "params": orjson.loads(raw[b"params"])}

    async def pools(self) -> list[str]:
        async with self._io():
            return sorted(p.decode() for p in await self.r.smembers(self.keys.pools_key()))

    async def page(self, pool: str, offset: int, n: int) -> tuple[list[tuple[str, float]], int]:
        """``n`` leaderboard entries from place ``offset`` on (0 = the best), and how many there are."""
        key = self.key(pool, "lb")
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            pipe.zrevrange(key, offset, offset + max(n, 1) - 1, withscores=True)
            pipe.zcard(key)
            rows, total = await pipe.execute()
        return [(p.decode(), float(s)) for p, s in rows], int(total)

    async def rank(self, pool: str, player: str) -> tuple[int, int, float, int] | None:
        """``(rank, offset, score, total)`` of a player on the leaderboard (None: not on it).

        ``rank`` = 1 + players with a higher score (ties share it); ``offset`` = the player's place
        in ``page``'s order. Two round trips: a commit in between can shift ``rank``."""
        key = self.key(pool, "lb")
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            pipe.zscore(key, player)
            pipe.zrevrank(key, player)
            pipe.zcard(key)
            score, offset, total = await pipe.execute()
            if score is None or offset is None:
                return None
            higher = await self.r.zcount(key, f"({float(score)!r}", "+inf")
        return min(int(higher), int(offset)) + 1, int(offset), float(score), int(total)

    async def scan_players(self, pool: str, count: int = 1000) -> AsyncIterator[list[tuple[str, bytes]]]:
        """Every stored belief of a pool, in chunks: the leaderboard's members (ZSCAN, each once) and
        their values (MGET): keys of the pool's slot only, so the cost is the pool's size, not the keyspace's."""
        lb = self.key(pool, "lb")
        seen: set[str] = set()
        cursor = 0
        while True:
            async with self._io():
                cursor, rows = await self.r.zscan(lb, cursor, count=count)
                names = [n for n in (m.decode() for m, _ in rows) if n not in seen]
                vals = await self.r.mget(self.keys.player_keys(pool, names)) if names else []
            seen.update(names)
            chunk = [(n, v) for n, v in zip(names, vals, strict=True) if v is not None]
            if chunk:
                yield chunk
            if cursor == 0:
                break

    # --- the atomic step ------------------------------------------------------------
    async def commit(self, pool: str, gen: str, c: Commit, meta: dict[str, Any] | None = None,
                     check_ids: bool = False) -> int:
        """Apply one batch atomically (module docstring); returns the pool's new ``gen``.

        Conflict: ``gen`` moved since the snapshot (MetaConflict: the pool was first committed with
        another system). ``check_ids``: the caller did not read which event ids (or, for offsets with a
        first offset, which messages) were applied, so they are checked first; AlreadyApplied (nothing
        written) if any was, or if the log is not the prefix the index holds: the caller re-reads."""
        async with self._io():
            return await self._write(pool, gen, c, meta, check_ids)

    async def _write(self, pool: str, gen: str, c: Commit, meta: dict[str, Any] | None, check_ids: bool) -> int:
        await self._confirm(pool)
        idx = self._ids.get(pool)
        if idx is None and check_ids and c.event_ids:
            await self._read(pool, [], (), [])  # loads the index
            idx = self._ids[pool]
        digest_blob = digests(c.event_ids)
        if check_ids and idx is not None and idx.contains(keys_of(digest_blob)).any():
            raise AlreadyApplied(pool)
        held = (str(idx.epoch), idx.length) if idx is not None else ("", 0)
        keys = [self.key(pool, s)
                for s in ("gen", "ids", "lb", "done", "wm", "meta", "ids:old", "ids:epoch", "done:old", "chg", "adv")]
        meta_json = ""
        if meta is not None:
            params_json = orjson.dumps(meta["params"]).decode()
            meta_json = orjson.dumps({"system": meta["system"], "params": params_json}).decode()
            # listed before its first commit, by its own idempotent command (another slot than the pool's):
            # a listed pool without meta is skipped by its readers, a committed pool is always listed
            await self._list_pool(pool)
        offsets = [str(x) for tp, (first, last) in c.offsets.items()
                   for x in (tp, "" if first is None else first, last)]
        # the bulk commands are packed on the store's thread while the WATCH and the check make their round
        # trip: the event loop meanwhile hands the next step to the rating thread
        if self._frames is None:
            self._frames = thread_names.named_executor(thread_names.FRAMES)
        bulk = asyncio.get_running_loop().run_in_executor(
            self._frames, bulk_commands, c, self.keys.player_prefix(pool).encode(), keys[2].encode(),
            keys[9].encode(), self.keys.history_prefix(pool).encode(), self.history_limit)
        bulk.add_done_callback(_retrieved)  # (a commit refused before its frames are sent never awaits them)
        done = [x for rid in c.done_rounds for x in (rid, escape(rid))]
        offsets_blob = strings_blob(offsets)
        check = ("EVAL", COMMIT_CHECK_LUA, len(keys), *keys, gen, held[0], held[1], "1" if check_ids else "",
                 len(c.offsets), offsets_blob, meta_json, KEY_FORMAT)
        apply = ("EVAL", COMMIT_APPLY_LUA, len(keys), *keys, len(c.done_rounds), len(c.offsets), offsets_blob,
                 meta_json, self.keys.pend_prefix(pool), digest_blob, strings_blob(done), self.seen_max_ids, KEY_FORMAT,
                 len(c.advantages), _pairs_blob(c.advantages))
        watched = ("WATCH", *keys, self.key(pool, "open"))
        try:
            res = (await self._replicated(pool, keys[0], self._transaction(watched, check, apply, bulk),
                                          wrote=_script_wrote))[0]
        except ResponseError as exc:
            raise_state(pool, exc)
        if not isinstance(res, list):
            code = int(res)
            if code == -2:
                raise MetaConflict(pool)
            if code == -3:
                raise AlreadyApplied(pool)
            if code == -4:
                raise StateError(pool, f"its meta holds another key format than {KEY_FORMAT!r} (meta() says which)")
            raise Conflict(pool)
        new_gen, epoch = int(res[0]), int(res[1])
        if idx is not None:
            if self._ids.get(pool) is idx and (str(idx.epoch), idx.length) == held:
                idx.append(digest_blob)  # the log is now exactly what the index holds
                if epoch != idx.epoch:
                    idx.rotate(epoch)
            else:  # the index moved while this commit was under way: reload on the next read
                self._ids.pop(pool, None)
        return new_gen

    def _transaction(self, watched: Command, check: Command, apply: Command,
                     bulk_frames: Awaitable[list[bytes]]) -> Exchange:
        """A commit on one connection: ``watched`` (WATCH) and ``check``; unless the check refused (its
        reply, not 0, is the commit's reply), ``apply`` and the ``bulk`` frames (awaited once the check
        has answered) in one MULTI/EXEC. An EXEC
        that did nothing (a watched key changed in between: a round assembled meanwhile, another writer) is
        tried again from the check, ``COMMIT_TRIES`` times in all; then the reply is -1 (gen moved)."""
        async def exchange(node: Any, need: int) -> list[Any]:
            wait: list[Command] = [("WAIT", need, self.wait_timeout_ms)] if need else []
            async with self._connection(node) as conn:
                for _ in range(COMMIT_TRIES):
                    head = await self._round_trip(conn, [watched, check])
                    refusal = next((r for r in head if isinstance(r, BaseException)), head[1])
                    if refusal != 0:
                        return [refusal, *(await self._round_trip(conn, [("UNWATCH",), *wait]))[1:]]
                    bulk = await bulk_frames
                    replies = await self._round_trip(conn, [("MULTI",), apply, *bulk, ("EXEC",), *wait])
                    done = replies[len(bulk) + 2]
                    error = next((r for r in replies[:len(bulk) + 3] if isinstance(r, BaseException)), None)
                    if error is None and done is not None:
                        error = next((r for r in done if isinstance(r, BaseException)), None)
                    if error is not None:
                        return [error, *replies[len(bulk) + 3:]]
                    if done is not None:
                        return [done[0], *replies[len(bulk) + 3:]]
                return [-1, *replies[len(bulk) + 3:]]
        return exchange

    async def _load_script(self, script: Any, key: str) -> None:
        """Loads ``script`` on the master of ``key``'s slot (a promoted replica or a restarted server may lack it)."""
        if self.is_cluster:
            await self.r.execute_command("SCRIPT", "LOAD", script.script, target_nodes=self.r.get_node_from_key(key))
        else:
            await self.r.script_load(script.script)


def bulk_commands(c: Commit, player_prefix: bytes, lb_key: bytes, chg_key: bytes, history_prefix: bytes,
                  history_limit: int) -> list[bytes]:
    """The commit's bulk writes, packed by hiredis: ``MSET`` of the players' keys to their beliefs,
    ``ZADD lb_key`` of their scores in ascending order, ``HSET chg_key`` of the changes, and with a
    ``history_limit`` the append of their history records (stream.state.history). A NaN score, which
    a sorted set refuses, raises ValueError here, before anything is sent."""
    players = list(c.beliefs)
    scores = np.array(list(map(c.scores.__getitem__, players)), dtype=np.float64).reshape(-1)
    if np.isnan(scores).any():
        raise ValueError("a leaderboard score is NaN")
    order = np.argsort(scores, kind="stable").tolist()
    players = [players[i] for i in order]
    commands: list[tuple[Any, ...]] = []
    if players:
        keys = [player_prefix + k.encode() for k in escape_all(players)]
        mset: list[Any] = [b""] * (2 * len(players))
        mset[0::2], mset[1::2] = keys, list(map(c.beliefs.__getitem__, players))
        zadd: list[Any] = [b""] * (2 * len(players))
        zadd[0::2], zadd[1::2] = scores[order].tolist(), players
        commands += [("MSET", *mset), ("ZADD", lb_key, *zadd)]
    if c.changes:
        hset: list[Any] = [b""] * (2 * len(c.changes))
        hset[0::2], hset[1::2] = list(c.changes), list(c.changes.values())
        commands.append(("HSET", chg_key, *hset))
    rows = history_rows(c.published, c.beliefs) if history_limit > 0 else None
    if rows is not None:
        commands.append(history_command(rows, history_limit, history_prefix, chg_key))
    return [hiredis.pack_command(cmd) for cmd in commands]


def _retrieved(done: asyncio.Future[Any]) -> None:
    """Marks ``done``'s outcome as seen: where its awaiter raises, it is that awaiter's to report."""
    if not done.cancelled():
        done.exception()


def _script_wrote(replies: list[Any]) -> bool:
    """Whether the commit wrote (its reply is then the apply script's list; a refusal code otherwise)."""
    return isinstance(replies[0], list)


def _pairs_blob(pairs: Mapping[str, bytes]) -> bytes:
    """``strings_blob`` of each name (UTF-8) and its value (bytes as they are), one after the other."""
    enc = [x for k, v in pairs.items() for x in (k.encode(), v)]
    return struct.pack(f"<{len(enc)}I", *map(len, enc)) + b"".join(enc)


def _members(idx: PoolIds, event_ids: Sequence[str]) -> set[str]:
    """Which of ``event_ids`` the index holds."""
    if not event_ids:
        return set()
    flags = idx.contains(keys_of(digests(event_ids)))
    return {e for e, f in zip(event_ids, flags.tolist(), strict=True) if f}
