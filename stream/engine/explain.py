"""Explained rating changes: what a game client shows beside a new rating.

For each player a rated unit changed (a round, or a batch of matches) the explanation holds

* ``rating_before``, ``mu_before``, ``sigma_before``: the summary of the player's belief before
  the unit (the system's prior for a newcomer), and ``delta`` = ``rating`` − ``rating_before``;
* the cause: ``round_id`` for a round; for matches ``matches`` (how many of the player's matches
  the change covers) and ``match_ids`` (the last ``MAX_MATCH_IDS`` of them, oldest first; the
  output's ``event_id`` is the last one);
* ``performance``: the player's performance in the round, where the system's beliefs keep it
  (Elo-MMR with logistic terms: ``FastPath.latest_performances``).

The worker (``stream.service.step``) and the embedded replay's history (``--history``) build it
with the same functions from the same beliefs, so both give the same bits. It is computed only
where outputs are made, from what the store held before the unit and the ratings after it: the
rating kernels are not involved.

A rating message covers everything its step changed for the player. A round is its own unit
and replaces the explanation; consecutive match units of one step add up (``rating_before``
stays that of the first, ``matches`` counts them all). So the explanation of a match message
depends on where the worker's batches were cut (as its ``version`` steps do), while a round's
does not: the embedded replay cuts matches by ``--batch-size``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any, cast

import numpy as np

from stream.events.model import MatchBatch, PlayerIndex, RoundEvent
from stream.ratings.base import Belief, Rating
from stream.ratings.fastpath import ColumnSummaries
from stream.state.codecs import Float64Codec
from stream.state.memory import Held

from .pool import _BELIEF_FAULTS, PoolEngine

#: match ids one explanation lists at most (the latest); ``matches`` counts them all
MAX_MATCH_IDS = 16

Explanation = dict[str, Any]


def ratings_stored(engine: PoolEngine, stored: Mapping[str, bytes | None], players: Sequence[str]
                   ) -> dict[str, Rating] | None:
    """The summaries of what Redis holds for ``players`` (the prior's for absent ones), or None
    when a stored value is not a belief (rating it fails too, and names the cause).

    Decoded with ``remember``: for a system with decoded beliefs kept by the engine (Cowan),
    the rating that follows then decodes nothing again."""
    fast, codec = engine.fast, engine.codec
    if isinstance(fast, ColumnSummaries) and isinstance(codec, Float64Codec):
        # the header of each stored value: no decode (the summary reads three values of hundreds)
        prior = codec.encode(engine.system.new_belief())
        raws = [prior if (r := stored.get(p)) is None else r for p in players]
        if all(r[:1] == prior[:1] for r in raws):
            ratings = fast.summary_packed(raws, skip=1)
            if ratings is not None:
                return dict(zip(players, ratings, strict=True))
    try:
        known = engine.decode_all(stored, list(players))
        return _summaries(engine, [known.get(p) for p in players], players)
    except _BELIEF_FAULTS:
        return None


def ratings_held(engine: PoolEngine, held: Mapping[str, Held], players: Sequence[str]) -> dict[str, Rating]:
    """The summaries of what the embedded store holds for ``players`` (the prior's for absent ones)."""
    fast = engine.fast
    if engine.packed and isinstance(fast, ColumnSummaries) and players:
        prior = fast.system.new_belief().astype("<f8").tobytes()
        packed = [prior if (h := held.get(p)) is None else h for p in players]
        ratings = fast.summary_packed(cast("list[bytes]", packed))
        if ratings is not None:
            return dict(zip(players, ratings, strict=True))
    unpack = engine.unpack
    return _summaries(engine, [None if (h := held.get(p)) is None else unpack(h) for p in players], players)


def _summaries(engine: PoolEngine, beliefs: list[Belief | None], players: Sequence[str]) -> dict[str, Rating]:
    prior = engine.system.new_belief()
    full = [prior if b is None else b for b in beliefs]
    return dict(zip(players, engine.fast.summary_many(full), strict=True))


def performances_encoded(engine: PoolEngine, updates: Mapping[str, bytes]) -> dict[str, float] | None:
    """Each player's performance in the round from the new values written to Redis (None: the
    system keeps none, or its values are not float64-coded)."""
    if not isinstance(engine.codec, Float64Codec):
        return None
    return _performances(engine, list(updates), list(updates.values()), skip=1)  # past the codec's tag


def performances_held(engine: PoolEngine, changed: Mapping[str, Held]) -> dict[str, float] | None:
    """``performances_encoded`` from what the embedded store holds next (packed bytes or arrays)."""
    packed = [h if isinstance(h, bytes) else np.ascontiguousarray(h, dtype="<f8").tobytes()
              for h in changed.values()]
    return _performances(engine, list(changed), packed)


def _performances(engine: PoolEngine, players: list[str], packed: Sequence[bytes], skip: int = 0
                  ) -> dict[str, float] | None:
    perfs = engine.fast.latest_performances(packed, skip)
    if perfs is None:
        return None
    return {p: x for p, x in zip(players, perfs, strict=True) if x is not None}


def player_matches(batch: MatchBatch, idx: PlayerIndex) -> list[tuple[int, list[str]]]:
    """Per player of ``idx.players``: (their matches in the batch, the ids of the last
    ``MAX_MATCH_IDS`` of them in batch order)."""
    n = len(idx.a)
    pos = np.concatenate((idx.a, idx.b))
    order = np.argsort(pos, kind="stable")  # by player
    match = np.concatenate((np.arange(n), np.arange(n)))[order].tolist()
    counts = np.bincount(pos, minlength=len(idx.players)).tolist()
    get = batch.event_ids.__getitem__
    out = []
    start = 0
    for count in counts:
        end = start + count
        mine = match[start:end]
        if count > 1:
            mine.sort()  # the player's a-side and b-side matches, in batch order
        out.append((count, list(map(get, mine[-MAX_MATCH_IDS:]))))
        start = end
    return out


class Explainer:
    """The explanations of one step's outputs (``of``: player → explanation), unit by unit."""

    def __init__(self) -> None:
        self.of: dict[str, Explanation] = {}

    def round(self, event: RoundEvent, before: Mapping[str, Rating] | None, after: Mapping[str, Rating],
              perfs: Mapping[str, float] | None) -> None:
        """A round changed the players of ``after`` (those with ``rounds`` 0 were only registered:
        nothing to explain). ``before`` None: unknown (``ratings_stored``), nothing is explained."""
        of = self.of
        if before is None:
            self._forget(after)
            return
        rid = event.round_id
        for p, r in after.items():
            if not r.rounds:
                continue
            b = before[p]
            e = {"rating_before": b.rating, "mu_before": b.mu, "sigma_before": b.sigma,
                 "delta": r.rating - b.rating, "round_id": rid}
            if perfs is not None and (x := perfs.get(p)) is not None:
                e["performance"] = x
            of[p] = e

    def matches(self, batch: MatchBatch, idx: PlayerIndex, before: Mapping[str, Rating] | None,
                after: Mapping[str, Rating]) -> None:
        """A batch of matches changed the players of ``after``; a player whose explanation in
        this step already comes from matches keeps its ``rating_before`` and adds up."""
        of = self.of
        if before is None:
            self._forget(after)
            return
        for p, (count, ids) in zip(idx.players, player_matches(batch, idx), strict=True):
            r = after.get(p)
            if r is None:
                continue
            e = of.get(p)
            if e is not None and "matches" in e:
                e["matches"] += count
                e["match_ids"] = (e["match_ids"] + ids)[-MAX_MATCH_IDS:]
                e["delta"] = r.rating - e["rating_before"]
                continue
            b = before[p]
            of[p] = {"rating_before": b.rating, "mu_before": b.mu, "sigma_before": b.sigma,
                     "delta": r.rating - b.rating, "matches": count, "match_ids": ids}

    def _forget(self, players: Mapping[str, Rating]) -> None:
        for p in players:
            self.of.pop(p, None)
