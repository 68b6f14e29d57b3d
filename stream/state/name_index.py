"""``NameIndex``: player name → dense index (0, 1, 2, … in the order added), looked up a round at a time.

Why not a dict: a round's players are looked up by name every round (millions of look-ups over a long
history), and a dict's look-up follows four pointers (its index table, the entry, the key string, the
value's int object), each a cache miss once a pool holds hundreds of thousands of players. Here the
names' UTF-8 bytes lie one after another in one buffer and an open-addressing table holds (hash,
index) pairs side by side: a look-up reads one table slot and the bytes of the name it points to, in a
numba loop over the whole round.

Threads: ``PackedPool.look_ahead`` looks names up from the reading thread while the rating thread
adds new ones. Both kernels hold the GIL (no ``nogil``), so neither runs inside the other, and an
array is written in place only while it is the current one: growing copies every array (``_grow``)
and swaps them in as one tuple, so a look-up that took the previous tuple reads a consistent,
older table (its answer can miss the names added since: −1, as the look-ahead expects).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Sequence

import numba as nb
import numpy as np

from stream.ratings.base import IntArray
from stream.runtime.copies import prefetch

_FNV_OFFSET = np.uint64(0xCBF29CE484222325)
_FNV_PRIME = np.uint64(0x100000001B3)
_EMPTY = np.uint64(0)  # a slot's index field: index + 1, 0 for an empty slot
_MIN_SLOTS = 1 << 10


@nb.njit(cache=True)
def _hash(data, a: int, b: int) -> np.uint64:
    """FNV-1a of ``data[a:b]``, its bits mixed (splitmix64's finaliser) so the low bits index a table."""
    h = _FNV_OFFSET
    for q in range(a, b):
        h = (h ^ np.uint64(data[q])) * _FNV_PRIME
    h = (h ^ (h >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    h = (h ^ (h >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return h ^ (h >> np.uint64(31))


@nb.njit(cache=True)
def _find(table, names, starts, data, a: int, b: int, h: np.uint64) -> np.int64:
    """The slot holding ``data[a:b]`` (hash ``h``), or the empty slot where it would go, as −2 − slot."""
    mask = (table.shape[0] >> 1) - 1
    s = np.int64(h & np.uint64(mask))
    n = b - a
    while True:
        got = table[2 * s + 1]
        if got == _EMPTY:
            return -2 - s
        if table[2 * s] == h:
            i = np.int64(got) - 1
            c = starts[i]
            if starts[i + 1] - c == n:
                same = True
                for q in range(n):
                    if names[c + q] != data[a + q]:
                        same = False
                        break
                if same:
                    return s
        s = (s + 1) & mask


@nb.njit(cache=True)
def _lookup(table, names, starts, data, offsets, out) -> None:
    """``out[k]``: the index of name k of ``data`` (``offsets``), −1 when it is not held.

    In passes over the whole round, each asking ahead (``prefetch``) for what the next one reads: the
    names' slots, then where their candidates' bytes start, then those bytes. One name's look-up is a
    chain of cache misses; the passes let those of a round's names overlap instead."""
    n = offsets.shape[0] - 1
    mask = (table.shape[0] >> 1) - 1
    hashes = np.empty(n, dtype=np.uint64)
    for k in range(n):
        h = _hash(data, offsets[k], offsets[k + 1])
        hashes[k] = h
        prefetch(table, 2 * np.int64(h & np.uint64(mask)), False)
    for k in range(n):  # the first slot's name, when its hash matches (out: −1, a placeholder)
        s = np.int64(hashes[k] & np.uint64(mask))
        got = table[2 * s + 1]
        out[k] = np.int64(got) - 1 if got != _EMPTY and table[2 * s] == hashes[k] else -1
        if out[k] >= 0:
            prefetch(starts, out[k], False)
    for k in range(n):
        if out[k] >= 0:
            prefetch(names, starts[out[k]], False)
    for k in range(n):
        s = _find(table, names, starts, data, offsets[k], offsets[k + 1], hashes[k])
        out[k] = np.int64(table[2 * s + 1]) - 1 if s >= 0 else -1


@nb.njit(cache=True)
def _add(table, names, starts, count: int, data, offsets) -> None:
    """Names of ``data`` (``offsets``; none held yet) as indices ``count``, ``count + 1``, …: their bytes
    after the held names', and a slot each (the arrays have room: ``NameIndex._room``)."""
    end = starts[count]
    for k in range(offsets.shape[0] - 1):
        a, b = offsets[k], offsets[k + 1]
        i = count + k
        for q in range(b - a):
            names[end + q] = data[a + q]
        end += b - a
        starts[i + 1] = end
        h = _hash(data, a, b)
        s = _find(table, names, starts, data, a, b, h)
        if s >= 0:
            raise ValueError("a name added twice to a NameIndex")
        table[2 * (-2 - s)] = h
        table[2 * (-2 - s) + 1] = np.uint64(i + 1)


@nb.njit(cache=True)
def _rehash(new, names, starts, count: int) -> None:
    """Every held name's slot in the larger table ``new``."""
    for i in range(count):
        a, b = starts[i], starts[i + 1]
        h = _hash(names, a, b)
        s = -2 - _find(new, names, starts, names, a, b, h)
        new[2 * s] = h
        new[2 * s + 1] = np.uint64(i + 1)


def _encoded(names: Sequence[str]) -> tuple[np.ndarray, IntArray]:
    """The names' UTF-8 bytes one after another, and where each starts (``surrogatepass``: a name read
    with ``surrogateescape`` still has bytes of its own, different from every other name's)."""
    text = "".join(names)
    n = len(names)
    offsets = np.zeros(n + 1, dtype=np.int64)
    if text.isascii():
        raw = text.encode("ascii")
        np.cumsum(np.fromiter(map(len, names), dtype=np.int64, count=n), out=offsets[1:])
    else:
        parts = [s.encode("utf-8", "surrogatepass") for s in names]
        raw = b"".join(parts)
        np.cumsum(np.fromiter(map(len, parts), dtype=np.int64, count=n), out=offsets[1:])
    return np.frombuffer(raw, dtype=np.uint8), offsets


class NameIndex:
    """Names → their index, in the order added (module doc)."""

    def __init__(self) -> None:
        # (table: 2 uint64 a slot, hash and index + 1; names' bytes; where name i starts, its end at i + 1)
        self._state = (np.zeros(2 * _MIN_SLOTS, dtype=np.uint64), np.empty(1 << 12, dtype=np.uint8),
                       np.zeros(_MIN_SLOTS // 2 + 1, dtype=np.int64))
        self._count = 0

    def __len__(self) -> int:
        return self._count

    def __contains__(self, name: object) -> bool:
        return isinstance(name, str) and self.get(name) >= 0

    def __getitem__(self, name: str) -> int:
        i = self.get(name)
        if i < 0:
            raise KeyError(name)
        return i

    def get(self, name: str, default: int = -1) -> int:
        """The index of ``name``, ``default`` when it is not held."""
        i = int(self.lookup([name])[0])
        return i if i >= 0 else default

    def lookup(self, names: Sequence[str]) -> IntArray:
        """Each name's index, −1 for one not held."""
        table, held, starts = self._state  # one tuple: the arrays of one moment (module doc)
        data, offsets = _encoded(names)
        out = np.empty(len(names), dtype=np.int64)
        _lookup(table, held, starts, data, offsets, out)
        return out

    def add(self, names: Sequence[str]) -> None:
        """Hold ``names`` (distinct, none held yet) as the next indices, in order."""
        if not names:
            return
        data, offsets = _encoded(names)
        self._room(len(names), int(offsets[-1]))
        table, held, starts = self._state
        _add(table, held, starts, self._count, data, offsets)
        self._count += len(names)

    def _room(self, more: int, nbytes: int) -> None:
        """Arrays with room for ``more`` names of ``nbytes`` bytes, the table at most half full: new
        arrays (every one, copied) when any is short, so the previous ones are never written again."""
        table, held, starts = self._state
        count = self._count
        end = int(starts[count])
        need = count + more
        if 2 * need <= table.shape[0] // 2 and need < starts.shape[0] and end + nbytes <= held.shape[0]:
            return
        slots = table.shape[0] // 2
        while 2 * need > slots:
            slots *= 2
        new_held = np.empty(max(held.shape[0], 2 * (end + nbytes)), dtype=np.uint8)
        new_held[:end] = held[:end]
        new_starts = np.zeros(max(starts.shape[0], 2 * need + 1), dtype=np.int64)
        new_starts[: count + 1] = starts[: count + 1]
        new_table = np.zeros(2 * slots, dtype=np.uint64)
        _rehash(new_table, new_held, new_starts, count)
        self._state = (new_table, new_held, new_starts)


def warmup() -> None:
    """Compile (or load from numba's cache) the kernels on a few names, enough to grow the table once."""
    index = NameIndex()
    index.add(["é", *map(str, range(_MIN_SLOTS))])
    index.lookup(["é", "b"])
