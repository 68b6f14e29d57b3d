"""Applying rounds and match batches of one pool to stored (encoded) beliefs."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

import numpy as np

from stream.events.model import MatchBatch, RatingOutput, RoundEvent
from stream.ratings.base import Belief, Rating, RatingSystem
from stream.state.codecs import Codec, codec_for


@dataclass(slots=True)
class Applied:
    """What one batch changes: new encoded beliefs and the players' new ratings.

    ``ratings[player]`` is the Rating after the batch; its ``rounds`` doubles as the
    per-player output version (it grows by one for every event that changes the player).
    """

    updates: dict[str, bytes] = field(default_factory=dict)
    ratings: dict[str, Rating] = field(default_factory=dict)

    def outputs(self, pool: str, system: str, event_id: str, time: int) -> list[RatingOutput]:
        return [
            RatingOutput(pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, event_id, time, system)
            for p, r in self.ratings.items()
        ]


class PoolEngine:
    """One pool's rating system plus its codec; pure (no I/O)."""

    def __init__(self, pool: str, system: RatingSystem, codec: Codec | None = None) -> None:
        self.pool = pool
        self.system = system
        self.codec = codec if codec is not None else codec_for(system.name)

    def load(self, stored: Mapping[str, bytes | None], players: list[str]) -> list[Belief]:
        decode, new = self.codec.decode, self.system.new_belief
        out: list[Belief] = []
        for p in players:
            raw = stored.get(p)
            out.append(decode(raw) if raw is not None else new())
        return out

    def _collect(self, players: list[str], before: list[Belief], after: list[Belief]) -> Applied:
        """Keep the players whose belief changed; encode them once."""
        applied = Applied()
        encode, summary = self.codec.encode, self.system.summary
        for p, old, new in zip(players, before, after, strict=True):
            if new is old:
                continue
            applied.updates[p] = encode(new)
            applied.ratings[p] = summary(new)
        return applied

    def apply_round(self, event: RoundEvent, stored: Mapping[str, bytes | None]) -> Applied:
        """Rate one round. Duplicate players were rejected by validation."""
        before = self.load(stored, event.players)
        after = self.system.rate_round(before, event.ranks, event.time, event.weight, event.perf_ceiling)
        return self._collect(event.players, before, after)

    def apply_matches(self, batch: MatchBatch, stored: Mapping[str, bytes | None]) -> Applied:
        """Rate a batch of matches with exact sequential meaning."""
        index: dict[str, int] = {}
        for p in (*batch.a, *batch.b):
            index.setdefault(p, len(index))
        players = list(index)
        a = np.fromiter((index[p] for p in batch.a), dtype=np.int64, count=len(batch))
        b = np.fromiter((index[p] for p in batch.b), dtype=np.int64, count=len(batch))
        before = self.load(stored, players)
        after = self.system.rate_matches(before, a, b, batch.score_array(), batch.time_array())
        return self._collect(players, before, after)
