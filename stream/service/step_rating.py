"""The rating of one pool step on the numba thread: ops in, the commit, outputs and dead letters out.

Pure (no I/O): given what the step's read returned (the stored beliefs and the event ids applied
before), ``rate_ops`` applies the step's ops in order, exactly as the embedded replay applies them,
and returns the ``Commit`` for Redis, the rating outputs (each with its explanation) and the dead
letters.
"""

from __future__ import annotations

import logging
from collections.abc import Container, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter

import orjson

from stream.engine.explain import Explainer, performances_encoded, ratings_stored
from stream.engine.pool import Applied, PoolEngine
from stream.events.model import MatchBatch, MatchEvent, PlayerIndex, RatingOutput, index_players
from stream.ratings.base import Rating, RatingError, rows_of_columns
from stream.service.messages import DeadLetter, Message
from stream.service.planning import DeadFn, MatchOp, Op, RoundOp
from stream.state.redis_store import Commit

log = logging.getLogger(__name__)

_ROUNDS = attrgetter("rounds")


@dataclass(slots=True)
class Counts:
    applied: int = 0  # events rated in this batch
    repeated: int = 0  # events skipped as applied before (re-deliveries)


@dataclass(slots=True)
class _Tally:
    """What ``rate_ops`` adds up over a step's ops."""

    seen: set[str]  # event ids applied before the step
    done_ids: set[str]  # ``seen`` and those applied in the step so far
    dead_fn: DeadFn
    counts: Counts
    commit: Commit
    dead: list[DeadLetter]
    republish: dict[str, tuple[str, int]]  # players of events applied before (a re-delivery)

    @classmethod
    def of(cls, seen: set[str], dead_fn: DeadFn) -> _Tally:
        return cls(seen, set(seen), dead_fn, Counts(), Commit(), [], {})

    def rate_round(self, engine: PoolEngine, op: RoundOp, stored: Mapping[str, bytes | None],
                   ) -> tuple[Applied, dict[str, Rating] | None] | None:
        """Rate the round of ``op`` on ``stored`` (which the caller updates with it) and note it in the
        commit: its event ids, its round done. None when nothing more is to be done with it: applied
        before (a re-delivery: its players' ratings are published again, ``republished``) or earlier in
        the step, or its rating failed (dead-lettered whole, its round done). Also the summaries of
        its players before it (``ratings_stored``), read before the rating so that the rating reuses
        what that read decoded."""
        ev = op.event
        if ev.event_id in self.done_ids:
            if ev.event_id in self.seen:
                self.counts.repeated += 1
                self.republish.update(dict.fromkeys(ev.players, (ev.event_id, ev.time)))
            return None
        summaries = ratings_stored(engine, stored, ev.players)
        try:
            applied = engine.apply_round(ev, stored)
        except RatingError as exc:
            self.dead.append(self.dead_fn(op.msg, f"rating: {exc}", ev.event_id, ev.pool))
            if op.round_done is not None:  # dead-lettered whole: its late results are late, not a new round
                self.commit.done_rounds.append(op.round_done)
            return None
        self.done_ids.add(ev.event_id)
        self.counts.applied += 1
        self.commit.event_ids.append(ev.event_id)
        self.commit.event_ids.extend(i for i in op.extra_ids if i != ev.event_id)
        if op.round_done is not None:
            self.commit.done_rounds.append(op.round_done)
        return applied, summaries

    def republished(self, engine: PoolEngine, stored: Mapping[str, bytes | None],
                    changed: Container[str]) -> list[RatingOutput]:
        """The current ratings of the players of events applied before (``republish``) but for those
        ``changed`` in the step. A batch re-delivered after a crash between the Redis commit and the
        publish may never have had its ratings reach the topic, so they are published again (same
        versions as before, or newer; consumers keep the highest version)."""
        outputs = []
        for p, c in self.republish.items():
            raw = stored.get(p)
            if p in changed or raw is None:
                continue
            try:
                r = engine.rating_of(p, raw)
            except RatingError as exc:  # corrupt since it was applied: its later events dead-letter
                log.warning("pool %r: not re-publishing player %r: %s", engine.pool, p, exc)
                continue
            if not r.rounds:  # only registered (see PoolEngine._changed): never published
                continue
            outputs.append(RatingOutput(engine.pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, c[0], c[1],
                                        engine.system.name))
        return outputs


