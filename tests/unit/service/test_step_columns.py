"""A worker step of rounds by columns (``step_rating.rate_rounds``) against the general path (``rate_ops``
with ``by_columns=False``): the same commit, outputs and dead letters, byte for byte."""

from __future__ import annotations

import itertools
from typing import Any

import numpy as np
import pytest
from repo_paths import SHARED_DATA as DATA

from stream.engine.pool import PoolEngine
from stream.events.inputs import read_records
from stream.events.model import RoundEvent, rating_value
from stream.ratings import make_system
from stream.ratings.fastpath import RoundChange
from stream.service.messages import DeadLetter, Message
from stream.service.planning import RoundOp, step_inputs
from stream.service.step_rating import rate_ops
from stream.state.packed_pool import FlatBeliefs
from stream.state.redis_store import bulk_commands

CODEFORCES = DATA / "codeforces" / "contests-2010-2020.jsonl.xz"
needs_codeforces = pytest.mark.skipif(not CODEFORCES.exists(),
                                      reason=f"the shared Codeforces history is absent ({CODEFORCES})")


def _dead(msg: Message, reason: str, eid: str | None, pool: str | None) -> DeadLetter:
    return DeadLetter(reason, msg.topic, msg.partition, msg.offset, msg.value, eid, pool)


def _rounds(n: int) -> list[RoundEvent]:
    rounds = [v for _, kind, v in itertools.islice(read_records(CODEFORCES, pool="p"), n) if kind == "round"]
    assert len(rounds) == n
    return rounds


def _step(engine: PoolEngine, ops: list[RoundOp], stored: dict[str, bytes | None], seen: set[str],
          by_columns: bool, by_place: bool = False) -> tuple[Any, ...]:
    """The step's commit, outputs, dead letters, counts and bulk commands; ``by_place``: its rounds' players
    found by their places, as the worker numbers them (``step_inputs``), else by name."""
    places = step_inputs(list(ops)) if by_place else None
    commit, outputs, dead, counts = rate_ops(engine, list(ops), dict(stored), seen, _dead, by_columns, places)
    blobs = tuple(bulk_commands(commit, b"p:", b"lb", b"chg", b"h:", 0))  # the bytes the commit sends
    return (commit.beliefs, commit.scores, commit.event_ids, commit.done_rounds, commit.changes,
            [(tuple(o), rating_value(o)) for o in outputs], dead, (counts.applied, counts.repeated), blobs)


@needs_codeforces
@pytest.mark.parametrize("system", ["elo-mmr", "elo-mmx"])
@pytest.mark.parametrize("columns_every", [1, 3])  # 3: every third round off the columns (its summaries instead)
def test_steps_of_rounds_by_columns_equal_the_general_path(system: str, columns_every: int,
                                                           monkeypatch: pytest.MonkeyPatch) -> None:
    """Steps of several Codeforces rounds (newcomers, returning players, players of several rounds
    of one step), one round re-delivered (its players re-published), one repeated inside a step,
    two whose stored beliefs are corrupt (not whole float64 values; too short: dead-lettered), and
    rounds the packed path gives no columns for mixed with ones it does."""
    engine = PoolEngine("p", make_system(system))
    if columns_every > 1:
        real = engine.fast.change_gathered  # type: ignore[attr-defined]  # (the columns of a round)
        calls = itertools.count()

        def some(*args: Any) -> RoundChange | None:
            return real(*args) if next(calls) % columns_every else None

        monkeypatch.setattr(engine.fast, "change_gathered", some)
    rounds = _rounds(36)
    msgs = [Message("rounds", 0, i, b"{}") for i in range(len(rounds))]
    stored: dict[str, bytes | None] = {}
    seen: set[str] = set()
    compared = 0
    for k in range(0, len(rounds), 9):
        ops = [RoundOp(ev, msgs[k + i], round_done=f"done-{k + i}" if i % 4 == 0 else None)
               for i, ev in enumerate(rounds[k:k + 9])]
        if k == 9:
            ops.insert(3, RoundOp(rounds[2], msgs[2]))  # applied in the step before: re-published
            ops.append(RoundOp(rounds[k + 1], msgs[k + 1]))  # twice in this step: skipped
        if k == 18:
            stored[rounds[k + 5].players[7]] = b"\x01not a belief"  # that round is dead-lettered
        if k == 27:  # whole float64 values, too few for a belief: that round is dead-lettered too
            stored[rounds[k + 2].players[3]] = b"\x01" + np.zeros(2).tobytes()
        by_cols = _step(engine, ops, stored, seen, True)
        general = _step(engine, ops, stored, seen, False)
        assert by_cols == general
        assert _step(engine, ops, stored, seen, True, by_place=True) == general
        beliefs, *_, outputs, dead, _counts, _blobs = by_cols
        assert outputs and any(b'"rating_before"' in v for _, v in outputs)  # (re-published: not here)
        assert bool(dead) == (k in (18, 27))
        compared += len(outputs)
        stored.update(beliefs)
        seen.update(by_cols[2])
    assert compared > 5_000


