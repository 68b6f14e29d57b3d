"""Redis state of the service: encoded beliefs, leaderboards, and what makes re-delivery a no-op.

Key layout (every key of a pool carries the hash tag ``{pool}`` so that everything one batch
touches lives in one Redis Cluster slot and one Lua script can update it atomically)::

    {prefix}:{<pool>}:p:<player>      STRING  encoded belief (stream.state.codecs), one per player
    {prefix}:{<pool>}:lb              ZSET    player -> displayed rating (the leaderboard)
    {prefix}:{<pool>}:ids             STRING  event ids already applied (rounds, matches, round results):
                                              their 16-byte digests, appended (stream.state.id_index)
    {prefix}:{<pool>}:ids:old         STRING  the previous generation of ``:ids`` (MMR_SEEN_MAX_IDS only)
    {prefix}:{<pool>}:ids:epoch       STRING  how many times ``:ids`` was rotated (MMR_SEEN_MAX_IDS only)
    {prefix}:{<pool>}:gen             STRING  commit counter; the compare-and-set token of a batch
    {prefix}:{<pool>}:wm              HASH    "topic/partition" -> highest input offset of the pool applied
    {prefix}:{<pool>}:meta            HASH    system, params (JSON): fixed at the pool's first commit
    {prefix}:{<pool>}:pend:<round_id> HASH    results of a round still being assembled (event_id -> JSON)
    {prefix}:{<pool>}:done            SET     round ids already rated or expired (late results -> DLQ)
    {prefix}:pools                    SET     pool names (outside any pool slot; written idempotently)

Player and pending-round keys are built inside the script from prefixes carrying the pool's
hash tag, so they are in the slot of the declared keys (Redis Cluster executes scripts that
touch undeclared keys of the same slot; it refuses only cross-slot access).

The per-player version is the ``rounds`` counter inside the belief, so it moves atomically
with the belief itself.

Why a compare-and-set on ``gen`` rather than MULTI/WATCH: the read (GET gen, the new tail of
``:ids``, MGET beliefs) is one read script (one round trip), the math runs outside Redis, and the commit
is one EVALSHA that refuses to write when anything committed to the pool in between
(a concurrent agent of this worker, or a second worker during a rebalance). The caller
then re-reads and recomputes. Event ids are recorded in the same script as the beliefs,
so a batch is either fully applied with its ids or not at all, and a re-delivered or
re-published event is filtered out before any math.

Which ids were applied is answered by the worker's own index of the ``:ids`` log
(``stream.state.id_index.PoolIds``, one per pool in ``RedisStore``), not by Redis: the read
returns the bytes appended since the prefix the index holds, and the commit refuses (as
``AlreadyApplied``: re-read) unless the log is still exactly that prefix, so no answer is
acted on once it is stale. Recording an id is then an ``APPEND`` of 16 bytes instead of a
``SADD`` (~1.2-2.4 µs of Redis an id, waited for by every batch).

With ``MMR_DEDUP=offsets`` (stream.service.config) matches are not recorded by event id:
a pool's events of one topic/partition are applied strictly in offset order, so the pool's
highest applied offset there (``:wm``) tells a re-delivered message from a new one. The
commit then checks and advances those watermarks instead of appending ids to ``:ids``.

``:ids`` grows by one digest per event. With ``seen_max_ids`` (MMR_SEEN_MAX_IDS) set it is kept
in two generations: once ``:ids`` holds that many ids, the commit that filled it renames it
to ``:ids:old`` (the generation before is unlinked: freed in Redis's background thread),
starts an empty ``:ids`` and increments ``:ids:epoch``; both generations are checked. So a
pool keeps at most twice that many ids plus one batch, and an event is recognised as long as
fewer than ``seen_max_ids`` ids were recorded after it; one re-sent later than that is
applied again.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from itertools import chain
from typing import Any

import numpy as np
import orjson
import redis.asyncio as aioredis

from stream.state.id_index import DIGEST, PoolIds, digests, keys_of

# KEYS: gen, ids, lb, done, wm, meta, ids:old, ids:epoch (all in the pool's slot; player and pending-round keys
#       are built in the script from ARGV[9]/ARGV[10], which carry the same hash tag -- see the module docstring)
# ARGV: 1 expected gen, 2 n_players, 3 expected ids epoch ('' = do not check the log), 4 n_done, 5 '1' = check
#       the offsets first (else ''), 6 n_offsets, 7 offsets blob (per topic/partition three strings: field, first
#       offset to check ('' = none), last offset), 8 meta JSON ("" = keep), 9 player key prefix, 10 pending-round
#       key prefix, 11 players blob, 12 the new ids' digests (16 bytes each, appended to ``:ids``), 13
#       done-rounds blob, 14 seen_max_ids ('0' = unbounded; see the module docstring), 15 expected length of
#       ``:ids`` in bytes (with ARGV[3]). Blobs: all little-endian u32 lengths first, then the bytes (players:
#       three lengths per player -- name, value, score text -- then the three strings per player). One argument
#       instead of thousands: redis-py packs arguments one by one in Python, which cost ~80 ms for a round of
#       3,000 players.
# Returns -1 (gen moved), -2 (another system), -3 (the ids log or an offset is not what the caller checked
# against), or {new gen, ids epoch}.
# A blob of n strings (n little-endian u32 lengths, then the bytes) → a Lua list; both scripts use it.
_ITEMS_LUA = """
local function items(b, n)
  local out = {}
  local p = 4 * n + 1
  for i = 1, n do
    local l = struct.unpack('<I4', b, 4 * i - 3)
    out[i] = string.sub(b, p, p + l - 1)
    p = p + l
  end
  return out