def rate_ops(engine: PoolEngine, ops: list[Op], stored_in: dict[str, bytes | None], seen: set[str],
             dead_fn: DeadFn) -> tuple[Commit, Sequence[RatingOutput], list[DeadLetter], Counts]:
    """Apply the ops in order to a copy of the snapshot (runs on the numba thread).

    Events already applied (``seen``) or repeated inside the batch are skipped, exactly
    as the embedded pipeline skips them. The outputs explain each change
    (``stream.engine.explain``) and the commit stores it (``:chg``, for the HTTP API).
    """
    stored: dict[str, bytes | None] = dict(stored_in)
    tally = _Tally.of(seen, dead_fn)
    done_ids, counts, commit, dead, republish = tally.done_ids, tally.counts, tally.commit, tally.dead, tally.republish
    ratings: dict[str, Rating] = {}
    cause: dict[str, tuple[str, int]] = {}
    explainer = Explainer()
    registered = False  # a round stored a newcomer at the prior (rounds 0): not published
    system = engine.system.name
    for op in ops:
        if isinstance(op, RoundOp):
            rated = tally.rate_round(engine, op, stored)
            if rated is None:
                continue
            ev = op.event
            applied, before = rated
            explainer.round(ev, before, applied.ratings, performances_encoded(engine, applied.updates))
            stored.update(applied.updates)
            # per player, but in C (``dict.fromkeys``, ``map``): a loop body per player here was ~10 % of
            # the numba thread's time on the Codeforces history (BENCHMARKS.md, "Service"); the first op's
            # ratings and causes are taken as they are (this call's own dicts), not merged into empty ones
            commit.beliefs.update(applied.updates)
            if ratings:
                ratings.update(applied.ratings)
            else:
                ratings = applied.ratings
            caused = dict.fromkeys(applied.ratings, (ev.event_id, ev.time))
            if cause:
                cause.update(caused)
            else:
                cause = caused
            registered = registered or not all(map(_ROUNDS, applied.ratings.values()))
        else:
            ids = op.batch.event_ids
            fresh = set(ids)
            if len(fresh) == len(ids) and done_ids.isdisjoint(fresh):  # the usual case: nothing seen before
                done_ids |= fresh
                batch, msgs = op.batch, op.msgs
            else:
                counts.repeated += sum(1 for e in ids if e in seen)
                keep = []
                for e in ids:
                    keep.append(e not in done_ids)
                    done_ids.add(e)
                batch, msgs = _keep_matches(op, keep, republish, seen)
            if not len(batch):
                continue
            idx = op.index if batch is op.batch and op.index is not None else index_players(batch)
            before = ratings_stored(engine, stored, idx.players)
            try:
                parts = [(batch, idx, before, engine.apply_matches(batch, stored, idx))]
            except RatingError:
                parts = []  # find the culprit(s): one match at a time is the same sequential meaning
                for i in range(len(batch)):
                    one = MatchBatch(batch.pool)
                    one.add(MatchEvent(event_id=batch.event_ids[i], pool=batch.pool, time=batch.times[i],
                                       a=batch.a[i], b=batch.b[i], score=batch.scores[i]))
                    one_idx = index_players(one)
                    one_before = ratings_stored(engine, stored, one_idx.players)
                    try:
                        res = engine.apply_matches(one, stored, one_idx)
                    except RatingError as exc:
                        dead.append(dead_fn(msgs[i], f"rating: {exc}", batch.event_ids[i], batch.pool))
                        continue
                    stored.update(res.updates)
                    parts.append((one, one_idx, one_before, res))
            for part, part_idx, part_before, applied in parts:
                explainer.matches(part, part_idx, part_before, applied.ratings)
                stored.update(applied.updates)
                commit.beliefs.update(applied.updates)
                ratings.update(applied.ratings)
                counts.applied += len(part)
                commit.event_ids.extend(part.event_ids)
                cause.update(_last_match_per_player(part, part_idx))
    outputs = tally.republished(engine, stored, ratings)
    if ratings:  # one output per changed player, built by columns (C-level zip/map, no loop body per player)
        players = list(ratings)
        rating, mu, sigma, rounds = zip(*ratings.values(), strict=True)
        commit.scores.update(zip(players, rating, strict=True))
        eids, times = zip(*map(cause.__getitem__, players), strict=True)
        texts = list(map(explainer.of.get, players))
        made = list(rows_of_columns(RatingOutput, repeat(engine.pool), players, rating, mu, sigma, rounds, rounds,
                                    eids, times, repeat(system), texts))
        if registered:  # players a round only stored at their prior (rounds 0): not published
            made = [o for o in made if o.rounds]
        commit.changes = change_records(players, rounds, eids, times, texts)  # (rounds 0: no explanation, no record)
        outputs.extend(made)
    return commit, outputs, dead, counts


