"""The in-process pipeline: the service's steps with files in and a dict as the store.

``mmr replay --embedded`` and the tests use it; the worker runs the same PoolEngine on Kafka
batches and Redis, so given the same events both end in the same state. One difference is
inherent: the service expires a round still incomplete after ``MMR_ROUND_TIMEOUT``, while a replay
has no clock; what is open after the last record is listed by ``incomplete_rounds()``.

``history``: called with the rating messages of every rated unit (a round, or a flushed batch of
matches), explained by ``stream.engine.explain``, in input order (``mmr replay --history``); without
it none is computed. A round rated in its pool's arena is explained from its ``RoundChange``
(columns), as the worker's step of rounds does.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from typing import Any

import numpy as np

from stream.engine import explain
from stream.engine.pool import PoolEngine
from stream.events.inputs import MATCH_RUN, InputError, OnInvalid
from stream.events.model import MatchBatch, MatchEvent, MatchRun, RatingOutput, RoundEvent, index_players
from stream.events.rounds import RoundAssembler
from stream.events.validate import MATCH_LISTS, InvalidEvent
from stream.ratings.base import Belief, Rating, RatingError, RatingSystem, rows_of_columns
from stream.ratings.fastpath import ColumnSummaries, RoundChange
from stream.ratings.sided import make_pool_system
from stream.state.memory import Held, MemoryStore
from stream.state.packed_pool import PackedPool

#: receives the rating messages of one rated unit (``EmbeddedPipeline``'s ``history``), each a
#: ``RatingOutput`` (the message is ``rating_value`` of it)
HistorySink = Callable[[Sequence[RatingOutput]], None]

#: players summarised at a time from an arena's columns (``EmbeddedPipeline.final_ratings``)
_SUMMARY_BLOCK = 1 << 14
#: players per block of ``_block_summaries``: each block's beliefs are gathered into one
#: buffer (and ``summary_many`` concatenates them again), ~6 KB a player each
_BELIEF_BLOCK = 1 << 11


def advantage_row(pool: str, sides: Mapping[str, Mapping[str, float]]) -> dict[str, Any]:
    """The line of a pool's learned side advantage beside its players' ratings (``mmr replay --out``,
    ``mmr export``): ``{"type": "advantage", "pool", "sides": {side: {"mean", "sd"}}}``."""
    return {"type": "advantage", "pool": pool, "sides": {k: dict(v) for k, v in sides.items()}}


@dataclass(frozen=True, slots=True)
class IncompleteRound:
    """A round still being assembled when the input ended: never rated. ``expected``: the completion's
    ``participants`` (None: none came); ``where``: the "file:line" of the round's first event."""

    pool: str
    round_id: str
    results: int
    expected: int | None
    where: str

    def describe(self) -> str:
        """One line for stderr: the counts of the service's dead-letter reason (k/n results) and the origin."""
        want = "?" if self.expected is None else str(self.expected)
        origin = f"{self.where}: " if self.where else ""
        return (
            f"{origin}round {self.round_id!r} of pool {self.pool!r} incomplete at end of input "
            f"({self.results}/{want} results), not rated"
        )