end
"""

_COMMIT_LUA = _ITEMS_LUA + """
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then return -1 end
if ARGV[8] ~= '' and redis.call('EXISTS', KEYS[6]) == 1 then
  local m = cjson.decode(ARGV[8])
  local cur = redis.call('HMGET', KEYS[6], 'system', 'params')
  if cur[1] ~= m['system'] or cur[2] ~= m['params'] then return -2 end
end
if ARGV[3] ~= '' then
  -- the caller's "not applied before" was answered from this prefix of the log: still all of it?
  local ep = redis.call('GET', KEYS[8]) or '0'
  if ep ~= ARGV[3] or redis.call('STRLEN', KEYS[2]) ~= tonumber(ARGV[15]) then return -3 end
end
local np = tonumber(ARGV[2])
local nd = tonumber(ARGV[4])
local offs = items(ARGV[7], 3 * tonumber(ARGV[6]))
if ARGV[5] == '1' then
  -- optimistic commit (no read before it): refuse if any message was applied already
  for k = 1, #offs, 3 do
    if offs[k + 1] ~= '' then
      local wm = redis.call('HGET', KEYS[5], offs[k])
      if wm and tonumber(wm) >= tonumber(offs[k + 1]) then return -3 end
    end
  end
end
local pkey = ARGV[9]
local blob = ARGV[11]
local pos = 12 * np + 1
-- beliefs and leaderboard entries in bulk: one MSET and one ZADD per ~2,000 players instead of a
-- SET and a ZADD per player (each redis.call costs ~1-2 us of Lua/command dispatch)
local kv, zs = {}, {}
local function flush()
  if #kv > 0 then
    redis.call('MSET', unpack(kv))
    redis.call('ZADD', KEYS[3], unpack(zs))
    kv, zs = {}, {}
  end
