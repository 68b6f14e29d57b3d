"""Applying rounds and match batches of one pool to stored beliefs.

Two entry points with one meaning:
* ``rate_round`` / ``rate_matches`` work on decoded beliefs (the embedded store keeps
  them decoded, so a long replay pays no codec cost per result);
* ``apply_round`` / ``apply_matches`` work on encoded bytes (what Redis holds) and also
  return the new ratings to publish.
Every new belief passes through ``canonical`` — ``decode(encode(b))`` for a lossy
codec, ``b`` itself for a lossless one or for a system whose beliefs are already fixed
points of its codec (Cowan quantises after every match, so batching never changes a
result) — so the embedded store holds exactly what a round trip through Redis would
give back, and both paths stay bit-identical.

The per-player work around the kernels (decoding what the store holds, encoding the new
beliefs, their summaries) runs as one batched call each (``decode_many`` /
``encode_many`` / ``summary_many``), which give exactly the per-player results.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import TypeVar, cast

import numpy as np

from stream.events.model import MatchBatch, PlayerIndex, RoundEvent, index_players
from stream.ratings.base import Belief, Rating, RatingSystem
from stream.state.codecs import Codec, Float64Codec, codec_for, decode_many, encode_many
from stream.state.memory import Held

_H = TypeVar("_H", Belief, bytes)  # a belief as an array, or packed


def _new_or_changed(players: list[str], before: list[_H], after: list[_H],
                    known: Mapping[str, object]) -> dict[str, _H]:
    """Players whose entry the system replaced (it returns an unchanged player's very object)
    or that ``known`` did not hold yet (see ``PoolEngine._changed``), with their new entry."""
    return {p: new for p, old, new in zip(players, before, after, strict=True) if new is not old or p not in known}


@dataclass(slots=True)
class Applied:
    """What one batch changes: new encoded beliefs and the players' new ratings.

    ``ratings[player]`` is the Rating after the batch; its ``rounds`` doubles as the
    per-player output version (it grows by one for every event that changes the player).
    A player with ``rounds`` 0 was only registered by an event that changed nothing (see
    ``PoolEngine._changed``): stored and on the leaderboard, but not published.
    """

    updates: dict[str, bytes] = field(default_factory=dict)
    ratings: dict[str, Rating] = field(default_factory=dict)


class PoolEngine:
    """One pool's rating system plus its codec; pure (no I/O)."""

    def __init__(self, pool: str, system: RatingSystem, codec: Codec | None = None) -> None:
        self.pool = pool
        self.system = system
        self.codec = codec if codec is not None else codec_for(system.name)
        #: the embedded store holds this pool's beliefs *packed* (each one's raw float64 bytes)
        #: when the system rates rounds on packed beliefs and its codec keeps every bit: no
        #: numpy array is made or freed per player and round (Elo-MMR over the Codeforces
        #: history: BENCHMARKS.md, "Elo-MMR"); ``store_round`` / ``store_matches`` / ``unpack``
        self.packed = system.packed_rounds and (self.codec.lossless or system.canonical_state)

    # --- decoded beliefs ------------------------------------------------------------
    def canonical(self, belief: Belief) -> Belief:
        """The belief as it comes back from the store (no round trip when the system's
        beliefs are already fixed points of its codec: ``system.canonical_state``)."""
        if self.codec.lossless or self.system.canonical_state:
            return belief
        return self.codec.decode(self.codec.encode(belief))

    def _changed(self, players: list[str], before: list[Belief], after: list[Belief],
                 known: Mapping[str, Belief]) -> dict[str, Belief]:
        """The players whose belief the event changed, plus the players ``known`` (the store)
        did not hold yet: an event that changes nothing (a round of one player, or all tied)
        still makes its players part of the pool, stored at their prior with ``rounds`` 0,
        so that the final ratings list every player who took part (CONTRACT: "the final
        rating of every player"). No rating is published for them: nothing changed."""
        moved = _new_or_changed(players, before, after, known)
        if self.codec.lossless or self.system.canonical_state:  # the hot path: no call per player
            return moved
        codec = self.codec
        back = decode_many(codec, encode_many(codec, list(moved.values())))
        return dict(zip(moved, back, strict=True))

    def rate_round(self, event: RoundEvent, beliefs: Mapping[str, Belief]) -> dict[str, Belief]:
        """New beliefs of the players the round changed (duplicates were rejected upstream)."""
        new = self.system.new_belief
        before = [b if (b := beliefs.get(p)) is not None else new() for p in event.players]
        after = self.system.rate_round(before, event.ranks, event.time, event.weight, event.perf_ceiling)
        return self._changed(event.players, before, after, beliefs)

    def rate_matches(self, batch: MatchBatch, beliefs: Mapping[str, Belief],
                     index: PlayerIndex | None = None) -> dict[str, Belief]:
        """New beliefs after a batch of matches, with exact sequential meaning.

        ``index``: the batch's ``index_players``, when the caller built it already."""
        idx = index if index is not None else index_players(batch)
        new = self.system.new_belief
        before = [x if (x := beliefs.get(p)) is not None else new() for p in idx.players]
        after = self.system.rate_matches(before, idx.a, idx.b, batch.score_array(), batch.time_array())
        return self._changed(idx.players, before, after, beliefs)

    # --- what the embedded store holds (packed bytes or arrays: ``packed``) ------------
    def unpack(self, held: Held) -> Belief:
        """A belief the embedded store holds, as an array."""
        return np.frombuffer(held, dtype="<f8").astype(np.float64) if isinstance(held, bytes) else held

    def store_round(self, event: RoundEvent, held: Mapping[str, Held]) -> Mapping[str, Held]:
        """``rate_round`` on what the embedded store holds; returns what it should hold next."""
        if not self.packed:
            return self.rate_round(event, cast("Mapping[str, Belief]", held))  # arrays when not packed
        system = self.system
        new = system.new_packed_belief
        before = cast("list[bytes]", [b if (b := held.get(p)) is not None else new() for p in event.players])
        after = system.rate_round_packed(before, event.ranks, event.time, event.weight, event.perf_ceiling)
        return _new_or_changed(event.players, before, after, held)  # packed: lossless, so no round trip

    def store_matches(self, batch: MatchBatch, held: Mapping[str, Held]) -> Mapping[str, Held]:
        """``rate_matches`` on what the embedded store holds (matches of a packed pool go
        through arrays: only rounds have a packed kernel)."""
        if not self.packed:
            return self.rate_matches(batch, cast("Mapping[str, Belief]", held))
        idx = index_players(batch)
        arrays = {p: self.unpack(h) for p in idx.players if (h := held.get(p)) is not None}
        changed = self.rate_matches(batch, arrays, idx)
        return {p: np.asarray(b, dtype="<f8").tobytes() for p, b in changed.items()}

    # --- encoded beliefs (the Redis path) -------------------------------------------
    def decode_all(self, stored: Mapping[str, bytes | None], players: list[str]) -> dict[str, Belief]:
        """The stored beliefs of ``players`` (absent ones left out), decoded in one batch."""
        present = [(p, raw) for p in players if (raw := stored.get(p)) is not None]
        beliefs = decode_many(self.codec, [raw for _, raw in present])
        return {p: b for (p, _), b in zip(present, beliefs, strict=True)}

    def _encode(self, changed: dict[str, Belief]) -> Applied:
        players = list(changed)
        beliefs = list(changed.values())
        return Applied(
            updates=dict(zip(players, encode_many(self.codec, beliefs), strict=True)),
            ratings=dict(zip(players, self.system.summary_many(beliefs), strict=True)),
        )

    def apply_round(self, event: RoundEvent, stored: Mapping[str, bytes | None]) -> Applied:
        """Rate one round on encoded beliefs; returns encoded updates and new ratings."""
        return self._encode(self.rate_round(event, self.decode_all(stored, event.players)))

    def apply_matches(self, batch: MatchBatch, stored: Mapping[str, bytes | None],
                      index: PlayerIndex | None = None) -> Applied:
        """Rate a batch of matches on encoded beliefs (exact sequential meaning)."""
        idx = index if index is not None else index_players(batch)
        fast = self._apply_matrix(batch, stored, idx)
        if fast is not None:
            return fast
        return self._encode(self.rate_matches(batch, self.decode_all(stored, idx.players), idx))

    def _apply_matrix(self, batch: MatchBatch, stored: Mapping[str, bytes | None],
                      idx: PlayerIndex) -> Applied | None:
        """``apply_matches`` on one (players × width) matrix, for a system with a fixed
        ``belief_width`` stored as float64: no array, list or dict of beliefs per player
        (in a large pool, where a batch brings ~2 players a match, that per-player work
        was most of the worker's time). The same bits as the per-belief path, which runs
        instead (None) for anything else, including every input it must reject."""
        system, codec = self.system, self.codec
        width = system.belief_width
        if width is None or not isinstance(codec, Float64Codec):
            return None
        players = idx.players
        raws = list(map(stored.get, players))
        state = np.empty((len(players), width), dtype=np.float64)
        prior = np.asarray(system.new_belief(), dtype=np.float64)
        if prior.shape != (width,):
            return None
        state[:] = prior
        known = [raw for raw in raws if raw is not None]
        if known:
            rows = codec.decode_rows(known, width)
            if rows is None:
                return None
            state[[i for i, raw in enumerate(raws) if raw is not None]] = rows
        system.rate_matches_columns(state, idx.a, idx.b, batch.score_array(), batch.time_array())
        ratings = system.summary_columns(state)
        if ratings is None:
            return None
        return Applied(updates=dict(zip(players, codec.encode_rows(state), strict=True)),
                       ratings=dict(zip(players, ratings, strict=True)))
