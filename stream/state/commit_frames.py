"""The bytes of a commit's bulk writes: the players' beliefs (``MSET``), their leaderboard scores
(``ZADD``) and the explanations of their changes (``HSET``), as frames of the Redis protocol.

Why frames written here rather than arguments handed to a script: a Lua script that cuts its
arguments out of one blob makes a Lua string of every piece and then a Redis string of it again,
which cost Redis ~190 ms of CPU for a step of 50,000 players (the writes themselves ~45 ms);
the same writes sent as plain commands inside ``MULTI``/``EXEC`` cost it ~70 ms (BENCHMARKS.md).
And redis-py packs a command's arguments one by one in Python, so the frames are written here,
by one numba pass over the commit's strings held by columns (``Rows``), no ``bytes`` per
argument. The store sends them between its commit scripts (``stream.state.redis_store``).

``Rows`` is made where it is cheapest -- on the numba thread as the step's last work
(``Commit.seal``), straight from the arena its new beliefs are in (``rows_flat``); ``frames``
adds the pool's key names when the commit is sent. The players are in ascending order of their
new leaderboard score: a sorted set whose members arrive in score order finds each one's place
along the path the one before it took (skiplist nodes already in the CPU's cache), ~10 % less
of Redis's CPU on the Codeforces history (BENCHMARKS.md, 2026-11-27 60432c9).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math
import struct
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import pairwise

import numba as nb
import numpy as np
import orjson

from stream.ratings.base import FloatArray, IntArray
from stream.runtime.copies import copy_into
from stream.state.keys import escape_all
from stream.text_columns import Column, cat, json_numbers, split


def score_order(scores: Sequence[float]) -> tuple[FloatArray, IntArray]:
    """The scores as float64 and the order of a commit's players: ascending score, ties in the given
    order (a NaN, which a sorted set refuses, raises ValueError here, before anything is sent)."""
    values = np.array(scores, dtype=np.float64).reshape(-1)
    if np.isnan(values).any():
        raise ValueError("a leaderboard score is NaN")
    return values, np.argsort(values, kind="stable")


def score_text(score: float) -> bytes:
    """A score as the commit hands it to ZADD: the shortest text that parses back to the same
    double (orjson's, where it writes one: not for ±inf), so the leaderboard holds the exact score."""
    return orjson.dumps(score) if math.isfinite(score) else repr(score).encode()


def _score_texts(scores: FloatArray) -> tuple[np.ndarray, IntArray]:
    """``score_text`` of each of ``scores`` as a column: all finite, as orjson writes the array's
    numbers (``text_columns.json_numbers``), no object per score."""
    if not scores.shape[0] or not np.isfinite(scores).all():
        return cat(list(map(score_text, scores.tolist())))
    return json_numbers(scores)


def _names(players: list[str]) -> tuple[list[bytes], list[bytes]]:
    """The escaped key names and the names (empty where escaping left a name as it was: ZADD then
    gets the key's name) of a commit's players."""
    escaped = escape_all(players)
    keys = list(map(str.encode, escaped))
    names = [b""] * len(players) if escaped is players else [
        b"" if e == p else p.encode() for p, e in zip(players, escaped, strict=True)]
    return keys, names


@nb.njit(cache=True, nogil=True)
def _copy(out, pos, src, a, b):  # type: ignore[no-untyped-def]
    copy_into(out, pos, src, a, b - a)
    return pos + b - a


@nb.njit(cache=True, nogil=True)
def _count(out, pos, lead, n):  # type: ignore[no-untyped-def]
    """``lead`` (``*`` or ``$``), the decimal digits of ``n`` and CRLF into ``out`` from ``pos`` on."""
    out[pos] = lead
    pos += 1
    digits = 1
    m = n
    while m >= 10:
        m //= 10
        digits += 1
    for k in range(digits - 1, -1, -1):
        out[pos + k] = 48 + n % 10
        n //= 10
    out[pos + digits] = 13
    out[pos + digits + 1] = 10
    return pos + digits + 2


@nb.njit(cache=True, nogil=True)
def _bulk(out, pos, head, src, a, b):  # type: ignore[no-untyped-def]
    """One bulk string of the protocol: ``head`` + ``src[a:b]`` (``$``, its length, CRLF, the bytes, CRLF)."""
    pos = _count(out, pos, 36, head.shape[0] + b - a)
    pos = _copy(out, pos, head, 0, head.shape[0])
    pos = _copy(out, pos, src, a, b)
    out[pos] = 13
    out[pos + 1] = 10
    return pos + 2


@nb.njit(cache=True, nogil=True)
def _write(out, ends, none, mset, zadd, hset, prefix, lb, chg, keys, key_at, tag, values, value_at, order, texts,
           text_at, names, name_at, fields, field_at, records, record_at):  # type: ignore[no-untyped-def]
    """The MSET, ZADD and HSET frames (those with something to write) into ``out``, each one's end
    into ``ends``; how many."""
    n = key_at.shape[0] - 1
    m = field_at.shape[0] - 1
    pos = 0
    if n:
        pos = _count(out, pos, 42, 1 + 2 * n)
        pos = _bulk(out, pos, none, mset, 0, mset.shape[0])
        for i in range(n):
            pos = _bulk(out, pos, prefix, keys, key_at[i], key_at[i + 1])
            v = order[i]
            pos = _bulk(out, pos, tag, values, value_at[v], value_at[v + 1])
        ends[0] = pos
        pos = _count(out, pos, 42, 2 + 2 * n)
        pos = _bulk(out, pos, none, zadd, 0, zadd.shape[0])
        pos = _bulk(out, pos, none, lb, 0, lb.shape[0])
        for i in range(n):
            pos = _bulk(out, pos, none, texts, text_at[i], text_at[i + 1])
            if name_at[i + 1] > name_at[i]:
                pos = _bulk(out, pos, none, names, name_at[i], name_at[i + 1])
            else:
                pos = _bulk(out, pos, none, keys, key_at[i], key_at[i + 1])
        ends[1] = pos
    k = 2 if n else 0
    if m:
        pos = _count(out, pos, 42, 2 + 2 * m)
        pos = _bulk(out, pos, none, hset, 0, hset.shape[0])
        pos = _bulk(out, pos, none, chg, 0, chg.shape[0])
        for i in range(m):
            pos = _bulk(out, pos, none, fields, field_at[i], field_at[i + 1])
            pos = _bulk(out, pos, none, records, record_at[i], record_at[i + 1])
        ends[k] = pos
        k += 1
    return k


def _u8(b: bytes) -> np.ndarray:
    return np.frombuffer(b, dtype=np.uint8)


class ChangeRecords(Mapping[str, bytes]):
    """Player -> the record of their change (``RedisStore`` ``:chg``), held as a column: ``records``'
    i-th string is ``players[i]``'s. ``frames`` writes the column as it is; a dict of it is made only
    if something looks a player up."""

    def __init__(self, players: Sequence[str], records: Column) -> None:
        if records[1].shape[0] != len(players) + 1:
            raise ValueError(f"{records[1].shape[0] - 1} records for {len(players)} players")
        self.players = players
        self.records = records
        self._of: dict[str, bytes] | None = None

    def __getitem__(self, player: str) -> bytes:
        if self._of is None:
            self._of = dict(zip(self.players, split(self.records), strict=True))
        return self._of[player]

    def __iter__(self) -> Iterator[str]:
        return iter(self.players)

    def __len__(self) -> int:
        return len(self.players)


@dataclass(frozen=True)
class Rows:
    """A commit's strings by columns, players by ascending new score (``score_order``): their escaped
    key names, their values (the ``order[i]``-th of ``values`` is the i-th player's, each after
    ``tag``), score texts and names (empty where the escaped name is the name); and the changes'
    fields and records. What ``frames`` writes out once the pool's key names are known."""

    keys: np.ndarray
    key_at: IntArray
    tag: bytes
    values: np.ndarray
    value_at: IntArray
    order: IntArray
    texts: np.ndarray
    text_at: IntArray
    names: np.ndarray
    name_at: IntArray
    fields: np.ndarray
    field_at: IntArray
    records: np.ndarray
    record_at: IntArray

    @property
    def players(self) -> int:
        return int(self.key_at.shape[0]) - 1

    @property
    def changes(self) -> int:
        return int(self.field_at.shape[0]) - 1


def _rows(players: list[str], tag: bytes, values: np.ndarray, value_at: IntArray, scores: Sequence[float],
          changes: Mapping[str, bytes]) -> Rows:
    fscores, order = score_order(scores)
    keys, names = _names(list(map(players.__getitem__, order.tolist())))
    key_cat, key_at = cat(keys)
    text_cat, text_at = _score_texts(fscores[order])
    name_cat, name_at = cat(names)
    field_cat, field_at = cat(list(map(str.encode, changes)))
    record_cat, record_at = changes.records if isinstance(changes, ChangeRecords) else cat(list(changes.values()))
    return Rows(key_cat, key_at, tag, values, value_at, order, text_cat, text_at, name_cat, name_at,
                field_cat, field_at, record_cat, record_at)


def rows_of(players: list[str], values: Sequence[bytes], scores: Sequence[float], changes: Mapping[str, bytes]) -> Rows:
    """``Rows`` of ``values[i]``, the i-th player's value as it is."""
    value_cat, value_at = cat(list(values))
    return _rows(players, b"", value_cat, value_at, scores, changes)


def rows_flat(players: list[str], flat: FloatArray, offsets: IntArray, tag: bytes, scores: Sequence[float],
              changes: Mapping[str, bytes]) -> Rows:
    """``rows_of`` the values ``tag`` + ``flat[offsets[i] : offsets[i + 1]]`` (little-endian float64)
    of ``players[i]``, as the arena holds them: the arena's bytes, no ``bytes`` per value."""
    value_at = np.ascontiguousarray(offsets, dtype=np.int64) * 8
    raw = np.ascontiguousarray(flat, dtype="<f8").view(np.uint8)
    return _rows(players, tag, raw, value_at, scores, changes)


def frames(rows: Rows, player_prefix: bytes, lb_key: bytes, chg_key: bytes) -> list[memoryview]:
    """The commit's bulk writes as frames of the Redis protocol, one per command, ready to send:
    ``MSET`` of the players' keys (``player_prefix`` + escaped name) to their values, ``ZADD lb_key``
    of their scores in ascending order, ``HSET chg_key`` of the changes -- those with something to
    write. One numba pass writes them from the columns into one buffer."""
    n, m = rows.players, rows.changes
    tag = _u8(rows.tag)
    # an upper bound: every byte of the strings, once more each key name (a ZADD member where the
    # name is the key's), the commands' names (16), and per bulk string (MSET 1 + 2n, ZADD 2 + 2n,
    # HSET 2 + 2m) and per command at most 15 bytes of ``$``/``*``, digits and CRLFs
    args = 4 * n + 2 * m + 5
    size = (int(rows.key_at[-1]) + n * len(player_prefix) + int(rows.value_at[-1]) + n * len(rows.tag)
            + int(rows.text_at[-1]) + int(rows.key_at[-1]) + int(rows.name_at[-1]) + int(rows.field_at[-1])
            + int(rows.record_at[-1]) + len(lb_key) + len(chg_key) + 16 + 15 * args + 3 * 15)
    out = np.empty(size, dtype=np.uint8)
    none = np.empty(0, dtype=np.uint8)
    ends = np.zeros(3, dtype=np.int64)
    k = _write(out, ends, none, _u8(b"MSET"), _u8(b"ZADD"), _u8(b"HSET"), _u8(player_prefix), _u8(lb_key),
                 _u8(chg_key), rows.keys, rows.key_at, tag, rows.values, rows.value_at, rows.order, rows.texts,
                 rows.text_at, rows.names, rows.name_at, rows.fields, rows.field_at, rows.records, rows.record_at)
    view = out.data
    bounds = [0, *ends[:k].tolist()]
    return [view[a:b] for a, b in pairwise(bounds)]


def strings_blob(items: Sequence[str]) -> bytes:
    """Length-prefixed list for the scripts: all little-endian u32 lengths first, then the bytes."""
    enc = [it.encode() for it in items]
    return struct.pack(f"<{len(enc)}I", *[len(b) for b in enc]) + b"".join(enc)


def warmup() -> None:
    """Compile (or load from numba's cache) the frames' writer on two players and a change."""
    frames(rows_flat(["a", "b:c"], np.zeros(3), np.array([0, 1, 3]), b"\x01", [1.0, 2.0], {"a": b"{}"}),
           b"p:", b"lb", b"chg")
