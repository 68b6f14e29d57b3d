"""Explained rating changes: what a game client shows beside a new rating.

For each player a rated unit changed (a round, or a batch of matches) the explanation holds
``rating_before``, ``mu_before``, ``sigma_before`` (the prior's for a newcomer) and ``delta`` =
``rating`` − ``rating_before``; the cause: ``round_id``, or ``matches`` (how many the change covers)
and ``match_ids`` (the last ``MAX_MATCH_IDS``, oldest first); ``performance`` in a round where the
system's beliefs keep it (``FastPath.latest_performances``).

The worker (``stream.service.step_rating``) and the embedded replay's ``--history`` build it with the same
functions from the same beliefs, so both give the same bits, from what the store held before the
unit and the ratings after it (the kernels are not involved). Each explanation is encoded once, as
JSON text, by columns (one ``orjson.dumps`` of a unit's numbers, one ``%`` template per player); the
rating message and the ``:chg`` record embed those bytes.

A round is its own unit and replaces the explanation; consecutive match units of one step add up
(``rating_before`` stays that of the first, ``matches`` counts them all), so a match message's
explanation depends on where the batches were cut, as its ``version`` steps do.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from itertools import chain
from typing import Any, cast

import numpy as np
import orjson

from stream.events.model import MatchBatch, PlayerIndex, RoundEvent
from stream.ratings.base import Belief, FloatArray, Rating
from stream.ratings.codec import Float64Codec
from stream.ratings.fastpath import ColumnSummaries, RoundChange
from stream.state.memory import Held

from .pool import _BELIEF_FAULTS, PoolEngine

#: match ids one explanation lists at most (the latest); ``matches`` counts them all
MAX_MATCH_IDS = 16

Explanation = dict[str, Any]


def ratings_stored(engine: PoolEngine, stored: Mapping[str, bytes | None], players: Sequence[str]
                   ) -> dict[str, Rating] | None:
    """The summaries of what Redis holds for ``players`` (the prior's for absent ones), or None when a
    stored value is not a belief (rating it fails too, and names the cause). Read from the values'
    headers where the summary reads fixed positions (``ColumnSummaries``); otherwise decoded with
    ``remember``, so the rating that follows decodes nothing again."""
    fast, codec = engine.fast, engine.codec
    if isinstance(fast, ColumnSummaries) and isinstance(codec, Float64Codec) and players:
        # the header of each stored value: no decode (the summary reads three values of hundreds)
        prior = codec.encode(engine.system.new_belief())
        get = stored.get
        ratings = fast.summary_packed([prior if (r := get(p)) is None else r for p in players], tag=codec.tag[0])
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
        prior = Float64Codec.pack(fast.system.new_belief())
        packed = [prior if (h := held.get(p)) is None else h for p in players]
        ratings = fast.summary_packed(cast("list[bytes]", packed))
        if ratings is not None:
            return dict(zip(players, ratings, strict=True))
    # the held values summarised at once (``summary_many_held``: arena slots from the arena's block of
    # them, with no belief array per player), the absent players at the prior's summary
    values = list(map(held.get, players))
    known = iter(engine.summary_many_held([h for h in values if h is not None]))
    newcomer = engine.prior_rating
    return {p: newcomer if h is None else next(known) for p, h in zip(players, values, strict=True)}


def _summaries(engine: PoolEngine, beliefs: list[Belief | None], players: Sequence[str]) -> dict[str, Rating]:
    prior = engine.system.new_belief()
    full = [prior if b is None else b for b in beliefs]
    return dict(zip(players, engine.fast.summary_many(full), strict=True))


def performances_encoded(engine: PoolEngine, updates: Mapping[str, bytes]) -> dict[str, float] | None:
    """Each player's performance in the round from the new values written to Redis (None: the
    system keeps none, or its values are not float64-coded)."""
    if not isinstance(engine.codec, Float64Codec):
        return None
    return _performances(engine, list(updates), list(updates.values()), skip=len(Float64Codec.tag))


def performances_held(engine: PoolEngine, changed: Mapping[str, Held]) -> dict[str, float] | None:
    """``performances_encoded`` from what the embedded store holds next (packed bytes or arrays)."""
    if engine.fast.latest_performances(()) is None:
        return None
    # (arena slots, the ints of ``Held``, are Cowan's, whose beliefs keep no performance)
    packed = [h if isinstance(h, bytes) else Float64Codec.pack(cast("Belief", h)) for h in changed.values()]
    return _performances(engine, list(changed), packed)


def _performances(engine: PoolEngine, players: list[str], packed: Sequence[bytes], skip: int = 0
                  ) -> dict[str, float] | None:
    perfs = engine.fast.latest_performances(packed, skip)
    if perfs is None:
        return None
    return {p: x for p, x in zip(players, perfs, strict=True) if x is not None}


def player_matches(batch: MatchBatch, idx: PlayerIndex) -> tuple[list[int], list[list[str]]]:
    """Per player of ``idx.players``: their matches in the batch, and the ids of the last
    ``MAX_MATCH_IDS`` of them in batch order. Built by columns: one sort of (player, match)
    keys, then a player with one match (most, in a large pool) costs no loop body."""
    n = len(idx.a)
    pos = np.concatenate((idx.a, idx.b))
    counts = np.bincount(pos, minlength=len(idx.players))
    match = np.concatenate((np.arange(n), np.arange(n)))
    by_player = match[np.argsort(pos * n + match)]  # each player's matches, in batch order
    ends = np.cumsum(counts)
    get = batch.event_ids.__getitem__
    ids = list(map(list, zip(map(get, by_player[ends - 1].tolist()), strict=True)))  # [last id] each
    multi = np.flatnonzero(counts > 1)
    for j, end, count in zip(multi.tolist(), ends[multi].tolist(), counts[multi].tolist(), strict=True):
        ids[j] = list(map(get, by_player[end - min(count, MAX_MATCH_IDS):end].tolist()))
    return counts.tolist(), ids


#: the start of every explanation's JSON text; the rest is one ``%`` template per kind (below)
_HEAD = b'{"rating_before":%b,"mu_before":%b,"sigma_before":%b,"delta":%b,'
_MATCH_TEMPLATE = _HEAD + b'"matches":%d,"match_ids":%b}'


def round_template(round_id: str, performance: bool) -> bytes:
    """The ``%`` template of a round's explanations (``round_texts``): the round id's JSON text is the
    same for every player (its ``%`` escaped, as it becomes part of the template)."""
    rid = orjson.dumps(round_id).replace(b"%", b"%%")
    return _HEAD + b'"round_id":' + rid + (b',"performance":%b}' if performance else b"}")


def round_numbers(change: RoundChange) -> FloatArray:
    """The numbers of a round's explanations from its change by columns: a row per player of
    ``round_template``'s values, the same float64 values ``Explainer.round`` writes."""
    rb = change.rating_before
    cols = (rb, change.mu_before, change.sigma_before, np.subtract(change.rating, rb))  # delta as ``_columns``
    return np.column_stack(cols if change.performance is None else (*cols, change.performance))


