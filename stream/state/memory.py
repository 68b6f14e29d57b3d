"""The embedded store: per pool the beliefs as ``PoolEngine`` holds them, plus the applied event ids.

Each belief is held exactly as a round trip through the pool's codec returns it
(``PoolEngine.canonical``), so the embedded replay equals the Redis-backed service bit for bit
without an encode/decode per result: an array; for a ``packed`` engine its raw float64 bytes, all
of the pool's in one arena (``PackedPool``); for a pool-wide arena of matches (Cowan) the slot.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from typing import cast

from stream.ratings.base import Belief
from stream.state.packed_pool import PackedPool

Held = Belief | bytes | int  # what the store keeps per player (see the module docstring)


class MemoryStore:
    """Per pool: player → belief, and the set of applied event ids (idempotence)."""

    def __init__(self) -> None:
        self.beliefs: dict[str, dict[str, Held] | PackedPool] = {}
        self.seen: dict[str, set[str]] = {}

    def pool(self, pool: str, packed: bool = False) -> dict[str, Held] | PackedPool:
        """The pool's beliefs; a pool first asked for ``packed`` keeps them in one arena."""
        held = self.beliefs.get(pool)
        if held is None:
            held = self.beliefs[pool] = PackedPool() if packed else {}
        return held

    def is_applied(self, pool: str, event_id: str) -> bool:
        return event_id in self.seen.get(pool, ())

    def any_applied(self, pool: str, event_ids: Iterable[str]) -> bool:
        """Whether any of ``event_ids`` was applied to ``pool``."""
        seen = self.seen.get(pool)
        return seen is not None and not seen.isdisjoint(event_ids)

    def commit(self, pool: str, changed: Mapping[str, Held], event_ids: Iterable[str]) -> None:
        held = self.pool(pool)
        if isinstance(held, PackedPool):  # holds packed beliefs only (``PoolEngine.packed``)
            held.update(cast("Mapping[str, bytes]", changed))
        else:
            held.update(changed)
        self.seen.setdefault(pool, set()).update(event_ids)

    def items(self) -> Iterator[tuple[str, str, Held]]:
        for pool, players in self.beliefs.items():
            for player, belief in players.items():
                yield pool, player, belief
