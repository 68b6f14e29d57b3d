"""The in-process pipeline: the service's steps with files in and a dict as the store.

``mmr replay --embedded`` and the tests use it; the worker runs the same PoolEngine
on Kafka batches and Redis, so given the same events both end in the same state.

One difference is inherent: the service expires a round assembled from ``round_result``
events once it stayed incomplete for ``MMR_ROUND_TIMEOUT`` and dead-letters it, while a
replay has no clock to wait on. What is still open after the last record is therefore
listed by ``incomplete_rounds()`` (the caller reports it); it was never rated in either.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from stream.engine.pool import PoolEngine
from stream.events.inputs import MATCH_RUN, InputError
from stream.events.model import MatchBatch, MatchEvent, MatchRun, RoundEvent
from stream.events.rounds import RoundAssembler
from stream.events.validate import MATCH_LISTS, InvalidEvent
from stream.ratings import make_system
from stream.ratings.base import Belief, RatingError, RatingSystem
from stream.state.memory import MemoryStore


@dataclass(frozen=True, slots=True)
class IncompleteRound:
    """A round still being assembled when the input ended: never rated, its results dropped.

    ``expected`` is the completion's ``participants``, None when no ``round_completed``
    came; ``where`` is the "file:line" of the round's first event ("" if fed without one).
    """

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
        make_system(system, params)  # fail fast on a bad name / parameter

    def engine(self, pool: str) -> PoolEngine:
        eng = self.engines.get(pool)
        if eng is None:
            name, params = self.pool_systems.get(pool, self.default)
            eng = self.engines[pool] = PoolEngine(pool, make_system(name, params))
        return eng

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
            pending.extend(MatchBatch(pool, ids[i:j], batch.a[i:j], batch.b[i:j], batch.scores[i:j], batch.times[i:j]))
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
            changed = eng.store_round(event, self.store.pool(event.pool))
        except RatingError as exc:
            raise InvalidEvent(str(exc), event.event_id) from None
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
            try:
                changed = self.engine(p).store_matches(batch, self.store.pool(p))
            except RatingError as exc:
                # named by the batch's first match: the batch is rated as one step (sequential
                # meaning), so the culprit is that match or one after it in the same batch
                reason = f"event {batch.event_ids[0]} (or a later match of its batch): {exc}"
                raise InputError(where or "input", reason) from None
            self.store.commit(p, changed, batch.event_ids)

    def run(self, records: Iterable[tuple[str, str, Any]]) -> None:
        """Apply every record; a bad one raises InputError naming its file and line."""
        for where, etype, value in records:
            try:
                self.add(etype, value, where)
            except InvalidEvent as exc:
                raise InputError(where, str(exc)) from None
        self.flush()

    # --- results -------------------------------------------------------------------
    def incomplete_rounds(self) -> list[IncompleteRound]:
        """Rounds still open (first-seen order): what the service would time out and dead-letter.

        Not an error: the input itself is valid, it just ends before the round does (a cut
        history, ``--skip`` into a round). Rounds are only listed, not closed, so feeding more
        records (the next file of the same replay) can still complete them.
        """
        out = []
        for r in self.assembler.open_rounds():
            out.append(IncompleteRound(r.pool, r.round_id, r.results, r.expected,
                                       self.round_where.get((r.pool, r.round_id), "")))
        return out

    def final_ratings(self) -> Iterator[dict[str, Any]]:
        """CONTRACT replay output rows, pools and players in first-seen order.

        A rating that is not finite raises ``RatingError`` naming the player: written out it
        would be a JSON ``null`` (orjson's NaN/inf), not a rating. The Redis path refuses such a
        rating at the batch that makes it (``pool._check_finite``); the embedded store checks
        once here, off the per-batch path.
        """
        for pool, player, belief in self.beliefs():
            r = self.engine(pool).system.summary(belief)
            if not (math.isfinite(r.rating) and math.isfinite(r.mu) and math.isfinite(r.sigma)):
                raise RatingError(f"pool {pool!r}: the final rating of player {player!r} is not finite "
                                  f"(rating {r.rating}, sigma {r.sigma}): the system's parameters or the input "
                                  f"drove the belief out of range")
            yield {"pool": pool, "player": player, "rating": r.rating, "mu": r.mu, "sigma": r.sigma, "rounds": r.rounds}

    def beliefs(self) -> Iterator[tuple[str, str, Belief]]:
        """(pool, player, belief as an array) of every player, in first-seen order."""
        for pool, player, held in self.store.items():
            yield pool, player, self.engine(pool).unpack(held)

    def system_for(self, pool: str) -> RatingSystem:
        return self.engine(pool).system
