"""The embedded store's arena of packed beliefs (``stream.state.packed_pool``) against a plain dict."""

from __future__ import annotations

import numpy as np
import pytest

from stream.state import packed_pool
from stream.state.packed_pool import FlatBeliefs, PackedPool, slot_class, slot_size


def _belief(rng: np.random.Generator, length: int) -> bytes:
    return rng.normal(size=length).astype("<f8").tobytes()


def test_slot_classes_are_the_smallest_slot_that_fits() -> None:
    lengths = np.arange(2, 20_000)
    sizes = np.array([slot_size(c) for c in slot_class(lengths).tolist()])
    assert (sizes >= lengths).all()
    assert (4 * sizes <= 6 * lengths).all()  # never more than 1.5x the belief (3/4-power steps)
    smaller = np.array([slot_size(c - 1) for c in slot_class(lengths).tolist()])
    assert (smaller < lengths).all()


@pytest.mark.parametrize("slack", [0, 24])
def test_pool_holds_what_a_dict_holds_through_growth_moves_and_reused_slots(monkeypatch: pytest.MonkeyPatch,
                                                                            slack: int) -> None:
    """Beliefs that grow (move up a size class), shrink (move down, freeing slots that later
    ones reuse), and enough players and values to grow every array, the arena from a plain
    array into a memory map and then by remapping: the bytes stay a dict's, with or without
    room left in the slots (``slack``)."""
    monkeypatch.setattr(packed_pool, "_MAP_MIN_VALUES", 1 << 16)
    rng = np.random.default_rng(5)
    pool, model = PackedPool(slack=slack), {}
    names = [f"p{i}" for i in range(3_000)]
    for step in range(12):
        chosen = rng.choice(len(names), size=900, replace=False)
        players = [names[i] for i in chosen.tolist()]
        lengths = rng.integers(6, 400 if step % 3 else 20, size=len(players))
        if step % 2:  # one block, as a round's output
            flat = rng.normal(size=int(lengths.sum()))
            offsets = np.concatenate([[0], np.cumsum(lengths)]).astype(np.int64)
            out = FlatBeliefs(players, pool.indices(players), flat, offsets, pool)
            changed = dict(out.items())
            pool.update(out)
        else:  # belief by belief, as matches or a round that changes nothing
            changed = {p: _belief(rng, int(n)) for p, n in zip(players, lengths, strict=True)}
            pool.update(changed)
        model.update(changed)
        assert list(pool) == list(model)  # first-seen order
        assert all(pool[p] == b for p, b in model.items())
    assert pool.memory_map is not None  # grew into a memory map
    assert len(pool) > 64  # and past the first player arrays
    n = len(pool)
    slots = np.array([slot_size(c) for c in pool.cls[:n].tolist()])
    assert (slots >= pool.length[:n]).all()
    # every value cut from the arena is a player's slot or a free one: nothing leaks
    assert int(slots.sum()) + pool.free_values == pool.tail


def test_gather_gives_the_flat_layout_with_the_prior_for_newcomers() -> None:
    rng = np.random.default_rng(1)
    pool = PackedPool()
    pool.update({"a": _belief(rng, 9), "b": _belief(rng, 6)})
    prior = np.arange(6, dtype=np.float64)
    idx = pool.indices(["b", "new", "a"])
    assert idx.tolist() == [1, -1, 0]
    flat, offsets = pool.gather(idx, prior)
    assert offsets.tolist() == [0, 6, 12, 21]
    assert flat.tobytes() == pool["b"] + prior.tobytes() + pool["a"]
    assert "new" not in pool and pool.get("new") is None


def test_a_belief_that_is_not_whole_float64_values_is_refused() -> None:
    with pytest.raises(ValueError, match="whole number"):
        PackedPool()["x"] = b"\0" * 12


