"""The embedded store: encoded beliefs in a dict, same codec as Redis.

Keeping *encoded* bytes (not arrays) makes the embedded replay pass through exactly
the codec the service uses, so both produce bit-identical ratings even for lossy
codecs (Cowan's compressed distributions).
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator

from stream.engine.pool import Applied


class MemoryStore:
    """Per pool: player → encoded belief, the applied event ids, and last ratings."""

    def __init__(self) -> None:
        self.beliefs: dict[str, dict[str, bytes]] = {}
        self.seen: dict[str, set[str]] = {}

    def pool(self, pool: str) -> dict[str, bytes]:
        return self.beliefs.setdefault(pool, {})

    def is_applied(self, pool: str, event_id: str) -> bool:
        return event_id in self.seen.get(pool, ())

    def commit(self, pool: str, applied: Applied, event_ids: Iterable[str]) -> None:
        self.pool(pool).update(applied.updates)
        self.seen.setdefault(pool, set()).update(event_ids)

    def items(self) -> Iterator[tuple[str, str, bytes]]:
        for pool, players in self.beliefs.items():
            for player, raw in players.items():
                yield pool, player, raw
