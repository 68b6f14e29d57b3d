"""Per-player rating history in Redis: the last ``limit`` published ratings of each player, oldest
first, in ``:h:<player>`` (stream.state.redis_store), each ``RECORD`` followed by its event id (UTF-8).

Why a list per player, written inside the commit: the history must never disagree with the belief,
so the commit's ``MULTI``/``EXEC`` appends one record per player whose rating it publishes and
trims the list to ``limit``, by one ``EVAL`` of ``HISTORY_LUA`` for the whole step
(``history_command``). A key of another type is skipped (``redis.pcall``): the commit still lands,
without that player's record.
"""

from __future__ import annotations

import struct
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream.state.keys import escape_all

#: published ratings kept per player unless configured (MMR_HISTORY_LIMIT): a chart's worth; ~60-90 bytes
#: of Redis memory a record (its 40 bytes, the event id, the list's per-entry overhead)
HISTORY_LIMIT = 100
#: version, time (ms), rating, mu, sigma -- then the event id's bytes
RECORD = struct.Struct("<qqddd")
_HEAD = np.dtype([("version", "<i8"), ("time", "<i8"), ("rating", "<f8"), ("mu", "<f8"), ("sigma", "<f8")])

#: ARGV: the limit, then per player their history key and their record (the keys are of the slot of
#: KEYS[1], the pool's). RPUSH answers the list's length: LTRIM only once it is over the limit.
HISTORY_LUA = """
local lim = tonumber(ARGV[1])
local pcall_ = redis.pcall
for i = 2, #ARGV, 2 do
  local k = ARGV[i]
  local n = pcall_('RPUSH', k, ARGV[i + 1])
  if type(n) == 'number' and n > lim then
    pcall_('LTRIM', k, -lim, -1)
  end
end
return 0
"""


@dataclass(frozen=True)
class HistoryRows:
    """The records of one commit's published ratings (one per player): the players' escaped
    names and their records (``RECORD`` + the event id)."""

    keys: list[str]
    records: list[bytes]

    @property
    def players(self) -> int:
        return len(self.keys)


def history_rows(published: Sequence[Any], written: Mapping[str, bytes]) -> HistoryRows | None:
    """The history records of a commit: of ``published`` (the step's rating outputs, as
    ``RatingOutput``), the rows of players whose belief the commit writes
    (``written``), each player's latest version only. The other rows re-publish what an earlier
    commit wrote (a re-delivery) and are in the history already. None: nothing to record."""
    if not len(published):
        return None
    best: dict[str, Any] = {}
    for o in published:
        if o.player in written:
            held = best.get(o.player)
            if held is None or o.version >= held.version:
                best[o.player] = o
    if not best:
        return None
    rows = list(best.values())
    heads = np.empty(len(rows), dtype=_HEAD)
    for name in ("version", "time", "rating", "mu", "sigma"):  # (``_HEAD``'s, the fields of ``RatingOutput``)
        heads[name] = [getattr(o, name) for o in rows]
    raw, size = heads.tobytes(), RECORD.size
    records = [raw[i * size:(i + 1) * size] + o.event_id.encode() for i, o in enumerate(rows)]
    return HistoryRows(escape_all([o.player for o in rows]), records)


def history_command(rows: HistoryRows, limit: int, prefix: bytes, route_key: bytes) -> tuple[Any, ...]:
    """``EVAL HISTORY_LUA 1 route_key limit key1 record1 ...`` (key i: ``prefix`` + the i-th escaped
    name; ``route_key``: a key of the pool's slot, for a cluster's routing)."""
    args: list[Any] = [b""] * (2 * rows.players)
    args[0::2] = [prefix + k.encode() for k in rows.keys]
    args[1::2] = rows.records
    return ("EVAL", HISTORY_LUA, 1, route_key, limit, *args)


def decode(record: bytes) -> dict[str, Any]:
    """One stored record as the HTTP API answers it."""
    version, time, rating, mu, sigma = RECORD.unpack_from(record)
    return {"version": version, "time": time, "rating": rating, "mu": mu, "sigma": sigma,
            "event_id": record[RECORD.size:].decode()}

