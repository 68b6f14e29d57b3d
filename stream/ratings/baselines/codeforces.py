"""The Codeforces rating system (M. Mirzayanov, "Open Codeforces Rating System", 2015).

Why: one of the two industry multiplayer systems the Elo-MMR paper compares against. Per round:

1. ``seed_i = 1 + Σ_{j≠i} P(j beats i)`` with ``P = 1/(1 + 10^((r_i − r_j)/400))``;
2. ``m_i = √(seed_i · rank_i)`` (geometric mean of expected and actual place; tied
   contestants share the *last* place of their tie group, as in Codeforces' code);
3. ``need_i`` is the rating whose seed against the other contestants equals ``m_i``
   (``seed_i(R) = 1 + Σ_{j≠i} P(j beats R)``, searched in [1, 8000] like Codeforces'
   ``getRatingToRank``), and ``Δ_i = (need_i − r_i)/2``;
4. inflation control: every Δ gets ``−Σ Δ / n − 1``, then the top ``min(4√n, n)`` by
   rating share ``min(max(−Σ_top Δ / k, −10), 0)``.

Codeforces solves step 3 by integer bisection, O(13·N²); here ``Σ_j P(j beats R)`` is one smooth
function of R for the whole round, evaluated on ``grid`` points and splined, and each player's
equation bisected on the spline (error far below Codeforces' integer rounding); the seeds use the
same smoothness (``logistic_sums``). Ratings are kept continuous; ``weight`` scales Δ.

Belief layout: ``[rating, rounds]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingSystem
from stream.ratings.baselines.elo import expected_score
from stream.ratings.baselines.kernels import logistic_rows, logistic_sums


@dataclass(frozen=True)
class CodeforcesParams(Params):
    """``init``: 1500, Codeforces before its 2020 change; ``k``: fraction of the gap to the needed
    rating taken; ``inflation_control``: apply step 4; ``grid``: points of the seed function."""

    init: float = 1500.0
    k: float = 0.5
    inflation_control: bool = True
    grid: int = 512

    def __post_init__(self) -> None:
        self.require({"init": math.isfinite(self.init), "k": math.isfinite(self.k) and self.k > 0,
                      "grid": self.grid >= 2})


def tie_last_place(ranks: IntArray) -> FloatArray:
    """1-based place of the last member of each player's tie group."""
    r = np.asarray(ranks)
    return np.searchsorted(np.sort(r), r, side="right").astype(np.float64)


#: Codeforces' getRatingToRank bisects over integer ratings in [1, 8000]
NEED_MIN, NEED_MAX = 1.0, 8000.0


def solve_need(r: FloatArray, target: FloatArray, grid: int) -> FloatArray:
    """Per player i, the rating R with ``1 + Σ_{j≠i} σ((r_j − R)/400) = target_i``: the shared
    ``F(R) = Σ_j σ((r_j − R)/400)`` splined on ``grid`` points and each equation (F minus its own
    term) bisected in Codeforces' [1, 8000] (widened if ratings lie outside; beyond it clamped).

    Why the own term is excluded: including it (a literal reading of ``getSeed``) makes the
    leader's target unreachable near its rating, a feedback that drives the top Codeforces
    player to 17,000 on the real history."""
    from scipy.interpolate import CubicSpline

    lo = min(NEED_MIN, float(r.min()) - 1000.0)
    hi = max(NEED_MAX, float(r.max()) + 1000.0)
    xs = np.linspace(lo, hi, grid)
    spline = CubicSpline(xs, logistic_rows(r, xs, 400.0))
    k = math.log(10.0) / 400.0
    goal = target - 1.0
    a = np.full(len(r), lo)
    b = np.full(len(r), hi)
    for _ in range(48):  # (hi − lo)/2^48: far below a rating point
        mid = 0.5 * (a + b)
        val = spline(mid) - 1.0 / (1.0 + np.exp(k * (mid - r)))
        above = val > goal  # seed too high: the needed rating is larger
        a = np.where(above, mid, a)
        b = np.where(above, b, mid)
    return np.asarray(0.5 * (a + b), dtype=np.float64)


class Codeforces(RatingSystem):
    name = "codeforces"
    params_type = CodeforcesParams
    params: CodeforcesParams

    def new_belief(self) -> Belief:
        return np.array([self.params.init, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0]), float(belief[0]), 0.0, int(belief[1]))

    def deltas(self, r: FloatArray, ranks: IntArray) -> FloatArray:
        """Rating changes of one round (steps 1–4 of the module docstring)."""
        p = self.params
        n = len(r)
        seed = 1.0 + (logistic_sums(r, r, 400.0) - 0.5)  # Σ_{j≠i} P(j beats i)
        m = np.sqrt(seed * tie_last_place(ranks))
        need = solve_need(r, m, p.grid)
        delta = p.k * (need - r)
        if p.inflation_control:
            delta += -delta.sum() / n - 1.0
            top = np.argsort(-r, kind="stable")[: min(int(4 * round(math.sqrt(n))), n)]
            delta += min(max(-delta[top].sum() / len(top), -10.0), 0.0)
        return delta

    def rate_round(self, beliefs: Sequence[Belief], ranks: IntArray, time_ms: int, weight: float = 1.0,
                   perf_ceiling: float = math.inf) -> list[Belief]:
        n = len(beliefs)
        if n < 2 or np.all(ranks == ranks[0]):
            return list(beliefs)
        r = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        new_r = r + weight * self.deltas(r, np.asarray(ranks))
        return [np.array([new_r[i], beliefs[i][1] + 1.0]) for i in range(n)]

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        ra = float(a[0])
        return expected_score(ra + advantage if advantage else ra, float(b[0]))

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
