"""The worker's copy of the encoded beliefs it last read or committed, per pool.

Why: a worker that owns a pool's partitions is usually its only writer, so re-reading every
player's belief before each batch mostly returns what it just wrote, a good part of a large batch's
time. It is exact, not a heuristic: every write of a pool's beliefs goes through the commit, which
compares and increments the pool's ``gen``, so the cached bytes are Redis's while Redis's ``gen``
equals the cached one (after our commit returned ``g``, Redis held our bytes at ``g``; a read at
``g`` may fill the gaps; any other writer moves ``gen``, and the pool's entries are dropped). A
player cached as ``None`` has no stored belief at that ``gen``. Over the byte budget whole pools
are dropped, the others before the one being filled.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from itertools import filterfalse

#: rough per-entry overhead of a dict slot plus the key and value objects (CPython, 64-bit)
_ENTRY_OVERHEAD = 120


@dataclass(slots=True)
class PoolCache:
    """One pool's entries, valid at ``gen`` (None: nothing known)."""

    gen: str | None = None
    values: dict[str, bytes | None] = field(default_factory=dict)
    nbytes: int = 0
    #: the pool's learned side advantages (``:adv``, side -> stored bytes) at ``gen``; None: not known
    adv: dict[bytes, bytes] | None = None

    def missing(self, players: Iterable[str]) -> list[str]:
        """The players whose stored belief must still be read (all of them when ``gen`` is unknown)."""
        if self.gen is None:
            return list(players)
        return list(filterfalse(self.values.__contains__, players))

    def get_many(self, players: Collection[str]) -> dict[str, bytes | None]:
        """The entries of ``players`` (every one must be cached); C-level passes, no loop body per player."""
        return dict(zip(players, map(self.values.__getitem__, players), strict=True))


class BeliefCache:
    """Per-pool caches under one byte budget (``max_bytes`` 0 disables caching)."""

    def __init__(self, max_bytes: int) -> None:
        self.max_bytes = max_bytes
        self.pools: dict[str, PoolCache] = {}
        self.nbytes = 0

    @property
    def enabled(self) -> bool:
        return self.max_bytes > 0

    def pool(self, pool: str) -> PoolCache:
        entry = self.pools.get(pool)
        if entry is None:
            entry = self.pools[pool] = PoolCache()
        return entry

    def drop(self, pool: str) -> None:
        """Forget a pool (a conflict: someone else wrote it; or its partitions were revoked)."""
        entry = self.pools.pop(pool, None)
        if entry is not None:
            self.nbytes -= entry.nbytes

    def clear(self) -> None:
        self.pools.clear()
        self.nbytes = 0

    def fill(self, pool: str, gen: str, read: Mapping[str, bytes | None],
             adv: Mapping[bytes, bytes] | None = None) -> PoolCache:
        """Record a read at ``gen`` (``adv``: the advantages it read, if it read them); a read at another
        ``gen`` than the cached one replaces the pool."""
        entry = self.pool(pool)
        if entry.gen != gen:
            self.drop(pool)
            entry = self.pool(pool)
            entry.gen = gen
        if adv is not None:
            entry.adv = dict(adv)
        self._put(pool, entry, read)
        return entry

    def committed(self, pool: str, old_gen: str, new_gen: int, written: Mapping[str, bytes],
                  adv: Mapping[str, bytes] | None = None) -> None:
        """Our commit moved ``gen`` from ``old_gen`` to ``new_gen`` writing ``written`` (and the sides ``adv``)."""
        entry = self.pool(pool)
        if entry.gen != old_gen:  # the entries are of another gen: nothing known of the others
            self.drop(pool)
            entry = self.pool(pool)
        entry.gen = str(new_gen)
        if entry.adv is not None and adv:
            entry.adv.update((k.encode(), v) for k, v in adv.items())
        self._put(pool, entry, written)

    def _put(self, pool: str, entry: PoolCache, items: Mapping[str, bytes | None]) -> None:
        """Store ``items``; the byte count is an upper bound (a replaced entry counts again),
        recounted exactly only when it passes the budget, so a batch pays no per-entry loop."""
        entry.values.update(items)  # the caller may still use ``entry`` (complete) after a drop
        if not self.enabled:
            self.drop(pool)
            return
        added = _size(items)
        entry.nbytes += added
        self.nbytes += added
        if self.nbytes <= self.max_bytes:
            return
        for e in self.pools.values():
            e.nbytes = _size(e.values)
        self.nbytes = sum(e.nbytes for e in self.pools.values())
        # keep a quarter of the budget free, so recounts stay rare: other pools go first
        for other in [k for k in self.pools if k != pool]:
            if self.nbytes <= self.max_bytes * 3 // 4:
                return
            self.drop(other)
        if self.nbytes > self.max_bytes * 3 // 4:
            self.drop(pool)


def _size(items: Mapping[str, bytes | None]) -> int:
    """Approximate memory of the entries: key and value lengths plus a fixed overhead each."""
    return sum(map(len, items)) + sum(map(len, filter(None, items.values()))) + _ENTRY_OVERHEAD * len(items)