def change_records(players: Sequence[str], versions: Sequence[int], event_ids: Sequence[str],
                   times: Sequence[int], texts: Sequence[bytes | None]) -> dict[str, bytes]:
    """Per published player (by columns), the explanation of their latest change as the commit
    stores it (``RedisStore`` ``:chg``): ``orjson.dumps([version, event_id, time, {the
    explanation's fields}])`` byte for byte, around the explanation's JSON text as the message
    carries it (not encoded again); each distinct event id is encoded once (a round's players
    share one). A player without an explanation (None) has no record."""
    if None in texts:
        kept = [i for i, x in enumerate(texts) if x is not None]
        players, versions, event_ids, times = ([players[i] for i in kept], [versions[i] for i in kept],
                                               [event_ids[i] for i in kept], [times[i] for i in kept])
        texts = [texts[i] for i in kept]
    eid_text = {e: orjson.dumps(e) for e in set(event_ids)}
    return dict(zip(players, map(b"[%d,%b,%d,%b]".__mod__,
                                 zip(versions, map(eid_text.__getitem__, event_ids), times, texts, strict=True)),
                    strict=True))


def _last_match_per_player(batch: MatchBatch, index: PlayerIndex | None = None) -> dict[str, tuple[str, int]]:
    """Each player's last match in the batch as (event id, time): what their output cites."""
    idx = index if index is not None else index_players(batch)
    last = idx.last_match().tolist()
    ids, times = batch.event_ids, batch.times
    cited = zip(map(ids.__getitem__, last), map(times.__getitem__, last), strict=True)
    return dict(zip(idx.players, cited, strict=True))


def _keep_matches(op: MatchOp, keep: list[bool], republish: dict[str, tuple[str, int]],
                  seen: set[str] | None = None) -> tuple[MatchBatch, list[Message]]:
    """The matches of ``op`` marked in ``keep`` (in order); the players of the others go to
    ``republish`` -- all of them, or with ``seen`` only those of events applied before this
    batch (a repeat inside the batch is not a re-delivery)."""
    src = op.batch
    batch = MatchBatch(src.pool)
    msgs: list[Message] = []
    for i, k in enumerate(keep):
        eid = src.event_ids[i]
        if not k:
            if seen is None or eid in seen:
                republish[src.a[i]] = republish[src.b[i]] = (eid, src.times[i])
            continue
        batch.add(MatchEvent(event_id=eid, pool=batch.pool, time=src.times[i], a=src.a[i], b=src.b[i],
                             score=src.scores[i]))
        msgs.append(op.msgs[i])
    return batch, msgs