end
for i = 1, np do
  local nl, vl, sl = struct.unpack('<I4I4I4', blob, 12 * i - 11)
  local name = string.sub(blob, pos, pos + nl - 1)
  pos = pos + nl
  kv[#kv + 1] = pkey .. name
  kv[#kv + 1] = string.sub(blob, pos, pos + vl - 1)
  pos = pos + vl
  zs[#zs + 1] = string.sub(blob, pos, pos + sl - 1)
  zs[#zs + 1] = name
  pos = pos + sl
  if #kv >= 4000 then flush() end
end
flush()
local cap = tonumber(ARGV[14])
if #ARGV[12] > 0 then
  local len = redis.call('APPEND', KEYS[2], ARGV[12])
  if cap > 0 and len >= 16 * cap then
    redis.call('UNLINK', KEYS[7])
    redis.call('RENAME', KEYS[2], KEYS[7])
    redis.call('INCR', KEYS[8])
  end
end
local done = items(ARGV[13], nd)
for k = 1, nd do
  redis.call('DEL', ARGV[10] .. done[k])
  redis.call('SADD', KEYS[4], done[k])
end
for k = 1, #offs, 3 do
  local old = redis.call('HGET', KEYS[5], offs[k])
  if not old or tonumber(offs[k + 2]) > tonumber(old) then redis.call('HSET', KEYS[5], offs[k], offs[k + 2]) end
end
if ARGV[8] ~= '' and redis.call('EXISTS', KEYS[6]) == 0 then
  local m = cjson.decode(ARGV[8])
  redis.call('HSET', KEYS[6], 'system', m['system'], 'params', m['params'])
end
return {redis.call('INCR', KEYS[1]), redis.call('GET', KEYS[8]) or '0'}
"""


# The read half of a batch, atomically and with one argument per list (see _COMMIT_LUA on why
# blobs): KEYS gen, ids, wm, ids:old, ids:epoch; ARGV 1 player key prefix, 2 the ids epoch the caller's
# index holds ('' = none), 3 the length of ``:ids`` it holds, 4 n_players, 5 players blob, 6 n_wm, 7 blob
# of watermark fields ("topic/partition").
# Returns {gen, ids epoch, 1 = both generations in full (else the tail only), the bytes of ``:ids`` from the
# caller's length on (or all of it), all of ``:ids:old`` (or ''), beliefs (false = none), watermarks (false =
# none)}.
_SNAPSHOT_LUA = _ITEMS_LUA + """
local gen = redis.call('GET', KEYS[1]) or '0'
local ep = redis.call('GET', KEYS[5]) or '0'
local len = redis.call('STRLEN', KEYS[2])
local from = tonumber(ARGV[3])
local full, cur, old = 0, '', ''
if ep == ARGV[2] and from <= len then
  if from < len then cur = redis.call('GETRANGE', KEYS[2], from, len - 1) end
else
  full = 1
  cur = redis.call('GET', KEYS[2]) or ''
  old = redis.call('GET', KEYS[4]) or ''
end
local np = tonumber(ARGV[4])
local names = items(ARGV[5], np)
local pkey = ARGV[1]
local vals = {}
local i = 0
while i < np do
  local j = math.min(i + 4000, np)
  local keys = {}
  for k = i + 1, j do keys[#keys + 1] = pkey .. names[k] end
  local v = redis.call('MGET', unpack(keys))
  for k = 1, #keys do vals[#vals + 1] = v[k] end
  i = j
end
local nw = tonumber(ARGV[6])
local wms = {}
if nw > 0 then wms = redis.call('HMGET', KEYS[3], unpack(items(ARGV[7], nw))) end
return {gen, ep, full, cur, old, vals, wms}
"""


class Conflict(RuntimeError):
    """Someone committed to the pool between our read and our write: re-read and recompute."""


class AlreadyApplied(Conflict):
    """An optimistic commit (``check_ids``) found one of its event ids applied already.

    The caller re-reads with the event ids (the snapshot) and recomputes without them:
    a re-delivered batch is rare, so the usual batch skips the read entirely.
    """


class MetaConflict(Conflict):
    """The pool was first committed (by another worker) with another system: reload and recompute.

    Possible when a new pool's rounds and matches are consumed by two workers whose
    defaults differ by event kind; the first commit fixes the pool's system.
    """


@dataclass(slots=True)
class Snapshot:
    """What one read pipeline returned for a pool."""

    gen: str
    beliefs: dict[str, bytes | None]
    seen: set[str]
    watermarks: dict[str, int] = field(default_factory=dict)  # "topic/partition" -> highest offset applied


@dataclass(slots=True)
class Commit:
    """One atomic step for one pool."""

    beliefs: dict[str, bytes] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)  # leaderboard values
    event_ids: list[str] = field(default_factory=list)
    done_rounds: list[str] = field(default_factory=list)  # also deletes their pending hashes
    #: "topic/partition" -> (first offset to check or None, last offset): the pool's messages of the
    #: batch. The last offsets advance ``:wm``; ``check_ids`` also refuses the commit when a first
    #: offset is at or below the stored watermark (the offset dedup of MMR_DEDUP=offsets).
    offsets: dict[str, tuple[int | None, int]] = field(default_factory=dict)


class RedisStore:
    """Async access to the layout above (redis-py asyncio client, hiredis parser)."""

    def __init__(self, client: aioredis.Redis, prefix: str = "mmr", seen_max_ids: int = 0) -> None:
        self.r: Any = client  # redis-py's stubs type replies as bytes | str; ours are bytes (no decode_responses)
        self.prefix = prefix
        #: ``:ids`` rotates into ``:ids:old`` at this many ids (0: one log, unbounded; module docstring)
        self.seen_max_ids = seen_max_ids
        self._commit = client.register_script(_COMMIT_LUA)
        self._snapshot = client.register_script(_SNAPSHOT_LUA)
        #: per pool: the applied event ids as of a known prefix of its ``:ids`` log (stream.state.id_index)
        self._ids: dict[str, PoolIds] = {}

    @classmethod
    def from_url(cls, url: str, prefix: str = "mmr", seen_max_ids: int = 0, **kwargs: Any) -> RedisStore:
        return cls(aioredis.Redis.from_url(url, **kwargs), prefix, seen_max_ids)

    async def close(self) -> None:
        await self.r.aclose()

    # --- keys ------------------------------------------------------------------------
    def key(self, pool: str, suffix: str) -> str:
        return f"{self.prefix}:{{{pool}}}:{suffix}"

    def player_key(self, pool: str, player: str) -> str:
        return f"{self.prefix}:{{{pool}}}:p:{player}"

    def pend_key(self, pool: str, round_id: str) -> str:
        return f"{self.prefix}:{{{pool}}}:pend:{round_id}"

    # --- reads -----------------------------------------------------------------------
    async def snapshot(self, pool: str, players: Sequence[str], event_ids: Sequence[str],
                       watermarks: Sequence[str] = ()) -> Snapshot:
        """gen, which of ``event_ids`` were applied, beliefs and the watermarks asked for, in one
        atomic round trip (one Lua script).

        The names go as two length-prefixed blobs: redis-py packs every argument in Python
        (~1.5 µs each), which made the read of a 1,000-match batch (2,000 keys, 1,000 ids) cost
        as much as its rating math. The ids are not sent: the script returns what the pool's
        ``:ids`` log gained since this store's index of it, and the index answers.
        """
        players = list(players)
        fields = list(watermarks)
        idx = self._ids.get(pool)
        held = (str(idx.epoch), idx.length) if idx is not None else ("", 0)
        res = await self._snapshot(keys=[self.key(pool, "gen"), self.key(pool, "ids"), self.key(pool, "wm"),
                                         self.key(pool, "ids:old"), self.key(pool, "ids:epoch")],
                                   args=[self.player_key(pool, ""), held[0], held[1],
                                         len(players), _blob(players), len(fields), _blob(fields)])
        gen = res[0].decode() if isinstance(res[0], bytes) else str(res[0])
        epoch = int(res[1])
        if int(res[2]):  # both generations in full: the index starts again from them
            idx = self._ids[pool] = PoolIds(epoch, res[3] or b"", res[4] or b"")
        elif idx is not None and self._ids.get(pool) is idx and (str(idx.epoch), idx.length) == held:
            idx.append(res[3] or b"")
        else:  # the index changed while this read was under way: read again from what it holds now
            return await self.snapshot(pool, players, event_ids, watermarks)
        seen = _members(idx, event_ids)
        beliefs: dict[str, bytes | None] = dict(zip(players, res[5], strict=True))
        wms = {f: int(v) for f, v in zip(fields, res[6], strict=True) if v}
        return Snapshot(gen, beliefs, seen, wms)

    def ids_nbytes(self) -> int:
        """Memory of the indexes of applied ids (all pools)."""
        return sum(idx.nbytes for idx in list(self._ids.values()))

    def forget_ids(self) -> None:
        """Drop every pool's index of applied ids (memory only: the next read of a pool reloads it)."""
        self._ids.clear()

    async def recorded_ids(self, pool: str) -> int:
        """How many event ids the pool's logs hold (both generations)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.strlen(self.key(pool, "ids"))
        pipe.strlen(self.key(pool, "ids:old"))
        return sum(await pipe.execute()) // DIGEST

    async def beliefs(self, pool: str, players: Sequence[str]) -> dict[str, bytes | None]:
        if not players:
            return {}
        vals = await self.r.mget([self.player_key(pool, p) for p in players])
        return dict(zip(players, vals, strict=True))

    async def meta(self, pool: str) -> dict[str, Any] | None:
        raw = await self.r.hgetall(self.key(pool, "meta"))
        if not raw:
            return None
        return {"system": raw[b"system"].decode(), "params": orjson.loads(raw[b"params"])}

    async def pools(self) -> list[str]:
        return sorted(p.decode() for p in await self.r.smembers(f"{self.prefix}:pools"))

    async def top(self, pool: str, n: int) -> list[tuple[str, float]]:
        rows = await self.r.zrevrange(self.key(pool, "lb"), 0, max(n, 1) - 1, withscores=True)
        return [(p.decode(), float(s)) for p, s in rows]

    async def scan_players(self, pool: str, count: int = 1000) -> AsyncIterator[list[tuple[str, bytes]]]:
        """Every stored belief of a pool, in chunks (SCAN + MGET; Cluster-safe by the hash tag)."""
        prefix = self.player_key(pool, "")
        cursor = 0
        while True:
            cursor, keys = await self.r.scan(cursor, match=_glob_escape(prefix) + "*", count=count)
            if keys:
                vals = await self.r.mget(keys)
                yield [(k.decode()[len(prefix):], v) for k, v in zip(keys, vals, strict=True) if v is not None]
            if cursor == 0:
                break

    # --- round assembly state -------------------------------------------------------
    async def round_state(self, pool: str, round_ids: Sequence[str]) -> tuple[set[str], dict[str, dict[str, bytes]]]:
        """Which rounds are done, and the persisted pending entries of the others."""
        pipe = self.r.pipeline(transaction=False)
        pipe.smismember(self.key(pool, "done"), list(round_ids))
        for rid in round_ids:
            pipe.hgetall(self.pend_key(pool, rid))
        res = await pipe.execute()
        done = {rid for rid, flag in zip(round_ids, res[0], strict=True) if flag}
        pend = {rid: {k.decode(): v for k, v in h.items()} for rid, h in zip(round_ids, res[1:], strict=True) if h}
        return done, pend

    async def save_pending(self, pool: str, entries: dict[str, dict[str, bytes]], event_ids: Sequence[str]) -> None:
        """Persist results/completions of rounds still open (idempotent: keyed by event id)."""
        if not entries:
            return
        pipe = self.r.pipeline(transaction=True)
        for rid, fields in entries.items():
            pipe.hset(self.pend_key(pool, rid), mapping=fields)  # type: ignore[arg-type]
        await pipe.execute()

    async def expire_round(self, pool: str, round_id: str) -> None:
        pipe = self.r.pipeline(transaction=True)
        pipe.delete(self.pend_key(pool, round_id))
        pipe.sadd(self.key(pool, "done"), round_id)
        await pipe.execute()

    async def expire_rounds(self, rounds: Sequence[tuple[str, str]]) -> None:
        """``expire_round`` for many (pool, round id) in one round trip: two commands a pool
        (its pending hashes share its slot). Not one transaction (the pools may be on different
        nodes): a pool's rounds are marked done before their pending hashes are deleted, so a
        failure in between leaves leftover hashes of done rounds, which ``round_state`` ignores."""
        by_pool: dict[str, list[str]] = {}
        for pool, round_id in rounds:
            by_pool.setdefault(pool, []).append(round_id)
        pipe = self.r.pipeline(transaction=False)
        for pool, rids in by_pool.items():
            pipe.sadd(self.key(pool, "done"), *rids)
            pipe.delete(*[self.pend_key(pool, rid) for rid in rids])
        await pipe.execute()

    # --- the atomic step ------------------------------------------------------------
    async def commit(self, pool: str, gen: str, c: Commit, meta: dict[str, Any] | None = None,
                     check_ids: bool = False) -> int:
        """Apply one batch atomically; returns the pool's new ``gen``.

        Raises Conflict when ``gen`` moved since the snapshot (MetaConflict: the pool was
        first committed with another system). ``check_ids``: the caller did not read which
        event ids (or, for the offsets with a first offset, which messages) were applied
        already, so they are checked first -- the ids against this store's index of the
        pool's log, the offsets by the script -- and AlreadyApplied is raised (nothing
        written) if any was. AlreadyApplied is also raised when the log is not the prefix
        the index holds (another writer recorded ids): the caller re-reads.
        """
        idx = self._ids.get(pool)
        if idx is None and check_ids and c.event_ids:
            await self.snapshot(pool, (), ())  # loads the index
            idx = self._ids[pool]
        digest_blob = digests(c.event_ids)
        if check_ids and idx is not None and idx.contains(keys_of(digest_blob)).any():
            raise AlreadyApplied(pool)
        held = (str(idx.epoch), idx.length) if idx is not None else ("", 0)
        players = list(c.beliefs)
        keys = [self.key(pool, s) for s in ("gen", "ids", "lb", "done", "wm", "meta", "ids:old", "ids:epoch")]
        meta_json = ""
        if meta is not None:
            params_json = orjson.dumps(meta["params"]).decode()
            meta_json = orjson.dumps({"system": meta["system"], "params": params_json}).decode()
        offsets = [str(x) for tp, (first, last) in c.offsets.items()
                   for x in (tp, "" if first is None else first, last)]
        players_blob = _players_blob(players, [c.beliefs[p] for p in players],
                                     [c.scores[p] for p in players])
        argv: list[Any] = [gen, len(players), held[0], len(c.done_rounds), "1" if check_ids else "",
                           len(c.offsets), _blob(offsets), meta_json,
                           self.player_key(pool, ""), self.pend_key(pool, ""), players_blob,
                           digest_blob, _blob(c.done_rounds), self.seen_max_ids, held[1]]
        res = await self._commit(keys=keys, args=argv)
        if not isinstance(res, list):
            if int(res) == -2:
                raise MetaConflict(pool)
            if int(res) == -3:
                raise AlreadyApplied(pool)
            raise Conflict(pool)
        new_gen, epoch = int(res[0]), int(res[1])
        if idx is not None:
            if self._ids.get(pool) is idx and (str(idx.epoch), idx.length) == held:
                idx.append(digest_blob)  # the log is now exactly what the index holds
                if epoch != idx.epoch:
                    idx.rotate(epoch)
            else:  # the index moved while this commit was under way: reload on the next read
                self._ids.pop(pool, None)
        if meta is not None:
            await self.r.sadd(f"{self.prefix}:pools", pool)
        return new_gen


def _members(idx: PoolIds, event_ids: Sequence[str]) -> set[str]:
    """Which of ``event_ids`` the index holds."""
    if not event_ids:
        return set()
    flags = idx.contains(keys_of(digests(event_ids)))
    return {e for e, f in zip(event_ids, flags.tolist(), strict=True) if f}


def _players_blob(players: list[str], values: list[bytes], scores: list[float]) -> bytes:
    """The commit's players blob (see _COMMIT_LUA): three u32 lengths per player (name, value,
    score text), then the three strings per player. The score text is ``repr``: the shortest
    string that parses back to the same double, so the leaderboard holds the exact score.
    Built by columns (``map`` passes, one numpy array of lengths): ~2 µs a player before."""
    n = len(players)
    names = list(map(str.encode, players))
    texts = list(map(str.encode, map(repr, map(float, scores))))
    lens = np.empty((n, 3), dtype="<u4")
    lens[:, 0] = np.fromiter(map(len, names), dtype=np.int64, count=n)
    lens[:, 1] = np.fromiter(map(len, values), dtype=np.int64, count=n)
    lens[:, 2] = np.fromiter(map(len, texts), dtype=np.int64, count=n)
    return lens.tobytes() + b"".join(chain.from_iterable(zip(names, values, texts, strict=True)))


def _blob(items: Sequence[str]) -> bytes:
    """Length-prefixed list for the scripts: all little-endian u32 lengths first, then the bytes."""
    enc = [it.encode() for it in items]
    return struct.pack(f"<{len(enc)}I", *[len(b) for b in enc]) + b"".join(enc)


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