def round_texts(templates: Sequence[bytes], numbers: FloatArray) -> list[bytes]:
    """``templates[i] % (the JSON text of each number of row i)``: the explanations of rows of
    ``round_numbers`` (of any rounds), the bytes ``Explainer.round`` gives, with one
    ``orjson.dumps`` for all of them."""
    it = _split(orjson.dumps(numbers.ravel().tolist()))
    return list(map(bytes.__mod__, templates, zip(*[it] * numbers.shape[1], strict=False)))


def _texts(*columns: Sequence[float]) -> Iterator[bytes]:
    """The JSON text of each value, row by row (``columns[0][0]``, ``columns[1][0]``, ...): one
    ``orjson.dumps`` of all of them, cut at the commas (a number has none), so each is the
    very text ``orjson.dumps`` gives the value inside a message."""
    return _split(orjson.dumps(list(chain.from_iterable(zip(*columns, strict=True)))))


def _split(flat: bytes) -> Iterator[bytes]:
    """The items of a JSON list of numbers (``orjson.dumps``'s text), each as it is there."""
    # the rows are cut from one iterator by ``zip(it, it, ...)``: ``strict`` checks their number
    return iter(flat[1:-1].split(b",")) if len(flat) > 2 else iter(())


def _columns(players: Sequence[str], before: Mapping[str, Rating], after: Mapping[str, Rating]
             ) -> tuple[tuple[float, ...], tuple[float, ...], tuple[float, ...], list[float]]:
    """rating, μ and σ before, and the change of the displayed rating, per player (by columns;
    numpy's float64 subtraction is Python's, bit for bit)."""
    rb, mb, sb, _ = zip(*map(before.__getitem__, players), strict=True)
    ra = [r.rating for r in map(after.__getitem__, players)]
    delta: list[float] = np.subtract(np.array(ra, dtype=np.float64), np.array(rb, dtype=np.float64)).tolist()
    return rb, mb, sb, delta


