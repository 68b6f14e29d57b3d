"""Metric functions on hand-computed cases, ties included, and the fast pair count vs the naive one."""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt
import pytest

from stream.scoring import (
    brier,
    calibration_table,
    log_loss,
    pair_inversions,
    rank_deviations,
)


def pair_inversions_naive(actual_ranks: npt.ArrayLike, scores: npt.ArrayLike) -> tuple[float, float]:
    """The O(N²) oracle of ``pair_inversions``: every pair."""
    a = np.asarray(actual_ranks)
    s = np.asarray(scores, dtype=np.float64)
    wrong = 0.0
    pairs = 0.0
    for i in range(len(a)):
        for j in range(i + 1, len(a)):
            pairs += 1
            if a[i] == a[j]:
                continue
            better, worse = (i, j) if a[i] < a[j] else (j, i)
            if s[better] < s[worse]:
                wrong += 1
            elif s[better] == s[worse]:
                wrong += 0.5
    return wrong, pairs


def test_pair_inversions_by_hand() -> None:
    # perfect prediction, fully reversed prediction
    assert pair_inversions([1, 2, 3], [30, 20, 10]) == (0.0, 3.0)
    assert pair_inversions([1, 2, 3], [10, 20, 30]) == (3.0, 3.0)
    # outcome tie between players 2 and 3: that pair is correct whatever the ratings
    assert pair_inversions([1, 2, 2], [30, 10, 20]) == (0.0, 3.0)
    # predicted tie with different outcomes counts one half
    assert pair_inversions([1, 2, 3], [20, 20, 10]) == (0.5, 3.0)
    # 4 players, ranks 1,2,2,4; prediction order p3 > p0 > p2 > p1:
    # wrong pairs: (p0 beat p3? no, p3 finished last but was rated best): (0,3), (1,3), (2,3) → 3 of 6
    assert pair_inversions([1, 2, 2, 4], [20, 5, 10, 30]) == (3.0, 6.0)
    assert pair_inversions([1], [1.0]) == (0.0, 0.0)


def test_pair_inversions_matches_naive_random() -> None:
    rng = np.random.default_rng(42)
    for _ in range(300):
        n = int(rng.integers(2, 40))
        ranks = rng.integers(1, max(2, n // 2), n)
        scores = rng.integers(0, 6, n).astype(float)
        fast = pair_inversions(ranks, scores)
        slow = pair_inversions_naive(ranks, scores)
        assert fast[1] == slow[1]
        assert fast[0] == pytest.approx(slow[0])


def test_rank_deviation_by_hand() -> None:
    # predicted places: p0→1, p1→4, p2→2, p3→3; actual ranges [1,1], [2,3], [2,3], [4,4]
    dev = rank_deviations([1, 2, 2, 4], [40, 10, 30, 20])
    assert dev.tolist() == pytest.approx([0.0, 1 / 3, 0.0, 1 / 3])  # normalised by N − 1 (paper §6.2)
    # equal ratings share the middle of their predicted range: both predicted 1.5
    dev = rank_deviations([1, 2], [5, 5])
    assert dev.tolist() == [0.5, 0.5]
    # a tie in the outcome covering the prediction gives 0
    assert rank_deviations([1, 1, 1], [3, 2, 1]).tolist() == [0.0, 0.0, 0.0]


def test_log_loss_and_brier_by_hand() -> None:
    p = np.array([0.8, 0.8, 0.8])
    s = np.array([1.0, 0.0, 0.5])
    ll = log_loss(p, s)
    assert ll[0] == pytest.approx(-math.log(0.8))
    assert ll[1] == pytest.approx(-math.log(0.2))
    assert ll[2] == pytest.approx(-0.5 * (math.log(0.8) + math.log(0.2)))
    assert brier(p, s).tolist() == pytest.approx([0.04, 0.64, 0.09])
    assert math.isfinite(float(log_loss([1.0], [0.0])[0]))  # clipped, not inf


def test_calibration_table() -> None:
    tab = calibration_table([0.05, 0.15, 0.12, 0.95, 1.0], [0.0, 1.0, 0.0, 1.0, 1.0], bins=10)
    assert len(tab) == 10
    assert (tab[0].n, tab[1].n, tab[9].n) == (1, 2, 2)
    assert tab[1].mean_p == pytest.approx(0.135)
    assert tab[1].mean_s == pytest.approx(0.5)
    assert tab[9].mean_s == 1.0
    assert math.isnan(tab[5].mean_p)
