"""A pool's arena kept from step to step (stream.state.resident_arena): steps rated there equal steps
rated from the stored values, byte for byte; a rating it did not expect, a landing out of order and the
byte budget each leave it replaced."""

from __future__ import annotations

import itertools
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from stream.engine.pool import PoolEngine
from stream.events.inputs import read_records
from stream.events.model import RoundEvent
from stream.ratings import make_system
from stream.service.messages import DeadLetter, Message, rating_value
from stream.service.planning import RoundOp, step_inputs
from stream.service.step import rate_ops
from stream.state.cache import BeliefCache
from stream.state.commit_frames import frames
from stream.state.resident_arena import ArenaLease, ResidentArena, StaleArena

DATA = Path(__file__).resolve().parents[2].parent / "shared" / "data"
CODEFORCES = DATA / "codeforces" / "contests-2010-2020.jsonl.xz"
needs_codeforces = pytest.mark.skipif(not CODEFORCES.exists(),
                                      reason=f"the shared Codeforces history is absent ({CODEFORCES})")


def _dead(msg: Message, reason: str, eid: str | None, pool: str | None) -> DeadLetter:
    return DeadLetter(reason, msg.topic, msg.partition, msg.offset, msg.value, eid, pool)


def _step(engine: PoolEngine, ops: list[RoundOp], stored: dict[str, bytes | None], seen: set[str],
          lease: ArenaLease | None = None) -> tuple[Any, ...]:
    """The step's commit, outputs, dead letters, counts and the frames it sends (players found by place)."""
    places = step_inputs(list(ops), False).places
    commit, outputs, dead, counts = rate_ops(engine, list(ops), dict(stored), seen, None, _dead, True, True, places,
                                             lease)
    blobs = tuple(map(bytes, frames(commit.rows if commit.rows is not None else commit.pack(), b"p:", b"lb", b"chg")))
    return (commit.beliefs, commit.scores, commit.event_ids, commit.done_rounds, commit.changes,
            [(tuple(o), rating_value(o)) for o in outputs], dead, (counts.applied, counts.repeated), blobs)


def _round(eid: str, t: int, ranks: dict[str, int]) -> RoundEvent:
    return RoundEvent(eid, "p", eid, t, list(ranks), np.array(list(ranks.values()), dtype=np.int64))


@needs_codeforces
def test_steps_in_a_kept_arena_equal_steps_from_the_stored_values() -> None:
    """Steps of Codeforces rounds rated one after another in one arena, each given only the stored values
    of the players the arena does not hold, against each rated from every stored value in an arena of its
    own: the same commits (and the frames sent), outputs and dead letters. One round is re-delivered (its
    players re-published), one repeated inside a step; before one step another writer stored a belief that
    is not one (the pool's gen moved: a new arena), whose round is dead-lettered."""
    engine = PoolEngine("p", make_system("elo-mmr"))
    rounds = [v for _, kind, v in itertools.islice(read_records(CODEFORCES, pool="p"), 45) if kind == "round"]
    msgs = [Message("rounds", 0, i, b"{}") for i in range(len(rounds))]
    stored: dict[str, bytes | None] = {}
    seen: set[str] = set()
    arena = ResidentArena(engine.held_tag)
    arena.read_at("g")
    compared = 0
    for k in range(0, len(rounds), 9):
        ops = [RoundOp(ev, msgs[k + i]) for i, ev in enumerate(rounds[k:k + 9])]
        if k == 9:
            ops.insert(3, RoundOp(rounds[2], msgs[2]))  # applied in the step before: re-published
            ops.append(RoundOp(rounds[k + 1], msgs[k + 1]))  # twice in this step: skipped
        if k == 27:
            stored[rounds[k + 5].players[7]] = b"\x01not a belief"
            arena = ResidentArena(engine.held_tag)
            arena.read_at("g")
        assert arena.settled
        lease = arena.lease()
        players = step_inputs(list(ops), False).players
        kept = _step(engine, ops, {p: stored.get(p) for p in arena.missing(players)}, seen, lease)
        assert kept == _step(engine, ops, stored, seen)
        assert arena.land(lease, "g", "g")
        beliefs, *_, outputs, dead, _counts, _blobs = kept
        assert bool(dead) == (k == 27)
        compared += len(outputs)
        stored.update(beliefs)
        seen.update(kept[2])
    assert compared > 5_000
    held = [p for p in stored if p in arena.pool.index]
    assert len(held) > 1_000 and all(engine.held_tag + arena.pool[p] == stored[p] for p in held)


