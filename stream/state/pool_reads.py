"""Reads of the HTTP API and the console beyond single ratings: a player's history and standing,
a pool's rating distribution, the pools with their counts.

Each read of one pool is one Lua script (atomic, in the pool's slot), so it answers one state
between two commits. The distribution is read from the leaderboard rather than kept by the commit:
``ZCOUNT`` over a bin and ``ZRANGE`` by index cost O(log N), so a histogram costs O((bins +
percentiles) log N) for any pool size, and the commit writes nothing more.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import AsyncIterator, Sequence
from typing import TYPE_CHECKING, Any

from stream.state.history import decode as decode_record
from stream.state.id_index import DIGEST
from stream.state.keys import KeySpace

#: KEYS: the belief, the history list. The list and the belief, read together.
HISTORY_READ_LUA = """
return {redis.call('GET', KEYS[1]), redis.call('LRANGE', KEYS[2], 0, -1)}
"""

#: KEYS: the leaderboard. ARGV: the member. {score (text) or false, lower, equal, total}
STANDING_LUA = """
local s = redis.call('ZSCORE', KEYS[1], ARGV[1])
local total = redis.call('ZCARD', KEYS[1])
if not s then return {false, 0, 0, total} end
return {s, redis.call('ZCOUNT', KEYS[1], '-inf', '(' .. s), redis.call('ZCOUNT', KEYS[1], s, s), total}
"""

#: KEYS: the leaderboard. ARGV: bins, then the percentiles wanted (0-100).
#: {total, lowest, highest, {edges...}, {counts...}, {percentile scores...}}: bin i holds the scores in
#: [edge i, edge i+1), the last also its upper edge; the scores are texts (Lua numbers would be cut to integers)
DISTRIBUTION_LUA = """
local key = KEYS[1]
local bins = tonumber(ARGV[1])
local total = redis.call('ZCARD', key)
if total == 0 then return {0, false, false, {}, {}, {}} end
local lo = redis.call('ZRANGE', key, 0, 0, 'WITHSCORES')[2]
local hi = redis.call('ZRANGE', key, -1, -1, 'WITHSCORES')[2]
local a, b = tonumber(lo), tonumber(hi)
local edges, counts, qs = {}, {}, {}
if a == b then bins = 1 end
local fmt = string.format
for i = 0, bins do
  edges[i + 1] = (i == bins) and hi or fmt('%.17g', a + (b - a) * i / bins)
end
for i = 1, bins do
  local upper = (i == bins) and '+inf' or ('(' .. edges[i + 1])
  local lower = (i == 1) and '-inf' or edges[i]
  counts[i] = redis.call('ZCOUNT', key, lower, upper)
end
for j = 2, #ARGV do
  local p = tonumber(ARGV[j])
  local idx = math.floor(p / 100 * (total - 1) + 0.5)
  qs[j - 1] = redis.call('ZRANGE', key, idx, idx, 'WITHSCORES')[2]
