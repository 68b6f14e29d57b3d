"""The event ids a pool has applied, as 128-bit digests: the worker's index of its Redis log.

Why not a Redis SET of the ids: the atomic step waits for every ``SADD``, which halved the rate of
batched matches. So the step only *appends* each id's 16-byte digest to a string, and membership is
answered here, in the worker, from a hash table of the digests that mirrors the log exactly: the
index knows which prefix of the log it holds (the log's ``epoch``, bumped when a bounded log
rotates, and its length); a read (``RedisStore.snapshot``) returns, atomically with ``gen``, only
the bytes appended since (or both generations in full when the epoch moved); a commit carries the
(epoch, length) its answer came from, and refuses to write when the log is not exactly that.

The digest is XXH3-128 of the id's UTF-8 bytes: stable and specified, so every worker and version
agree. Two ids collide with probability 2⁻¹²⁸ per pair (an id colliding with an applied one would be
skipped as applied). ``MMR_SEEN_MAX_IDS`` bounds the memory in Redis and here.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Sequence

import numba as nb
import numpy as np
import xxhash

DIGEST = 16  # bytes per recorded id
MAX_LOAD = 0.7  # a table grows (doubles) before it is fuller than this
_MIN_CAPACITY = 64  # slots (16 bytes each): a pool with few ids costs little
_ONE = np.uint64(1)
_ZERO = np.uint64(0)

_digest = xxhash.xxh3_128_digest


def digests(ids: Sequence[str]) -> bytes:
    """The log bytes of ``ids``: each id's XXH3-128 digest, 16 bytes, in order."""
    return b"".join(map(_digest, map(str.encode, ids)))


def keys_of(blob: bytes) -> np.ndarray:
    """Digests (a log's bytes) as an (n, 2) uint64 array: the two halves of each digest."""
    if len(blob) % DIGEST:
        raise ValueError(f"an id log of {len(blob)} bytes is not a whole number of {DIGEST}-byte digests")
    return np.frombuffer(blob, dtype="<u8").reshape(-1, 2)


@nb.njit(cache=True, nogil=True)
def _slot(hi: np.ndarray, lo: np.ndarray, h: np.uint64, lw: np.uint64) -> int:
    """Linear probing from the digest's (uniform) low bits: the slot holding (h, lw), or the empty
    slot where it would go. (0, 0) marks an empty slot: the all-zero digest is stored as (0, 1)."""
    mask = np.uint64(hi.shape[0] - 1)
    i = np.int64(lw & mask)
    while True:
        a, b = hi[i], lo[i]
        if (a == h and b == lw) or (a == _ZERO and b == _ZERO):
            return int(i)
        i = np.int64((np.uint64(i) + _ONE) & mask)


@nb.njit(cache=True, nogil=True, inline="always")
def _norm(h: np.uint64, lw: np.uint64) -> np.uint64:
    return _ONE if h == _ZERO and lw == _ZERO else lw


@nb.njit(cache=True, nogil=True)
def _contains(hi: np.ndarray, lo: np.ndarray, keys: np.ndarray, out: np.ndarray) -> None:
    for k in range(keys.shape[0]):
        h = keys[k, 0]
        lw = _norm(h, keys[k, 1])
        i = _slot(hi, lo, h, lw)
        out[k] = out[k] or (hi[i] == h and lo[i] == lw)


@nb.njit(cache=True, nogil=True)
def _insert(hi: np.ndarray, lo: np.ndarray, keys: np.ndarray) -> int:
    """Insert ``keys`` (the table has room); returns how many were new."""
    added = 0
    for k in range(keys.shape[0]):
        h = keys[k, 0]
        lw = _norm(h, keys[k, 1])
        i = _slot(hi, lo, h, lw)
        if hi[i] == _ZERO and lo[i] == _ZERO:
            hi[i] = h
            lo[i] = lw
            added += 1
    return added


@nb.njit(cache=True, nogil=True)
def _rehash(hi: np.ndarray, lo: np.ndarray, new_hi: np.ndarray, new_lo: np.ndarray) -> None:
    for i in range(hi.shape[0]):
        h, lw = hi[i], lo[i]
        if h != _ZERO or lw != _ZERO:
            j = _slot(new_hi, new_lo, h, lw)
            new_hi[j] = h
            new_lo[j] = lw


class DigestSet:
    """An open-addressing hash set of 128-bit digests (two uint64 columns)."""

    __slots__ = ("count", "hi", "lo")

    def __init__(self, capacity: int = _MIN_CAPACITY) -> None:
        cap = _MIN_CAPACITY
        while cap < capacity:
            cap *= 2
        self.hi = np.zeros(cap, dtype=np.uint64)
        self.lo = np.zeros(cap, dtype=np.uint64)
        self.count = 0

    @property
    def nbytes(self) -> int:
        return int(self.hi.nbytes + self.lo.nbytes)

    def contains(self, keys: np.ndarray, out: np.ndarray | None = None) -> np.ndarray:
        """Which of ``keys`` (``keys_of``) are members, OR-ed into ``out`` when given."""
        res = np.zeros(len(keys), dtype=np.bool_) if out is None else out
        if self.count and len(keys):
            _contains(self.hi, self.lo, keys, res)
        return res

    def add(self, keys: np.ndarray) -> None:
        if not len(keys):
            return
        need = self.count + len(keys)
        if need > MAX_LOAD * len(self.hi):
            cap = len(self.hi)
            while need > MAX_LOAD * cap:
                cap *= 2
            hi, lo = np.zeros(cap, dtype=np.uint64), np.zeros(cap, dtype=np.uint64)
            _rehash(self.hi, self.lo, hi, lo)
            self.hi, self.lo = hi, lo
        self.count += _insert(self.hi, self.lo, keys)


class PoolIds:
    """One pool's recorded ids as of a known prefix of its Redis log: ``epoch``, its rotation count;
    ``length``, bytes of the current log held in ``cur``; ``old``, the previous generation in full."""

    __slots__ = ("cur", "epoch", "length", "old")

    def __init__(self, epoch: int, cur: bytes = b"", old: bytes = b"") -> None:
        self.epoch = epoch
        self.length = 0
        self.cur = DigestSet()
        self.old = DigestSet()
        self.old.add(keys_of(old))
        self.append(cur)

    def append(self, blob: bytes) -> None:
        """The log grew by ``blob`` (digests, in log order)."""
        keys = keys_of(blob)
        self.cur.add(keys)
        self.length += len(blob)

    def rotate(self, epoch: int) -> None:
        """The log was renamed to the old generation and a new one started (at ``epoch``)."""
        self.old, self.cur = self.cur, DigestSet()
        self.epoch, self.length = epoch, 0

    def contains(self, keys: np.ndarray) -> np.ndarray:
        return self.old.contains(keys, self.cur.contains(keys))

    @property
    def nbytes(self) -> int:
        return self.cur.nbytes + self.old.nbytes


def warmup() -> None:
    """Compile (or load from numba's cache) the table's kernels before the first batch."""
    s = DigestSet()
    k = keys_of(digests(["a", "b"]))
    s.add(k)
    s.contains(k)
    s.add(keys_of(digests([str(i) for i in range(2 * _MIN_CAPACITY)])))  # grows: _rehash
