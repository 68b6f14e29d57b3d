"""Redis state of the service: encoded beliefs, leaderboards, and what makes re-delivery a no-op.

Key layout (every key of a pool carries the hash tag ``{pool}`` so that everything one batch
touches lives in one Redis Cluster slot and one Lua script can update it atomically)::

    {prefix}:{<pool>}:p:<player>      STRING  encoded belief (stream.state.codecs), one per player
    {prefix}:{<pool>}:lb              ZSET    player -> displayed rating (the leaderboard)
    {prefix}:{<pool>}:seen            SET     event ids already applied (rounds, matches, round results)
    {prefix}:{<pool>}:gen             STRING  commit counter; the compare-and-set token of a batch
    {prefix}:{<pool>}:wm              HASH    "topic/partition" -> highest input offset applied (observability)
    {prefix}:{<pool>}:meta            HASH    system, params (JSON): fixed at the pool's first commit
    {prefix}:{<pool>}:pend:<round_id> HASH    results of a round still being assembled (event_id -> JSON)
    {prefix}:{<pool>}:done            SET     round ids already rated or expired (late results -> DLQ)
    {prefix}:pools                    SET     pool names (outside any pool slot; written idempotently)

Player and pending-round keys are built inside the script from prefixes carrying the pool's
hash tag, so they are in the slot of the declared keys (Redis Cluster executes scripts that
touch undeclared keys of the same slot; it refuses only cross-slot access).

The per-player version is the ``rounds`` counter inside the belief, so it moves atomically
with the belief itself.

Why a compare-and-set on ``gen`` rather than MULTI/WATCH: the read (GET gen, SMISMEMBER
seen, MGET beliefs) is one pipeline round trip, the math runs outside Redis, and the commit
is one EVALSHA that refuses to write when anything committed to the pool in between
(a concurrent agent of this worker, or a second worker during a rebalance). The caller
then re-reads and recomputes. Event ids are recorded in the same script as the beliefs,
so a batch is either fully applied with its ids or not at all, and a re-delivered or
re-published event is filtered out before any math.
"""

from __future__ import annotations

import struct
from collections.abc import AsyncIterator, Sequence
from dataclasses import dataclass, field
from typing import Any

import orjson
import redis.asyncio as aioredis

# KEYS: gen, seen, lb, done, wm, meta (all in the pool's slot; player and pending-round keys are built
#       in the script from ARGV[9]/ARGV[10], which carry the same hash tag -- see the module docstring)
# ARGV: 1 expected gen, 2 n_players, 3 n_ids, 4 n_done, 5 (unused), 6 wm field, 7 wm offset, 8 meta JSON
#       ("" = keep), 9 player key prefix, 10 pending-round key prefix, 11 players blob, 12 ids blob,
#       13 done-rounds blob. Blobs: per item little-endian u32 lengths then the bytes (players: name,
#       value, score text) -- one argument instead of thousands: redis-py packs arguments one by one
#       in Python, which cost ~80 ms for a round of 3,000 players.
_COMMIT_LUA = """
local gen = redis.call('GET', KEYS[1]) or '0'
if gen ~= ARGV[1] then return -1 end
if ARGV[8] ~= '' and redis.call('EXISTS', KEYS[6]) == 1 then
  local m = cjson.decode(ARGV[8])
  local cur = redis.call('HMGET', KEYS[6], 'system', 'params')
  if cur[1] ~= m['system'] or cur[2] ~= m['params'] then return -2 end
end
local np = tonumber(ARGV[2])
local ni = tonumber(ARGV[3])
local nd = tonumber(ARGV[4])
local pkey = ARGV[9]
local blob = ARGV[11]
local pos = 1
for i = 1, np do
  local nl, vl, sl
  nl, vl, sl, pos = struct.unpack('<I4I4I4', blob, pos)
  local name = string.sub(blob, pos, pos + nl - 1)
  pos = pos + nl
  redis.call('SET', pkey .. name, string.sub(blob, pos, pos + vl - 1))
  pos = pos + vl
  redis.call('ZADD', KEYS[3], string.sub(blob, pos, pos + sl - 1), name)
  pos = pos + sl
end
local function items(b, n)
  local out = {}
  local p = 1
  for i = 1, n do
    local l
    l, p = struct.unpack('<I4', b, p)
    out[i] = string.sub(b, p, p + l - 1)
    p = p + l
  end
  return out
end
local ids = items(ARGV[12], ni)
local i = 0
while i < ni do
  local j = math.min(i + 4000, ni)
  redis.call('SADD', KEYS[2], unpack(ids, i + 1, j))
  i = j
end
local done = items(ARGV[13], nd)
for k = 1, nd do
  redis.call('DEL', ARGV[10] .. done[k])
  redis.call('SADD', KEYS[4], done[k])
end
if ARGV[6] ~= '' then
  local old = tonumber(redis.call('HGET', KEYS[5], ARGV[6]) or '-1')
  if tonumber(ARGV[7]) > old then redis.call('HSET', KEYS[5], ARGV[6], ARGV[7]) end
end
if ARGV[8] ~= '' and redis.call('EXISTS', KEYS[6]) == 0 then
  local m = cjson.decode(ARGV[8])
  redis.call('HSET', KEYS[6], 'system', m['system'], 'params', m['params'])
end
return redis.call('INCR', KEYS[1])
"""