end
return {total, lo, hi, edges, counts, qs}
"""

#: the percentiles a distribution lists unless asked for others
PERCENTILES = (1.0, 5.0, 10.0, 25.0, 50.0, 75.0, 90.0, 95.0, 99.0)


class PoolReads:
    """Read methods of ``RedisStore`` (stream.state.redis_store) for the HTTP API and the console."""

    if TYPE_CHECKING:  # set by RedisStore.__init__, defined by RedisStore
        r: Any
        keys: KeySpace

        def _io(self) -> contextlib.AbstractAsyncContextManager[None]: ...
        def key(self, pool: str, suffix: str) -> str: ...

    def _reads_script(self, name: str, text: str) -> Any:
        scripts: dict[str, Any] = self.__dict__.setdefault("_read_scripts", {})
        if name not in scripts:
            scripts[name] = self.r.register_script(text)
        return scripts[name]

    async def history(self, pool: str, player: str) -> tuple[bytes | None, list[dict[str, Any]]]:
        """A player's stored belief and recent ratings (oldest first; stream.state.history), read together."""
        script = self._reads_script("history", HISTORY_READ_LUA)
        async with self._io():
            raw, records = await script(keys=[self.keys.player_key(pool, player), self.keys.history_key(pool, player)])
        return raw, [decode_record(r) for r in records]

    async def standing(self, pool: str, player: str) -> tuple[float, int, int, int] | None:
        """``(score, lower, equal, total)`` of a player on the leaderboard: their displayed rating, how
        many players have a lower one, how many the same (themselves included), how many there are.
        None: not on it."""
        script = self._reads_script("standing", STANDING_LUA)
        async with self._io():
            score, lower, equal, total = await script(keys=[self.key(pool, "lb")], args=[player])
        if score is None:
            return None
        return float(score), int(lower), int(equal), int(total)

    async def distribution(self, pool: str, bins: int, percentiles: Sequence[float] = PERCENTILES,
                           ) -> dict[str, Any]:
        """The leaderboard's displayed ratings as a histogram of ``bins`` equal bins from the lowest to
        the highest, and the ratings at ``percentiles`` (nearest rank)."""
        script = self._reads_script("distribution", DISTRIBUTION_LUA)
        async with self._io():
            total, lo, hi, edges, counts, qs = await script(keys=[self.key(pool, "lb")],
                                                            args=[bins, *(repr(float(p)) for p in percentiles)])
        return {"total": int(total), "min": None if lo is None else float(lo), "max": None if hi is None else float(hi),
                "bins": [{"lo": float(a), "hi": float(b), "count": int(c)}
                         for a, b, c in zip(edges, edges[1:], counts, strict=False)],
                "percentiles": {_label(p): float(q) for p, q in zip(percentiles, qs, strict=False)}}

    async def pool_summaries(self, pools: Sequence[str]) -> AsyncIterator[dict[str, Any]]:
        """Per pool with a meta (a committed pool): its name, system and players on the leaderboard."""
        for at in range(0, len(pools), 200):
            chunk = pools[at:at + 200]
            async with self._io():
                pipe = self.r.pipeline(transaction=False)
                for pool in chunk:
                    pipe.hget(self.key(pool, "meta"), "system")
                    pipe.zcard(self.key(pool, "lb"))
                replies = await pipe.execute(raise_on_error=False)
            for i, pool in enumerate(chunk):
                system, players = replies[2 * i], replies[2 * i + 1]
                if isinstance(system, bytes) and not isinstance(players, BaseException):
                    yield {"pool": pool, "system": system.decode(), "players": int(players)}

    async def advantages(self, pool: str) -> dict[bytes, bytes]:
        """The pool's learned side advantages as stored (``:adv``: side -> ``Advantages.stored`` bytes;
        empty: none learned)."""
        async with self._io():
            return dict(await self.r.hgetall(self.key(pool, "adv")))

    async def pool_counts(self, pool: str) -> dict[str, Any]:
        """What a pool holds: players on the leaderboard, rounds being assembled, recorded event ids."""
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            pipe.zcard(self.key(pool, "lb"))
            pipe.zcard(self.key(pool, "open"))
            pipe.strlen(self.key(pool, "ids"))
            pipe.strlen(self.key(pool, "ids:old"))
            pipe.hgetall(self.key(pool, "wm"))
            players, open_rounds, ids, old, wm = await pipe.execute(raise_on_error=False)
        def count(v: Any) -> int:
            return int(v) if isinstance(v, int) else 0

        return {"players": count(players), "open_rounds": count(open_rounds),
                "event_ids_recorded": (count(ids) + count(old)) // DIGEST,
                "watermarks": {k.decode(): int(v) for k, v in wm.items()} if isinstance(wm, dict) else {}}


def _label(p: float) -> str:
    """A percentile's key in the answer: ``"p50"``, ``"p99.9"``."""
    return f"p{int(p)}" if float(p).is_integer() else f"p{p!r}"


def percentile_rank(lower: int, equal: int, total: int) -> float:
    """100 × (players below + half of those level, the player included) / players: the midpoint
    percentile rank (a pool of one: 50)."""
    return 100.0 * (lower + 0.5 * equal) / total if total else math.nan