@needs_codeforces
def test_a_registered_player_is_not_published_nor_explained(monkeypatch: pytest.MonkeyPatch) -> None:
    """A player whose rounds count stays 0 (stored at the prior by a round that changed nothing
    for them) is on the leaderboard but has no output and no ``:chg`` record, by columns too."""
    engine = PoolEngine("p", make_system("elo-mmr"))
    real = engine.fast.change_gathered  # type: ignore[attr-defined]  # (the columns of a round)

    def with_registered(*args: Any) -> RoundChange | None:
        ch = real(*args)
        if ch is None:
            return None
        rounds = ch.rounds.copy()
        rounds[::5] = 0
        return ch._replace(rounds=rounds)

    monkeypatch.setattr(engine.fast, "change_gathered", with_registered)
    ev = _rounds(1)[0]
    op = RoundOp(ev, Message("rounds", 0, 0, b"{}"))
    commit, outputs, _, _ = rate_ops(engine, [op], {}, set(), _dead, True)
    hidden = set(ev.players[::5])
    assert hidden and set(commit.scores) == set(ev.players) and set(commit.beliefs) == set(ev.players)
    assert {o.player for o in outputs} == set(ev.players) - hidden == set(commit.changes)
    assert np.all([o.version > 0 for o in outputs])


def test_rounds_that_change_nothing_by_columns_equal_the_general_path() -> None:
    """A round of one player, of players all tied, and of one known player alone (no change, no
    newcomer: nothing at all) beside rounds that rate: the same step by columns as generally."""
    def rnd(eid: str, t: int, ranks: dict[str, int]) -> RoundEvent:
        return RoundEvent(event_id=eid, pool="p", round_id=eid, time=t, players=list(ranks),
                          ranks=np.array(list(ranks.values()), dtype=np.int64))

    rounds = [rnd("r0", 0, {"solo": 1}), rnd("r1", 1, {"t1": 1, "t2": 1}), rnd("r2", 2, {"solo": 1}),
              rnd("r3", 3, {"solo": 1, "t1": 2, "y": 3}), rnd("r4", 4, {"t2": 1})]
    ops = [RoundOp(ev, Message("rounds", 0, i, b"{}")) for i, ev in enumerate(rounds)]
    engine = PoolEngine("p", make_system("elo-mmr"))
    by_cols = _step(engine, ops, {}, set(), True)
    assert by_cols == _step(engine, ops, {}, set(), False)
    assert by_cols == _step(engine, ops, {}, set(), True, by_place=True)
    assert sorted(by_cols[0]) == ["solo", "t1", "t2", "y"]


@needs_codeforces
@pytest.mark.parametrize("system", ["elo-mmr", "elo-mmx"])
def test_rounds_rated_in_a_steps_arena_equal_rounds_rated_on_the_stored_bytes(system: str) -> None:
    """``apply_round`` on a step's arena (``PoolEngine.held_rounds``: each round gathered by index,
    its output taken back whole) against the same rounds on a dict of stored bytes (the per-belief
    path): the same new values, and change columns equal to its ratings bit for bit, round after
    round (returning players, newcomers), and the commit's values ``encode_held`` writes from the
    arena equal the dict's."""
    engine = PoolEngine("p", make_system(system))
    stored: dict[str, bytes | None] = {}
    for ev in _rounds(6):  # a first step: stored values to start from
        stored.update(engine.apply_round(ev, stored).updates)
    held = engine.held_rounds(stored)
    assert held is not None
    plain = dict(stored)
    players: dict[str, None] = {}
    for ev in _rounds(14)[6:]:
        on_bytes = engine.apply_round(ev, plain, columns=True)
        in_arena = engine.apply_round(ev, held, columns=True)
        assert isinstance(in_arena.updates, FlatBeliefs)  # not a bytes object per player
        assert on_bytes.change is None and in_arena.change is not None
        ch = in_arena.change
        want = [on_bytes.ratings[p] for p in ev.players]
        for col, field in ((ch.rating, "rating"), (ch.mu, "mu"), (ch.sigma, "sigma")):
            assert col.tobytes() == np.array([getattr(r, field) for r in want], dtype=np.float64).tobytes()
        assert ch.rounds.tolist() == [r.rounds for r in want]
        assert {p: in_arena.updates[p] for p in ev.players} == on_bytes.updates
        plain.update(on_bytes.updates)
        held.update(in_arena.updates)
        players.update(dict.fromkeys(ev.players))
    assert dict(zip(players, engine.encode_held(held, list(players)), strict=True)) == {p: plain[p] for p in players}
    assert PoolEngine("q", make_system("elo")).held_rounds({}) is None  # rounds not packed: no arena