class Conflict(RuntimeError):
    """Someone committed to the pool between our read and our write: re-read and recompute."""


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


@dataclass(slots=True)
class Commit:
    """One atomic step for one pool."""

    beliefs: dict[str, bytes] = field(default_factory=dict)
    scores: dict[str, float] = field(default_factory=dict)  # leaderboard values
    event_ids: list[str] = field(default_factory=list)
    done_rounds: list[str] = field(default_factory=list)  # also deletes their pending hashes
    watermark: tuple[str, int] | None = None  # ("topic/partition", offset)


class RedisStore:
    """Async access to the layout above (redis-py asyncio client, hiredis parser)."""

    def __init__(self, client: aioredis.Redis, prefix: str = "mmr") -> None:
        self.r: Any = client  # redis-py's stubs type replies as bytes | str; ours are bytes (no decode_responses)
        self.prefix = prefix
        self._commit = client.register_script(_COMMIT_LUA)

    @classmethod
    def from_url(cls, url: str, prefix: str = "mmr", **kwargs: Any) -> RedisStore:
        return cls(aioredis.Redis.from_url(url, **kwargs), prefix)

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
    async def snapshot(self, pool: str, players: Sequence[str], event_ids: Sequence[str]) -> Snapshot:
        """gen, then seen flags, then beliefs, in one round trip (order matters for the CAS)."""
        pipe = self.r.pipeline(transaction=False)
        pipe.get(self.key(pool, "gen"))
        if event_ids:
            pipe.smismember(self.key(pool, "seen"), list(event_ids))
        if players:
            pipe.mget([self.player_key(pool, p) for p in players])
        res = await pipe.execute()
        gen = (res[0] or b"0").decode()
        seen: set[str] = set()
        i = 1
        if event_ids:
            seen = {e for e, flag in zip(event_ids, res[i], strict=True) if flag}
            i += 1
        beliefs: dict[str, bytes | None] = dict(zip(players, res[i], strict=True)) if players else {}
        return Snapshot(gen, beliefs, seen)

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

    # --- the atomic step ------------------------------------------------------------
    async def commit(self, pool: str, gen: str, c: Commit, meta: dict[str, Any] | None = None) -> int:
        """Apply one batch atomically; raises Conflict when ``gen`` moved since the snapshot."""
        players = list(c.beliefs)
        keys = [self.key(pool, s) for s in ("gen", "seen", "lb", "done", "wm", "meta")]
        meta_json = ""
        if meta is not None:
            params_json = orjson.dumps(meta["params"]).decode()
            meta_json = orjson.dumps({"system": meta["system"], "params": params_json}).decode()
        wm_field, wm_off = c.watermark if c.watermark else ("", 0)
        parts: list[bytes] = []
        for p in players:
            name, value, score = p.encode(), c.beliefs[p], repr(float(c.scores[p])).encode()
            parts += (_U32x3.pack(len(name), len(value), len(score)), name, value, score)
        argv: list[Any] = [gen, len(players), len(c.event_ids), len(c.done_rounds), "", wm_field, wm_off, meta_json,
                           self.player_key(pool, ""), self.pend_key(pool, ""), b"".join(parts),
                           _blob(c.event_ids), _blob(c.done_rounds)]
        res = await self._commit(keys=keys, args=argv)
        if int(res) == -2:
            raise MetaConflict(pool)
        if int(res) < 0:
            raise Conflict(pool)
        if meta is not None:
            await self.r.sadd(f"{self.prefix}:pools", pool)
        return int(res)


_U32 = struct.Struct("<I")
_U32x3 = struct.Struct("<III")


def _blob(items: Sequence[str]) -> bytes:
    parts: list[bytes] = []
    for it in items:
        b = it.encode()
        parts += (_U32.pack(len(b)), b)
    return b"".join(parts)


def _glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