class Explainer:
    """The explanations of one step's outputs, unit by unit: ``of`` maps each player to the JSON text
    of their explanation, which the message and the ``:chg`` record both embed."""

    def __init__(self) -> None:
        self.of: dict[str, bytes] = {}
        #: players explained by matches of this step: (rating, μ, σ before, matches, match ids),
        #: what a later match unit of the step adds to
        self._sums: dict[str, tuple[float, float, float, int, list[str]]] = {}

    def fields(self, player: str) -> Explanation | None:
        """The explanation of ``player`` as a dict (None: none)."""
        text = self.of.get(player)
        return None if text is None else cast("Explanation", orjson.loads(text))

    def round(self, event: RoundEvent, before: Mapping[str, Rating] | None, after: Mapping[str, Rating],
              perfs: Mapping[str, float] | None) -> None:
        """A round changed the players of ``after`` (those with ``rounds`` 0 were only registered:
        nothing to explain). ``before`` None: unknown (``ratings_stored``), nothing is explained."""
        if before is None:
            self._forget(after)
            return
        players = [p for p, r in after.items() if r.rounds]
        if not players:
            return
        if self._sums:  # a round is its own unit: it replaces an explanation by matches
            for p in players:
                self._sums.pop(p, None)
        plain, with_perf = round_template(event.round_id, False), round_template(event.round_id, True)
        it = _texts(*_columns(players, before, after))
        for p, row in zip(players, zip(it, it, it, it, strict=False), strict=True):
            x = None if perfs is None else perfs.get(p)
            self.of[p] = plain % row if x is None else with_perf % (*row, orjson.dumps(x))

    def matches(self, batch: MatchBatch, idx: PlayerIndex, before: Mapping[str, Rating] | None,
                after: Mapping[str, Rating]) -> None:
        """A batch of matches changed the players of ``after``; a player whose explanation in
        this step already comes from matches keeps its ``rating_before`` and adds up."""
        of, sums = self.of, self._sums
        if before is None:
            self._forget(after)
            return
        counts, ids = player_matches(batch, idx)
        players = idx.players
        if of or len(after) != len(players) or not all(map(after.__contains__, players)):
            keep = [i for i, p in enumerate(players) if p in after]
            for i in keep:  # players already explained by matches of this step add up
                p = players[i]
                s = sums.get(p)
                if s is not None:
                    rb0, mb0, sb0, n0, ids0 = s
                    s = sums[p] = (rb0, mb0, sb0, n0 + counts[i], (ids0 + ids[i])[-MAX_MATCH_IDS:])
                    it = _texts((rb0,), (mb0,), (sb0,), (after[p].rating - rb0,))
                    of[p] = _MATCH_TEMPLATE % (*it, s[3], orjson.dumps(s[4]))
                    counts[i] = 0
            keep = [i for i in keep if counts[i]]
            players = [players[i] for i in keep]
            counts = [counts[i] for i in keep]
            ids = [ids[i] for i in keep]
            if not players:
                return
        rb, mb, sb, delta = _columns(players, before, after)
        it = _texts(rb, mb, sb, delta)
        rows = zip(it, it, it, it, counts, map(orjson.dumps, ids), strict=False)
        of.update(zip(players, map(_MATCH_TEMPLATE.__mod__, rows), strict=True))
        sums.update(zip(players, zip(rb, mb, sb, counts, ids, strict=True), strict=True))

    def _forget(self, players: Mapping[str, Rating]) -> None:
        for p in players:
            self.of.pop(p, None)
            self._sums.pop(p, None)
