"""Prediction-quality metrics of the evaluation harness (``mmr eval``, ``mmr tune``, ``mmr report``),
defined in docs/evaluation.md ("Protocol and metric definitions"): pair inversion and rank deviation
of a round (Elo-MMR paper §6.2), log loss, Brier and calibration of two-player events.

Pair inversion is counted in O(N log N) by a sort plus a Fenwick-tree merge count, never over all N²
pairs. Aggregated per participant (paper §6.2), player i's metric is the fraction of its N − 1
opponents predicted wrongly, whose mean over a round is the round's fraction of wrong pairs: the
aggregate is the participant-weighted mean of the rounds'.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from stream.ratings.baselines.kernels import pair_discordance

FloatArray = npt.NDArray[np.float64]
ArrayLike = npt.ArrayLike

#: probabilities are clipped to [EPS, 1 − EPS] so one over-confident miss cannot give +inf
EPS = 1e-12


def pair_inversions(actual_ranks: ArrayLike, scores: ArrayLike) -> tuple[float, float]:
    """``(wrong, pairs)`` of one round: see module docstring. ``pairs = N(N − 1)/2``.

    ``actual_ranks``: lower = better, equal = tie; ``scores``: predicted strength, higher = better.
    """
    actual = np.asarray(actual_ranks)
    pred = np.asarray(scores, dtype=np.float64)
    n = len(actual)
    if n < 2:
        return 0.0, 0.0
    order = np.lexsort((pred, actual))
    _, dense = np.unique(pred[order], return_inverse=True)
    wrong, pairs = pair_discordance(actual[order].astype(np.int64), dense.astype(np.int64).ravel())
    return float(wrong), float(pairs)


def rank_deviations(actual_ranks: ArrayLike, scores: ArrayLike) -> FloatArray:
    """Per-participant ``|predicted − actual rank| / (N − 1)`` (fractions, not percent)."""
    a = np.asarray(actual_ranks)
    s = np.asarray(scores, dtype=np.float64)
    n = len(a)
    if n < 2:
        return np.zeros(n)
    sa = np.sort(a)
    lo = np.searchsorted(sa, a, side="left") + 1.0  # best place of the tie range
    hi = np.searchsorted(sa, a, side="right").astype(np.float64)  # worst place
    ss = np.sort(-s)
    first = np.searchsorted(ss, -s, side="left") + 1.0
    last = np.searchsorted(ss, -s, side="right").astype(np.float64)
    pred = (first + last) / 2.0
    dev = np.maximum(0.0, np.maximum(lo - pred, pred - hi))
    return dev / (n - 1)


def log_loss(p: ArrayLike, s: ArrayLike) -> FloatArray:
    """Per-event log loss of predicted probability ``p`` for outcome score ``s``."""
    pp = np.clip(np.asarray(p, dtype=np.float64), EPS, 1.0 - EPS)
    ss = np.asarray(s, dtype=np.float64)
    return -(ss * np.log(pp) + (1.0 - ss) * np.log1p(-pp))


def brier(p: ArrayLike, s: ArrayLike) -> FloatArray:
    """Per-event squared error of the predicted score."""
    return (np.asarray(p, dtype=np.float64) - np.asarray(s, dtype=np.float64)) ** 2


@dataclass(frozen=True, slots=True)
class CalibrationBin:
    lo: float
    hi: float
    n: int
    mean_p: float
    mean_s: float


def calibration_table(p: ArrayLike, s: ArrayLike, bins: int = 10) -> list[CalibrationBin]:
    """Equal-width bins of predicted probability with the mean prediction and observed score."""
    pp = np.asarray(p, dtype=np.float64)
    ss = np.asarray(s, dtype=np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    idx = np.clip(np.searchsorted(edges, pp, side="right") - 1, 0, bins - 1)
    out = []
    for b in range(bins):
        m = idx == b
        k = int(m.sum())
        out.append(CalibrationBin(float(edges[b]), float(edges[b + 1]), k,
                                  float(pp[m].mean()) if k else math.nan, float(ss[m].mean()) if k else math.nan))
    return out