def test_a_rating_the_arena_did_not_expect_makes_the_next_stale() -> None:
    """Two ratings claiming the arena as it is (a rating ahead not used, still on the numba thread, and the
    step rated again from Redis): the second finds the first's changes and fails, changing nothing."""
    engine = PoolEngine("p", make_system("elo-mmr"))
    arena = ResidentArena(engine.held_tag)
    arena.read_at("1")
    ops = [RoundOp(_round("r0", 0, {"a": 1, "b": 2, "c": 3}), Message("rounds", 0, 0, b"{}"))]
    first, second = arena.lease(), arena.lease()
    _step(engine, ops, {}, set(), first)
    held = {p: arena.pool[p] for p in "abc"}
    with pytest.raises(StaleArena):
        _step(engine, ops, {}, set(), second)
    assert {p: arena.pool[p] for p in "abc"} == held
    assert not arena.settled and arena.land(first, "1", "2") and arena.settled and arena.gen == "2"
    # the next step's rating claimed after ``first`` (ahead of its commit) lands after it only
    ahead = arena.lease_after(first)
    _step(engine, [RoundOp(_round("r1", 1, {"a": 2, "c": 1}), Message("rounds", 0, 1, b"{}"))], {}, set(), ahead)
    assert not arena.land(ahead, "1", "3") and arena.land(ahead, "2", "3") and arena.gen == "3"


def test_the_cache_replaces_an_arena_not_settled_and_keeps_its_budget() -> None:
    """``BeliefCache.arena`` gives a new arena for a step rated from Redis when some rating made in the kept
    one has not landed; a landing it does not expect drops it; over the budget, other pools go first."""
    engine = PoolEngine("p", make_system("elo-mmr"))
    tag = engine.held_tag
    cache = BeliefCache(1 << 20)
    cache.fill("q", "1", {"x": b"v" * 100})
    arena = cache.arena("p", tag)
    arena.read_at("1")
    assert cache.arena("p", tag) is arena  # settled: kept
    lease = arena.lease()
    ops = [RoundOp(_round("r0", 0, {f"n{i}": i + 1 for i in range(50)}), Message("rounds", 0, 0, b"{}"))]
    _step(engine, ops, {}, set(), lease)
    assert cache.arena("p", tag) is not arena  # a rating not landed (a rating ahead not used): replaced
    arena = cache.arena("p", tag)
    arena.read_at("1")
    lease = arena.lease()
    _step(engine, ops, {}, set(), lease)
    cache.landed("p", lease, "0", "2")  # not from the arena's gen: dropped
    assert "p" not in cache.arenas
    arena = cache.arena("p", tag)
    arena.read_at("1")
    lease = arena.lease()
    _step(engine, ops, {}, set(), lease)
    cache.landed("p", lease, "1", "2")
    assert cache.arenas["p"] is arena and arena.gen == "2" and "q" in cache.pools
    assert cache.nbytes == arena.nbytes() + cache.pools["q"].nbytes
    small = BeliefCache(arena.nbytes() + 50)  # room for the arena, not for the other pool too
    small.fill("q", "1", {"x": b"v" * 100})
    arena = small.arena("p", tag)
    arena.read_at("1")
    lease = arena.lease()
    _step(engine, ops, {}, set(), lease)
    small.landed("p", lease, "1", "2")
    assert "q" not in small.pools and small.arenas["p"] is arena
    tiny = BeliefCache(100)  # the arena alone is over the budget
    arena = tiny.arena("p", tag)
    arena.read_at("1")
    lease = arena.lease()
    _step(engine, ops, {}, set(), lease)
    tiny.landed("p", lease, "1", "2")
    assert not tiny.arenas and tiny.nbytes == 0
