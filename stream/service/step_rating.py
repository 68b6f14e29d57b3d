"""The rating of one pool step on the numba thread: ops in, the commit, outputs and dead letters out.

Pure (no I/O): given what the step's read returned (the stored beliefs and the event ids applied
before), ``rate_ops`` applies the step's ops in order, exactly as the embedded replay applies them,
and returns the ``Commit`` for Redis, the rating outputs (each with its explanation) and the dead
letters. A step of rounds only, of a system that rates rounds packed, goes by columns in one
arena (``rate_rounds``: the same commit and outputs, byte for byte, tests/unit/service/test_step_columns.py).
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Container, Iterable, Mapping, Sequence
from dataclasses import dataclass
from itertools import repeat
from operator import attrgetter
from typing import TypeAlias, cast

import numpy as np
import orjson

from stream.engine.explain import (
    Explainer,
    performances_encoded,
    ratings_stored,
    round_numbers,
    round_template,
    round_texts,
)
from stream.engine.pool import Applied, PoolEngine
from stream.events.model import MatchBatch, PlayerIndex, RatingOutput, index_players
from stream.ratings.base import FloatArray, IntArray, Rating, RatingError, rows_of_columns
from stream.service.messages import DeadLetter, Message
from stream.service.planning import DeadFn, MatchOp, Op, RoundOp, StepInputs
from stream.state.packed_pool import FlatBeliefs
from stream.state.redis_store import Commit
from stream.state.tagged_pool import TaggedPool

log = logging.getLogger(__name__)

_ROUNDS = attrgetter("rounds")
#: what rating a step gives: the commit, the outputs, the dead letters, the counts
Rated: TypeAlias = "tuple[Commit, Sequence[RatingOutput], list[DeadLetter], Counts]"


@dataclass(slots=True)
class Counts:
    applied: int = 0  # events rated in this batch
    repeated: int = 0  # events skipped as applied before (re-deliveries)


@dataclass(slots=True)
class _Tally:
    """What ``rate_ops`` and ``rate_rounds`` add up over a step's ops, and the rounds' part they share."""

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

    def rate_round(self, engine: PoolEngine, op: RoundOp, stored: Mapping[str, bytes | None], before: bool,
                   columns: bool = False, at: IntArray | None = None,
                   ) -> tuple[Applied, dict[str, Rating] | None] | None:
        """Rate the round of ``op`` on ``stored`` (which the caller updates with it) and note it in the
        commit: its event ids, its round done. None when nothing more is to be done with it: applied
        before (a re-delivery: its players' ratings are published again, ``republished``) or earlier in
        the step, or its rating failed (dead-lettered whole, its round done). ``before``: also the
        summaries of its players before it (``ratings_stored``, else None), read before the rating so
        that the rating reuses what that read decoded. ``at``: the round's players' places in the step
        (``PoolEngine.apply_round``)."""
        ev = op.event
        if ev.event_id in self.done_ids:
            if ev.event_id in self.seen:
                self.counts.repeated += 1
                self.republish.update(dict.fromkeys(ev.players, (ev.event_id, ev.time)))
            return None
        summaries = ratings_stored(engine, stored, ev.players) if before else None
        try:
            applied = engine.apply_round(ev, stored, columns=columns, at=at)
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


def republished(engine: PoolEngine, stored: Mapping[str, bytes | None], players: Mapping[str, tuple[str, int]],
                changed: Container[str] = ()) -> list[RatingOutput]:
    """The current ratings of ``players`` (-> the event id and time their output cites), of events applied
    before, but for those ``changed`` in the step. A batch re-delivered after a crash between the Redis
    commit and the publish may never have had its ratings reach the topic, so they are published again
    (same versions as before, or newer; consumers keep the highest version)."""
    outputs = []
    for p, c in players.items():
        raw = stored.get(p)
        if p in changed or raw is None:
            continue
        try:
            r = engine.rating_of(p, raw)
        except RatingError as exc:  # corrupt since it was applied: its later events dead-letter
            log.warning("pool %r: not re-publishing player %r: %s", engine.pool, p, exc)
            continue
        if r.rounds:  # else only registered (see PoolEngine._changed): never published
            outputs.append(RatingOutput(engine.pool, p, r.rating, r.mu, r.sigma, r.rounds, r.rounds, c[0], c[1],
                                        engine.system.name))
    return outputs


def sided_step(engine: PoolEngine, ops: Sequence[Op]) -> bool:
    """Whether a step holds an event rated with the pool's learned advantages (a match not neutral, a team
    round with sides, of a pool that takes them): its read then takes them too (``rate_ops``' ``advantages``)."""
    return engine.takes_sides and any(engine.sided_round(op.event) if isinstance(op, RoundOp)
                                      else engine.sided_matches(op.batch) for op in ops)


def rate_ops(engine: PoolEngine, ops: list[Op], stored_in: dict[str, bytes | None], seen: set[str],
             dead_fn: DeadFn, by_columns: bool = True, places: StepInputs | None = None,
             advantages: Mapping[bytes, bytes] | None = None) -> Rated:
    """Apply the ops in order to a copy of the snapshot (runs on the numba thread).

    Events already applied (``seen``) or repeated inside the batch are skipped, exactly as the
    embedded pipeline skips them. The outputs explain each change (``stream.engine.explain``) and
    the commit stores it (``:chg``). ``by_columns``: a step of rounds only, of a system rating them
    packed, goes through ``rate_rounds`` (False: the general path, for tests comparing them).
    ``places``: the step of ``ops`` (``step_inputs``: each op's players' places among the step's).
    ``advantages``: the pool's learned side advantages as the step read them (None: the step holds no
    sided event, ``sided_step``), rated with rather than what the engine holds (another worker may have
    rated the pool since).
    """
    adv_before: dict[str, bytes] | None = None
    if advantages is not None:
        engine.load_advantages(advantages)
        adv_before = engine.advantages.stored()
    elif by_columns and _rounds_by_columns(engine, ops):
        return rate_rounds(engine, cast("list[RoundOp]", ops), stored_in, seen, dead_fn, places)
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
            rated = tally.rate_round(engine, op, stored, True)
            if rated is None:
                continue
            ev = op.event
            applied, before = rated
            explainer.round(ev, before, applied.ratings, performances_encoded(engine, applied.updates))
            stored.update(applied.updates)
            # per player, but in C (``dict.fromkeys``, ``map``: no loop body per player, BENCHMARKS.md,
            # "Service"); the first op's ratings and causes are taken as they are, not merged into empty ones
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
                    one = batch.slice(i, i + 1)
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
    outputs = republished(engine, stored, republish, ratings)
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
    if adv_before is not None:
        commit.advantages = {k: v for k, v in engine.advantages.stored().items() if adv_before.get(k) != v}
    return commit, outputs, dead, counts


def _rounds_by_columns(engine: PoolEngine, ops: list[Op]) -> bool:
    """Whether a step is rounds only, without teams, of a pool whose rounds take the packed path: what
    ``rate_rounds`` rates by columns in one arena."""
    return engine.rounds_packed and all(isinstance(op, RoundOp) and op.event.teams is None for op in ops)


@dataclass(slots=True)
class _Block:
    """One rated round of ``rate_rounds``: its players and their new ratings as columns, what
    their outputs cite, and their explanations (as numbers and a template, or as texts)."""

    players: list[str]
    rating: FloatArray
    mu: FloatArray
    sigma: FloatArray
    rounds: IntArray
    event_id: str
    time: int
    template: bytes = b""
    numbers: FloatArray | None = None  # ``round_numbers`` (explained by columns)
    texts: list[bytes | None] | None = None  # per player (explained from the summaries)
    idx: IntArray | None = None  # the players' indices in the step's arena (rated there)


def rate_rounds(engine: PoolEngine, ops: list[RoundOp], stored_in: dict[str, bytes | None], seen: set[str],
                dead_fn: DeadFn, places: StepInputs | None = None) -> Rated:
    """``rate_ops`` of a step of rounds only, by columns: the same commit, outputs (in the same
    order) and dead letters, byte for byte (tests/unit/service/test_step_columns.py).

    Why: a step holds many large rounds, and a player's output and explanation show only their last
    round of it. Each round keeps its new ratings as the packed path's columns (``Applied.change``)
    and its explanations as numbers; at the end only each player's last row becomes an output and a
    text (``round_texts``). The beliefs are held in one arena (``PoolEngine.held_rounds``): a player
    in several rounds of the step is read and encoded once, not once a round; with ``places`` each
    round's players are found there by place, not by name."""
    held = engine.held_rounds(stored_in, None if places is None else places.players)
    stored: dict[str, bytes | None] | TaggedPool = dict(stored_in) if held is None else held
    tally = _Tally.of(seen, dead_fn)
    commit, dead, counts = tally.commit, tally.dead, tally.counts
    blocks: list[_Block] = []
    op_places: list[IntArray | None] = [None] * len(ops) if places is None else places.at
    for op, op_at in zip(ops, op_places, strict=True):
        rated = tally.rate_round(engine, op, stored, False, columns=True, at=op_at)
        if rated is None:
            continue
        ev = op.event
        applied = rated[0]
        ch = applied.change
        if ch is not None:
            block = _Block(ev.players, ch.rating, ch.mu, ch.sigma, ch.rounds, ev.event_id, ev.time,
                           round_template(ev.round_id, ch.performance is not None), round_numbers(ch))
        elif not applied.ratings:  # a round that changes nothing and has no newcomer (ratings and updates alike)
            continue
        else:  # its summaries, and its explanations as ``Explainer.round`` writes them
            players = list(applied.ratings)
            r_col, mu_col, sigma_col, rounds_col = zip(*applied.ratings.values(), strict=True)
            wide = not all(abs(x) < 2**62 for x in rounds_col)  # a corrupt belief's count: kept as Python ints
            block = _Block(players, np.array(r_col, dtype=np.float64), np.array(mu_col, dtype=np.float64),
                           np.array(sigma_col, dtype=np.float64),
                           np.array(rounds_col, dtype=object if wide else np.int64), ev.event_id, ev.time)
            one = Explainer()
            one.round(ev, ratings_stored(engine, stored, players), applied.ratings,
                      performances_encoded(engine, applied.updates))
            block.texts = list(map(one.of.get, players))
        blocks.append(block)
        # (a round's updates are its ratings' players: the commit's, below)
        if held is not None and isinstance(applied.updates, FlatBeliefs) and applied.updates.pool is held.pool:
            block.idx = held.put(applied.updates)
        else:
            stored.update(applied.updates)
    if not blocks:
        return commit, republished(engine, stored, tally.republish), dead, counts
    # each player's last row of all blocks' (``at``), players in the order of their first row
    players, at, held_at = _last_rows(blocks, held)
    outputs: Sequence[RatingOutput] = republished(engine, stored, tally.republish,
                                                  set(players) if tally.republish else ())
    if held is None:
        values: Iterable[bytes] = map(cast("dict[str, bytes]", stored).__getitem__, players)
    else:
        values = engine.encode_held(held, players, held_at)
        held.release()
    commit.beliefs = dict(zip(players, values, strict=True))
    return _rounds_end(engine, blocks, players, at, commit, outputs, dead, counts)


def _rounds_end(engine: PoolEngine, blocks: list[_Block], players: list[str], at: IntArray, commit: Commit,
                outputs: Sequence[RatingOutput], dead: list[DeadLetter], counts: Counts) -> Rated:
    """The end of ``rate_rounds`` once its beliefs are encoded (``commit.beliefs``): the outputs by columns,
    their explanations and ``:chg`` records."""
    sizes = [len(b.players) for b in blocks]
    of_block = np.repeat(np.arange(len(blocks)), sizes)[at]
    rating = np.concatenate([b.rating for b in blocks])[at].tolist()
    commit.scores.update(zip(players, rating, strict=True))
    rounds = np.concatenate([b.rounds for b in blocks])[at]
    shown = np.flatnonzero(rounds)  # rounds 0: only registered, not published
    if len(shown) < len(players):
        players, rating = [players[i] for i in shown.tolist()], [rating[i] for i in shown.tolist()]
        at, of_block, rounds = at[shown], of_block[shown], rounds[shown]
    bl = of_block.tolist()
    eids = list(map([b.event_id for b in blocks].__getitem__, bl))
    times = list(map([b.time for b in blocks].__getitem__, bl))
    ver = rounds.tolist()
    mu = np.concatenate([b.mu for b in blocks])[at]
    sigma = np.concatenate([b.sigma for b in blocks])[at]
    texts = _block_texts(blocks, at, bl, sizes)
    made = list(rows_of_columns(RatingOutput, repeat(engine.pool), players, rating, mu.tolist(), sigma.tolist(),
                                ver, ver, eids, times, repeat(engine.system.name), texts))
    commit.changes = change_records(players, ver, eids, times, texts)
    outputs = [*outputs, *made]
    return commit, outputs, dead, counts


def _last_rows(blocks: list[_Block], held: TaggedPool | None) -> tuple[list[str], IntArray, IntArray | None]:
    """Each player's last row of all ``blocks``' rows (``at``), the players in the order of their
    first row, and (when every block was rated in ``held``'s arena) their indices there: two
    ``ufunc.at`` passes, else one dict (a dict keeps a key's first place and its last value)."""
    if held is not None and all(b.idx is not None for b in blocks):
        idx = np.concatenate([cast("IntArray", b.idx) for b in blocks])
        rows = np.arange(idx.shape[0], dtype=np.int64)
        n = len(held.pool.names)
        first = np.full(n, idx.shape[0], dtype=np.int64)
        np.minimum.at(first, idx, rows)
        last = np.full(n, -1, dtype=np.int64)
        np.maximum.at(last, idx, rows)
        rated = np.flatnonzero(last >= 0)
        order = rated[np.argsort(first[rated], kind="stable")]
        return list(map(held.pool.names.__getitem__, order.tolist())), last[order], order
    by_player = dict(zip(itertools.chain.from_iterable(b.players for b in blocks), itertools.count()))
    return list(by_player), np.fromiter(by_player.values(), dtype=np.int64, count=len(by_player)), None


def _block_texts(blocks: list[_Block], at: IntArray, bl: list[int], sizes: list[int]) -> list[bytes | None]:
    """The explanation of each of the rows ``at`` (of all blocks', in order; ``bl``: each one's
    block): rendered from the numbers at once when every block was explained by columns, else one
    each, as the blocks have them."""
    if all(b.numbers is not None for b in blocks):
        numbers = np.concatenate([cast("FloatArray", b.numbers) for b in blocks])[at]
        return list(round_texts([blocks[k].template for k in bl], numbers))
    starts = np.cumsum([0, *sizes]).tolist()
    out: list[bytes | None] = []
    for row, k in zip(at.tolist(), bl, strict=True):  # rare (a round off the packed path): row by row
        b = blocks[k]
        i = row - starts[k]
        if b.numbers is not None:
            out.append(round_texts([b.template], b.numbers[i:i + 1])[0])
        else:
            out.append(cast("list[bytes | None]", b.texts)[i])
    return out


def change_records(players: Sequence[str], versions: Sequence[int], event_ids: Sequence[str],
                   times: Sequence[int], texts: Sequence[bytes | None]) -> dict[str, bytes]:
    """Per published player (by columns), the ``:chg`` record of their latest change: byte for byte
    ``orjson.dumps([version, event_id, time, {the explanation}])``, around the explanation's JSON text
    as the message carries it; each distinct event id encoded once. No explanation (None): no record."""
    if None in texts:
        kept = [i for i, x in enumerate(texts) if x is not None]
        players, versions, event_ids, times = ([players[i] for i in kept], [versions[i] for i in kept],
                                               [event_ids[i] for i in kept], [times[i] for i in kept])
        texts = [texts[i] for i in kept]
    eid_text = {e: orjson.dumps(e) for e in set(event_ids)}
    return dict(zip(players, map(b"[%d,%b,%d,%b]".__mod__,
                                 zip(versions, map(eid_text.__getitem__, event_ids), times, texts, strict=True)),
                    strict=True))


def _last_match_per_player(batch: MatchBatch, idx: PlayerIndex) -> dict[str, tuple[str, int]]:
    """Each player's last match in the batch as (event id, time): what their output cites."""
    last = idx.last_match().tolist()
    ids, times = batch.event_ids, batch.times
    cited = zip(map(ids.__getitem__, last), map(times.__getitem__, last), strict=True)
    return dict(zip(idx.players, cited, strict=True))


def _keep_matches(op: MatchOp, keep: list[bool], republish: dict[str, tuple[str, int]],
                  seen: set[str]) -> tuple[MatchBatch, list[Message]]:
    """The matches of ``op`` marked in ``keep`` (in order); the players of the others applied before this
    batch (``seen``; a repeat inside the batch is not a re-delivery) go to ``republish``."""
    src = op.batch
    batch = MatchBatch(src.pool)
    msgs: list[Message] = []
    for i, k in enumerate(keep):
        eid = src.event_ids[i]
        if not k:
            if eid in seen:
                republish[src.a[i]] = republish[src.b[i]] = (eid, src.times[i])
            continue
        batch.add(src.event(i))
        msgs.append(op.msgs[i])
    return batch, msgs