def test_growth_with_a_view_of_the_arena_held_still_keeps_every_belief(monkeypatch: pytest.MonkeyPatch) -> None:
    """A mapped arena grows by remapping its pages; while something holds a view of it, it
    cannot, and is copied instead (the view keeps the old values)."""
    monkeypatch.setattr(packed_pool, "_MAP_MIN_VALUES", 1 << 10)
    rng = np.random.default_rng(2)
    pool = PackedPool()
    pool.update({"first": _belief(rng, 9)})
    assert pool.memory_map is not None
    view = pool.arena
    model = {f"q{i}": _belief(rng, 300) for i in range(400)}
    pool.update(model)
    assert pool.arena.shape[0] > view.shape[0]
    assert view[:9].tobytes() == pool["first"]
    assert all(pool[p] == b for p, b in model.items())


def test_look_ahead_answers_agree_with_a_fresh_look_up_after_newcomers_arrive() -> None:
    """An answer looked up ahead misses players registered after it (−1 then): ``indices``
    asks again for those, so it equals a look-up made at the time."""
    rng = np.random.default_rng(3)
    pool = PackedPool()
    pool.update({"a": _belief(rng, 6), "b": _belief(rng, 6)})
    players = ["b", "late", "never", "a"]
    pool.look_ahead(players)
    pool.update({"late": _belief(rng, 6)})  # registered after the look-ahead
    assert pool.indices(players).tolist() == [1, 2, -1, 0]
    assert pool.indices(players).tolist() == pool.indices(list(players)).tolist()  # answer used once
    other = list(players)  # an equal list is not the one looked up
    pool.look_ahead(players)
    assert pool.indices(other).tolist() == [1, 2, -1, 0]


def test_with_slack_a_belief_stays_in_its_slot_until_it_outgrows_it() -> None:
    """A step's arena (``slack``): a belief is placed with room to grow, rewritten in place while it
    fits, moved (with room again) once it does not; without slack it moves at every size class."""
    grows = [9, 12, 15, 18, 21, 24, 27, 30, 33, 36, 39]
    starts = {}
    for slack in (0, 24):
        pool = PackedPool(slack=slack)
        seen = []
        for n in grows:
            pool.update({"a": np.arange(n, dtype=np.float64).tobytes()})
            seen.append(int(pool.start[0]))
            assert pool["a"] == np.arange(n, dtype=np.float64).tobytes()
            assert slot_size(int(pool.cls[0])) >= n + (slack if seen.count(seen[-1]) == 1 else 0)
        starts[slack] = len(set(seen))
    assert starts[24] < starts[0]


def _grown_to_a_map(n: int = 1 << 17) -> PackedPool:
    """A pool whose arena is a memory map (8 MiB or more: ``_MAP_MIN_VALUES``)."""
    pool = PackedPool()
    players = [f"p{i}" for i in range(n)]
    offsets = np.arange(n + 1, dtype=np.int64) * 9
    pool.update(FlatBeliefs(players, np.full(n, -1, dtype=np.int64), np.arange(9.0 * n), offsets, pool))
    assert pool.memory_map is not None
    return pool


def test_a_released_pool_leaves_its_map_to_the_next_pool_grown_on_the_thread() -> None:
    """``release``: a worker's next step arena takes the map of the one before (its pages already in
    memory); the released pool holds nothing, and the next pool's beliefs are its own."""
    first = _grown_to_a_map()
    mm = first.memory_map
    first.release()
    assert len(first) == 0 and first.memory_map is None
    second = _grown_to_a_map()
    assert second.memory_map is mm
    assert second["p7"] == np.arange(63.0, 72.0).tobytes()
    third = _grown_to_a_map()  # no spare left: a map of its own
    assert third.memory_map is not mm


def test_a_map_still_viewed_elsewhere_is_not_reused() -> None:
    first = _grown_to_a_map()
    mm = first.memory_map
    view = first.arena[:10]  # another view of the map
    first.release()
    second = _grown_to_a_map()
    assert second.memory_map is not mm
    assert view[3] == 3.0
