"""The TopCoder algorithm-track rating system (TopCoder, "Algorithm Competition Rating System").

Why: the second industry multiplayer system of the Elo-MMR paper's comparison. ``update`` is the
published formulas line by line (ties share the average of their places; the expected rank sums
over all coders, the own term adding ½). 1200 and 535 are TopCoder's published initial rating
and volatility (the weight's rating thresholds refer to them).

Belief layout: ``[rating, volatility, rounds]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingSystem
from stream.ratings.baselines.kernels import topcoder_expected_ranks


@dataclass(frozen=True)
class TopCoderParams(Params):
    """``weight_scale`` multiplies the published weight."""

    init: float = 1200.0
    vol_init: float = 535.0
    weight_scale: float = 1.0

    def __post_init__(self) -> None:
        fin = math.isfinite
        self.require({"init": fin(self.init), "vol_init": fin(self.vol_init) and self.vol_init > 0,
                      "weight_scale": fin(self.weight_scale) and self.weight_scale > 0})


def average_rank(ranks: IntArray) -> FloatArray:
    """1-based actual rank, tied players sharing the average of their places."""
    r = np.asarray(ranks)
    s = np.sort(r)
    first = np.searchsorted(s, r, side="left") + 1.0
    last = np.searchsorted(s, r, side="right").astype(np.float64)
    return (first + last) / 2.0


class TopCoder(RatingSystem):
    name = "topcoder"
    params_type = TopCoderParams
    params: TopCoderParams

    def new_belief(self) -> Belief:
        return np.array([self.params.init, self.params.vol_init, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0]), float(belief[0]), float(belief[1]), int(belief[2]))

    def update(self, r: FloatArray, vol: FloatArray, played: FloatArray, ranks: IntArray) -> tuple[
            FloatArray, FloatArray]:
        """New ratings and volatilities of one round (formulas of the module docstring)."""
        n = len(r)
        cf = math.sqrt(float(np.mean(vol * vol)) + float(np.sum((r - r.mean()) ** 2)) / (n - 1))
        erank = topcoder_expected_ranks(r, vol)
        eperf = -ndtri((erank - 0.5) / n)
        aperf = -ndtri((average_rank(ranks) - 0.5) / n)
        perf_as = r + cf * (aperf - eperf)
        w = 1.0 / (1.0 - (0.42 / (played + 1.0) + 0.18)) - 1.0
        w = w * np.where(r > 2500, 0.8, np.where(r >= 2000, 0.9, 1.0)) * self.params.weight_scale
        cap = 150.0 + 1500.0 / (played + 2.0)
        new_r = np.clip((r + w * perf_as) / (1.0 + w), r - cap, r + cap)
        new_vol = np.sqrt((new_r - r) ** 2 / w + vol * vol / (w + 1.0))
        return new_r, new_vol

    def rate_round(self, beliefs: Sequence[Belief], ranks: IntArray, time_ms: int, weight: float = 1.0,
                   perf_ceiling: float = math.inf) -> list[Belief]:
        n = len(beliefs)
        if n < 2 or np.all(ranks == ranks[0]):
            return list(beliefs)
        r = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        vol = np.fromiter((b[1] for b in beliefs), dtype=np.float64, count=n)
        played = np.fromiter((b[2] for b in beliefs), dtype=np.float64, count=n)
        new_r, new_vol = self.update(r, vol, played, np.asarray(ranks))
        return [np.array([new_r[i], new_vol[i], played[i] + 1.0]) for i in range(n)]

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """TopCoder's WP: ½(erf((R_a + advantage − R_b)/√(2(V_a² + V_b²))) + 1)."""
        diff = float(a[0]) - float(b[0])
        return 0.5 * (math.erf((diff + advantage if advantage else diff)
                               / math.sqrt(2.0 * (float(a[1]) ** 2 + float(b[1]) ** 2))) + 1.0)

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