class EmbeddedPipeline:
    """Applies decoded records in order; matches of a pool are batched (exact sequential)."""

    def __init__(
        self,
        system: str,
        params: Mapping[str, Any] | None = None,
        batch_size: int = 4096,
        pool_systems: Mapping[str, tuple[str, Mapping[str, Any]]] | None = None,
        history: HistorySink | None = None,
    ) -> None:
        self.default = (system, dict(params or {}))
        self.pool_systems = dict(pool_systems or {})
        self.batch_size = batch_size
        self.store = MemoryStore()
        self.engines: dict[str, PoolEngine] = {}
        self.pending: dict[str, MatchBatch] = {}
        self.pending_ids: dict[str, set[str]] = {}  # event ids of the open batches (O(1) dedup)
        #: "file:line" of the first match of each open batch, to name it if the batch cannot be rated
        self.pending_where: dict[str, str] = {}
        self.assembler = RoundAssembler()
        #: event ids accepted into each open round, recorded as applied with the round (as the
        #: service does), so a result or completion delivered again later is a duplicate
        self.round_ids: dict[tuple[str, str], list[str]] = {}
        #: "file:line" of the first event of each open round, to name it if it stays incomplete
        self.round_where: dict[tuple[str, str], str] = {}
        self.history = history
        make_pool_system(system, params)  # fail fast on a bad name / parameter

    def engine(self, pool: str) -> PoolEngine:
        eng = self.engines.get(pool)
        if eng is None:
            name, params = self.pool_systems.get(pool, self.default)
            eng = self.engines[pool] = PoolEngine.of_params(pool, name, params)
        return eng

    def held(self, pool: str) -> Mapping[str, Held]:
        """What the store holds for ``pool``: a packed pool's beliefs in one arena."""
        return self.store.pool(pool, packed=self.engine(pool).packed)

    # --- feeding -------------------------------------------------------------------
    def add(self, etype: str, value: Any, where: str = "") -> None:
        """One decoded record (see stream.events.inputs.read_records); ``where`` is its "file:line"."""
        if etype == "match":
            self._add_match(value, where)
        elif etype == MATCH_RUN:
            self._add_run(value)
        elif etype in MATCH_LISTS:
            for m in value:
                self._add_match(m, where)
        elif etype == "round":
            self._apply_round(value)
        elif etype in ("round_result", "round_completed"):
            if self.store.is_applied(value["pool"], value["event_id"]):
                return
            add = self.assembler.add_result if etype == "round_result" else self.assembler.add_completed
            event = add(value, now=int(value["time"]))
            key = (value["pool"], value["round_id"])
            self.round_ids.setdefault(key, []).append(value["event_id"])
            self.round_where.setdefault(key, where)
            if event is not None:
                self.round_where.pop(key, None)
                self._apply_round(event, self.round_ids.pop(key))
        else:
            raise InvalidEvent(f"field type: unexpected {etype!r}")

    def _add_match(self, m: MatchEvent, where: str = "") -> None:
        if self.store.is_applied(m.pool, m.event_id):
            return
        batch = self.pending.setdefault(m.pool, MatchBatch(m.pool))
        if not batch:
            self.pending_where[m.pool] = where
        open_ids = self.pending_ids.setdefault(m.pool, set())
        if m.event_id in open_ids:  # duplicate inside the open batch
            return
        open_ids.add(m.event_id)
        batch.add(m)
        if len(batch) >= self.batch_size:
            self.flush(m.pool)

    def _add_run(self, run: MatchRun) -> None:
        """The matches of a ``MatchRun`` appended to the pool's open batch by whole slices;
        ``_add_match`` one by one when any of them is a duplicate (same meaning either way)."""
        batch = run.batch
        pool, ids = batch.pool, batch.event_ids
        open_ids = self.pending_ids.setdefault(pool, set())
        if len(set(ids)) != len(ids) or not open_ids.isdisjoint(ids) or self.store.any_applied(pool, ids):
            for i, m in enumerate(run.events()):
                self._add_match(m, run.where(i))
            return
        i, n = 0, len(batch)
        while i < n:
            pending = self.pending.setdefault(pool, MatchBatch(pool))
            if not pending:
                self.pending_where[pool] = run.where(i)
            j = min(n, i + self.batch_size - len(pending))
            pending.extend(batch.slice(i, j))
            self.pending_ids.setdefault(pool, set()).update(ids[i:j])
            i = j
            if len(pending) >= self.batch_size:
                self.flush(pool)

    def _apply_round(self, event: RoundEvent, extra_ids: Iterable[str] = ()) -> None:
        self.flush(event.pool)
        if self.store.is_applied(event.pool, event.event_id):
            return
        eng = self.engine(event.pool)
        try:
            if self.history is None:
                changed, change = eng.store_round(event, self.held(event.pool)), None
            else:
                changed, change = eng.store_round_change(event, self.held(event.pool))
        except RatingError as exc:
            raise InvalidEvent(str(exc), event.event_id) from None
        if change is not None:
            self._history_round_columns(eng, event, change)
        elif self.history is not None:
            self._history_round(eng, event, changed)
        self.store.commit(event.pool, changed, (event.event_id, *extra_ids))

    def flush(self, pool: str | None = None) -> None:
        """Apply the open match batch of one pool (or of all pools)."""
        pools = [pool] if pool is not None else list(self.pending)
        for p in pools:
            batch = self.pending.pop(p, None)
            self.pending_ids.pop(p, None)
            where = self.pending_where.pop(p, "")
            if not batch:
                continue
            # the ratings before, read first: a pool-wide arena (Cowan) is updated in place
            before = None if self.history is None else explain.ratings_held(
                self.engine(p), self.store.pool(p), index_players(batch).players)
            try:
                changed = self.engine(p).store_matches(batch, self.held(p))
            except RatingError as exc:
                # named by the batch's first match: the batch is rated as one step (sequential
                # meaning), so the culprit is that match or one after it in the same batch
                reason = f"event {batch.event_ids[0]} (or a later match of its batch): {exc}"
                raise InputError(where or "input", reason) from None
            if before is not None:
                self._history_matches(self.engine(p), batch, changed, before)
            self.store.commit(p, changed, batch.event_ids)

    def look_ahead(self, record: tuple[str, str, Any]) -> tuple[str, str, Any]:
        """``record`` unchanged, its round's players looked up in their pool's arena ahead
        (``PackedPool.look_ahead``), by the thread that reads records while this one rates."""
        _, etype, value = record
        if etype == "round":
            held = self.store.beliefs.get(value.pool)
            if isinstance(held, PackedPool):
                held.look_ahead(value.players)
        return record

    def run(self, records: Iterable[tuple[str, str, Any]], on_invalid: OnInvalid | None = None) -> None:
        """Apply every record; a bad one raises InputError naming its file and line, or with
        ``on_invalid`` is handed to it and skipped (as the service dead-letters it and goes on)."""
        for where, etype, value in records:
            try:
                self.add(etype, value, where)
            except InvalidEvent as exc:
                if on_invalid is None:
                    raise InputError(where, str(exc)) from None
                on_invalid(InputError(where, str(exc)))
        self.flush()

    # --- the history (``history``): before the unit's commit, the store holds the old beliefs ---
    def _history_round(self, eng: PoolEngine, event: RoundEvent, changed: Mapping[str, Held]) -> None:
        players = [p for p in event.players if p in changed]
        after = explain.ratings_held(eng, changed, players)
        ex = explain.Explainer()
        ex.round(event, explain.ratings_held(eng, self.store.pool(event.pool), players), after,
                 explain.performances_held(eng, changed))
        self._emit(eng, after, ex, {p: (event.event_id, event.time) for p in players})

    def _history_round_columns(self, eng: PoolEngine, event: RoundEvent, change: RoundChange) -> None:
        """``_history_round`` by columns, from the round's ``RoundChange``: the same messages, byte
        for byte (tests/unit/engine/test_explain.py), with no ``Rating``, text or dict per player."""
        assert self.history is not None
        shown = np.flatnonzero(change.rounds)  # rounds 0: only registered, as the worker publishes
        if not len(shown):
            return
        players = event.players if len(shown) == len(event.players) else [event.players[i] for i in shown.tolist()]
        n = len(players)
        numbers = explain.round_numbers(change)[shown]
        texts = explain.round_texts([explain.round_template(event.round_id, change.performance is not None)] * n,
                                    numbers)
        rounds = change.rounds[shown].tolist()
        self.history(list(rows_of_columns(RatingOutput, repeat(eng.pool), players, change.rating[shown].tolist(),
                                          change.mu[shown].tolist(), change.sigma[shown].tolist(), rounds, rounds,
                                          repeat(event.event_id), repeat(event.time), repeat(eng.system.name),
                                          texts)))

    def _history_matches(self, eng: PoolEngine, batch: MatchBatch, changed: Mapping[str, Held],
                         before: dict[str, Any]) -> None:
        idx = index_players(batch)
        players = [p for p in idx.players if p in changed]
        after = explain.ratings_held(eng, changed, players)
        ex = explain.Explainer()
        ex.matches(batch, idx, {p: before[p] for p in players}, after)
        ids, times = batch.event_ids, batch.times
        last = dict(zip(idx.players, idx.last_match().tolist(), strict=True))
        self._emit(eng, after, ex, {p: (ids[last[p]], times[last[p]]) for p in players})

    def _emit(self, eng: PoolEngine, after: dict[str, Any], ex: explain.Explainer,
              cause: dict[str, tuple[str, int]]) -> None:
        assert self.history is not None
        shown = [p for p, r in after.items() if r.rounds]  # rounds 0: only registered, as the worker publishes
        if not shown:
            return
        rating, mu, sigma, rounds = map(list, zip(*map(after.__getitem__, shown), strict=True))
        event_ids, times = map(list, zip(*map(cause.__getitem__, shown), strict=True))
        self.history(list(rows_of_columns(RatingOutput, repeat(eng.pool), shown, rating, mu, sigma, rounds, rounds,
                                          event_ids, times, repeat(eng.system.name), list(map(ex.of.get, shown)))))

    # --- results -------------------------------------------------------------------
    def incomplete_rounds(self) -> list[IncompleteRound]:
        """Rounds still open (first-seen order): what the service would time out. Not an error (a cut
        history); they are only listed, so more records (the next file) can still complete them."""
        where = self.round_where
        return [IncompleteRound(r.pool, r.round_id, r.results, r.expected, where.get((r.pool, r.round_id), ""))
                for r in self.assembler.open_rounds()]

    def final_ratings(self) -> Iterator[dict[str, Any]]:
        """docs/interface.md replay output rows, pools and players in first-seen order. A rating that
        is not finite (a JSON ``null`` written out) raises ``RatingError``: checked once here, off the
        per-batch path, where the Redis path refuses it at the batch (``pool._check_finite``)."""
        for pool, held in self.store.beliefs.items():
            for player, r in zip(held, self._summaries(pool, held), strict=True):
                if not (math.isfinite(r.rating) and math.isfinite(r.mu) and math.isfinite(r.sigma)):
                    raise RatingError(f"pool {pool!r}: the final rating of player {player!r} is not finite "
                                      f"(rating {r.rating}, sigma {r.sigma}): the system's parameters or the input "
                                      f"drove the belief out of range")
                yield {"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma,
                       "rounds": r.rounds}

    def _summaries(self, pool: str, held: Mapping[str, Held]) -> Iterable[Rating]:
        """Every held player's summary, in the store's order: from the arena's columns at once
        when the system's summary reads fixed positions (``ColumnSummaries``), else one by one."""
        eng = self.engine(pool)
        fast = eng.fast
        if (isinstance(held, PackedPool) and isinstance(fast, ColumnSummaries) and len(held)
                and int(held.length[: len(held)].min()) > max(fast.columns)):
            return self._column_summaries(eng, fast, held)
        return self._block_summaries(eng, held)

    @staticmethod
    def _block_summaries(eng: PoolEngine, held: Mapping[str, Held]) -> Iterator[Rating]:
        """``_summaries`` a block of players at a time (``PoolEngine.summary_many_held``)."""
        values = list(held.values())
        for a in range(0, len(values), _BELIEF_BLOCK):
            yield from eng.summary_many_held(values[a: a + _BELIEF_BLOCK])

    @staticmethod
    def _column_summaries(eng: PoolEngine, fast: ColumnSummaries, held: PackedPool) -> Iterator[Rating]:
        """``_summaries`` from the arena's columns, a block at a time (not to add to the replay's peak
        memory); a block the columns cannot answer goes belief by belief."""
        cols = held.columns(fast.columns)
        summary = eng.system.summary
        for a in range(0, cols.shape[1], _SUMMARY_BLOCK):
            block = fast.ratings(cols[:, a: a + _SUMMARY_BLOCK])
            if block is None:
                block = [summary(eng.unpack(held[p])) for p in held.names[a: a + _SUMMARY_BLOCK]]
            yield from block

    def advantages(self) -> Iterator[dict[str, Any]]:
        """The learned side advantage of each pool that learned one, in first-seen order: the
        ``advantage`` lines of ``mmr replay --out`` and ``mmr export`` (docs/advantage.md)."""
        for pool, eng in self.engines.items():
            if eng.advantages.sides:
                yield advantage_row(pool, eng.advantages.as_dict())

    def beliefs(self) -> Iterator[tuple[str, str, Belief]]:
        """(pool, player, belief as an array) of every player, in first-seen order."""
        for pool, player, held in self.store.items():
            yield pool, player, self.engine(pool).unpack(held)

    def system_for(self, pool: str) -> RatingSystem:
        return self.engine(pool).system
