"""The byte strings a commit hands to the Redis scripts (``stream.state.redis_scripts``).

Why blobs: redis-py packs a command's arguments one by one in Python (~80 ms for a round of
3,000 players as separate arguments), so each list goes as one argument: all its little-endian
u32 lengths first, then the strings. Why here, apart from the store: a step of 50,000 players
makes a players blob of tens of MB, and the worker makes it where it is cheapest -- on the
numba thread as the step's last work (``Commit.seal``), straight from the arena its new
beliefs are in (``players_blob_flat``) -- rather than on the event loop between two commits.
``players_blob`` is the plain form, and the oracle of the flat one.

Both list the players in ascending order of their new leaderboard score. The script sends them
to ZADD in that order, and a sorted set whose members arrive in score order finds each one's
place along the path the one before it took (skiplist nodes already in the CPU's cache): ~10 %
less of Redis's CPU on the Codeforces history (BENCHMARKS.md, 2026-11-27 60432c9).
"""

from __future__ import annotations

import math
import struct
from collections.abc import Sequence
from itertools import chain

import numba as nb
import numpy as np
import orjson

from stream.ratings.base import FloatArray, IntArray
from stream.state.keys import escape_all


def score_order(scores: Sequence[float]) -> tuple[FloatArray, IntArray]:
    """The scores as float64 and the order of a players blob: ascending score, ties in the given
    order (a NaN, which a sorted set refuses, raises ValueError here, before anything is sent)."""
    values = np.array(scores, dtype=np.float64).reshape(-1)
    if np.isnan(values).any():
        raise ValueError("a leaderboard score is NaN")
    return values, np.argsort(values, kind="stable")


def score_text(score: float) -> bytes:
    """A score as the script hands it to ZADD: the shortest text that parses back to the same
    double (orjson's, where it writes one: not for ±inf), so the leaderboard holds the exact score."""
    return orjson.dumps(score) if math.isfinite(score) else repr(score).encode()


def _score_texts(scores: FloatArray) -> tuple[np.ndarray, IntArray]:
    """``score_text`` of each of ``scores``, one after another, and where each starts: cut from one
    ``orjson.dumps`` of the array at its commas (a number has none), no object per score."""
    if not scores.shape[0] or not np.isfinite(scores).all():
        return _cat(list(map(score_text, scores.tolist())))
    raw = np.frombuffer(orjson.dumps(scores, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8)[1:-1]
    comma = raw == ord(",")
    bounds = np.concatenate(([-1], np.flatnonzero(comma), [raw.shape[0]]))
    at = np.zeros(scores.shape[0] + 1, dtype=np.int64)
    np.cumsum(np.diff(bounds) - 1, out=at[1:])
    return raw[~comma], at


def _names(players: list[str]) -> tuple[list[bytes], list[bytes]]:
    """The escaped key names and the names (empty where escaping left a name as it was: the script
    then takes the key's name) of a players blob."""
    escaped = escape_all(players)
    keys = list(map(str.encode, escaped))
    names = [b""] * len(players) if escaped is players else [
        b"" if e == p else p.encode() for p, e in zip(players, escaped, strict=True)]
    return keys, names


def _lengths(n: int, *columns: Sequence[bytes]) -> np.ndarray:
    lens = np.empty((n, 4), dtype="<u4")
    for j, col in enumerate(columns):
        lens[:, j] = np.fromiter(map(len, col), dtype=np.int64, count=n)
    return lens


def players_blob(players: list[str], values: Sequence[bytes], scores: Sequence[float]) -> bytes:
    """The commit's players blob (see redis_scripts.COMMIT_LUA): four u32 lengths per player (escaped
    name, value, score text, name), then the four strings per player, players by ascending score
    (``score_order``). Built by columns (``map`` passes, one numpy array of lengths), not by a loop
    over players."""
    fscores, order = score_order(scores)
    ol = order.tolist()
    players, values = [players[i] for i in ol], [values[i] for i in ol]
    keys, names = _names(players)
    texts = list(map(score_text, fscores[order].tolist()))
    lens = _lengths(len(players), keys, values, texts, names)
    return lens.tobytes() + b"".join(chain.from_iterable(zip(keys, values, texts, names, strict=True)))


@nb.njit(cache=True, nogil=True)
def _copy(out, pos, src, a, b):  # type: ignore[no-untyped-def]
    out[pos:pos + b - a] = src[a:b]
    return pos + b - a


@nb.njit(cache=True, nogil=True)
def _interleave(keys, key_at, tag, values, value_at, order, texts, text_at, names, name_at, out, pos):  # type: ignore[no-untyped-def]
    """The i-th player's key name, ``tag`` + value bytes, score text and name into ``out`` from
    ``pos`` on; its value is the ``order[i]``-th of ``values`` (the rest are in blob order)."""
    for i in range(key_at.shape[0] - 1):
        v = order[i]
        pos = _copy(out, pos, keys, key_at[i], key_at[i + 1])
        pos = _copy(out, pos, tag, 0, tag.shape[0])
        pos = _copy(out, pos, values, value_at[v], value_at[v + 1])
        pos = _copy(out, pos, texts, text_at[i], text_at[i + 1])
        pos = _copy(out, pos, names, name_at[i], name_at[i + 1])
    return pos


def _cat(strings: list[bytes]) -> tuple[np.ndarray, IntArray]:
    at = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), out=at[1:])
    return np.frombuffer(b"".join(strings), dtype=np.uint8), at


