"""Conflict-free wave scheduling."""

from __future__ import annotations

import numpy as np
import pytest

from stream.ratings.waves import schedule_waves, wave_index


def test_waves_basic() -> None:
    a = np.array([0, 2, 0, 1, 4])
    b = np.array([1, 3, 2, 3, 5])
    assert wave_index(a, b).tolist() == [0, 0, 1, 1, 0]
    _wave, order, starts = schedule_waves(a, b)
    assert starts.tolist() == [0, 3, 5]
    assert order.tolist() == [0, 1, 4, 2, 3]


def test_waves_are_conflict_free_and_ordered() -> None:
    rng = np.random.default_rng(3)
    a = rng.integers(0, 30, 500)
    b = (a + rng.integers(1, 30, 500)) % 30
    wave, order, starts = schedule_waves(a, b, 30)
    for w in range(len(starts) - 1):
        ms = order[starts[w] : starts[w + 1]]
        players = np.concatenate([a[ms], b[ms]])
        assert len(set(players.tolist())) == 2 * len(ms)
        assert np.all(np.diff(ms) > 0)
    # every player's matches keep their arrival order across waves
    for p in range(30):
        ms = np.flatnonzero((a == p) | (b == p))
        assert np.all(np.diff(wave[ms]) > 0)


def test_waves_empty_and_errors() -> None:
    wave, order, starts = schedule_waves(np.zeros(0, np.int64), np.zeros(0, np.int64))
    assert wave.size == 0 and order.size == 0 and starts.tolist() == [0]
    with pytest.raises(ValueError):
        wave_index(np.array([0, 1]), np.array([1]))
    with pytest.raises(ValueError):
        wave_index(np.array([0]), np.array([5]), nplayers=3)
