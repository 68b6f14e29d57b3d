"""The embedded store: decoded beliefs in a dict, plus the applied event ids.

It holds each belief exactly as a round trip through the pool's codec returns it
(``PoolEngine.canonical``), so the embedded replay equals the Redis-backed service bit
for bit without paying an encode/decode per result: an array, or for a pool whose engine
is ``packed`` the array's raw float64 bytes (``PoolEngine.unpack`` turns either into an array),
all of such a pool's held in one arena (``PackedPool``: a ``Mapping`` of the same bytes); for a
system whose engine rates matches in a pool-wide arena (Cowan) it is the player's slot there.
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