def players_blob_flat(players: list[str], flat: FloatArray, offsets: IntArray, tag: bytes,
                      scores: Sequence[float]) -> memoryview:
    """``players_blob`` of the values ``tag`` + ``flat[offsets[i] : offsets[i + 1]]`` (little-endian
    float64) of ``players[i]``, byte for byte, written by one numba pass: no ``bytes`` per value
    and no join of them. A memoryview (redis-py sends it as it is)."""
    n = len(players)
    fscores, order = score_order(scores)
    keys, names = _names(list(map(players.__getitem__, order.tolist())))
    key_cat, key_at = _cat(keys)
    text_cat, text_at = _score_texts(fscores[order])
    name_cat, name_at = _cat(names)
    value_at = np.ascontiguousarray(offsets, dtype=np.int64) * 8
    raw = np.ascontiguousarray(flat, dtype="<f8").view(np.uint8)
    lens = np.empty((n, 4), dtype="<u4")
    lens[:, 0] = np.diff(key_at)
    lens[:, 1] = np.diff(value_at)[order] + len(tag)
    lens[:, 2] = np.diff(text_at)
    lens[:, 3] = np.diff(name_at)
    out = np.empty(16 * n + int(lens.sum(dtype=np.int64)), dtype=np.uint8)
    out[:16 * n] = lens.reshape(-1).view(np.uint8)
    end = _interleave(key_cat, key_at, np.frombuffer(tag, dtype=np.uint8), raw, value_at, order,
                      text_cat, text_at, name_cat, name_at, out, 16 * n)
    assert end == out.shape[0]
    return out.data


def pairs_blob(pairs: dict[str, bytes]) -> bytes:
    """``pairs`` as the scripts' blob of ``2·len(pairs)`` strings: name, value, name, value, ..."""
    enc = [x for k, v in pairs.items() for x in (k.encode(), v)]
    return struct.pack(f"<{len(enc)}I", *map(len, enc)) + b"".join(enc)


def strings_blob(items: Sequence[str]) -> bytes:
    """Length-prefixed list for the scripts: all little-endian u32 lengths first, then the bytes."""
    enc = [it.encode() for it in items]
    return struct.pack(f"<{len(enc)}I", *[len(b) for b in enc]) + b"".join(enc)


def warmup() -> None:
    """Compile (or load from numba's cache) the flat players blob on two players."""
    players_blob_flat(["a", "b:c"], np.zeros(3), np.array([0, 1, 3]), b"\x01", [1.0, 2.0])
