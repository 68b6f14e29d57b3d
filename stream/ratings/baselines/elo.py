"""Elo as online gradient descent (Tang, Wang & Jin 2025, eq. 2) — the two-player baseline.

Why this formulation: as OGD on the logistic (Bradley–Terry) log-loss one Elo step is
``r ← r + η · (s − σ(r − r_opp))``, ``σ(x) = 1/(1 + 10^(−x/scale))``, η the K-factor. A
multiplayer round sums the pairwise gradient terms (a tie scores 1/2), divided by N − 1 when
``normalize``, so that one round moves a rating about as far as one game does.

Teams (team Elo's common practice): a team's rating is its members' mean weighted by the part of
the round each played, the teams are rated as players, and every member moves by their team's
change times that part; a team of one is ``rate_round`` bit for bit.

Belief layout: ``[rating, rounds]``.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingSystem, team_round
from stream.ratings.baselines.kernels import elo_match_steps, logistic_sums


@dataclass(frozen=True)
class EloParams(Params):
    """``k``: learning rate η (32: the chess/FIFA-style default, which also suits football);
    ``scale``: 400 points = a factor 10 in odds; ``normalize``: divide a round's gradient by N − 1."""

    k: float = 32.0
    scale: float = 400.0
    init: float = 1500.0
    normalize: bool = True

    def __post_init__(self) -> None:
        fin = math.isfinite
        self.require({"k": fin(self.k) and self.k >= 0, "scale": fin(self.scale) and self.scale > 0,
                      "init": fin(self.init)})


def expected_score(ra: float, rb: float, scale: float = 400.0) -> float:
    """σ(ra − rb): A's expected score under the Elo (logistic) model."""
    return 1.0 / (1.0 + 10.0 ** ((rb - ra) / scale))


def round_scores(ranks: IntArray) -> FloatArray:
    """Σ_j s_ij for every player of a round: wins + ties/2 (own entry excluded), O(N log N)."""
    r = np.asarray(ranks)
    sorted_r = np.sort(r)
    worse = len(r) - np.searchsorted(sorted_r, r, side="right")
    equal = np.searchsorted(sorted_r, r, side="right") - np.searchsorted(sorted_r, r, side="left") - 1
    return (worse + 0.5 * equal).astype(np.float64)


def team_ratings(r: FloatArray, team_index: IntArray, weights: FloatArray, nteams: int) -> FloatArray:
    """Each team's rating: its members' ratings averaged with the weights."""
    total = np.bincount(team_index, weights=weights * r, minlength=nteams)
    out: FloatArray = total / np.bincount(team_index, weights=weights, minlength=nteams)
    return out


class Elo(RatingSystem):
    name = "elo"
    side_advantage = True
    params_type = EloParams
    params: EloParams

    def new_belief(self) -> Belief:
        return np.array([self.params.init, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0]), float(belief[0]), 0.0, int(belief[1]))

    def rate_round(self, beliefs: Sequence[Belief], ranks: IntArray, time_ms: int, weight: float = 1.0,
                   perf_ceiling: float = math.inf) -> list[Belief]:
        n = len(beliefs)
        if n < 2 or np.all(ranks == ranks[0]):
            return list(beliefs)
        p = self.params
        r = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        # expected wins against the others: Σ_{j≠i} σ(r_i − r_j) = (N − ½) − Σ_j σ(r_j − r_i)
        expected = (n - 0.5) - logistic_sums(r, r, p.scale)  # own term (1/2) removed
        grad = round_scores(ranks) - expected
        step = p.k * weight * grad / ((n - 1) if p.normalize else 1.0)
        new_r = r + step
        return [np.array([new_r[i], beliefs[i][1] + 1.0]) for i in range(n)]

    def rate_team_round(self, beliefs: Sequence[Belief], team_of: IntArray, team_ranks: IntArray, time_ms: int,
                        weight: float = 1.0, perf_ceiling: float = math.inf,
                        player_weights: FloatArray | None = None,
                        team_shift: FloatArray | None = None) -> list[Belief]:
        """Team Elo (module docstring); team t plays at ``team rating + team_shift[t]``."""
        checked = team_round(beliefs, team_of, team_ranks, player_weights)
        if checked is None:
            return list(beliefs)
        team_index, ranks, pw = checked
        n, nteams = len(beliefs), len(ranks)
        p = self.params
        r = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        tr = team_ratings(r, team_index, pw, nteams)
        if team_shift is not None:
            tr = tr + np.asarray(team_shift, dtype=np.float64)
        expected = (nteams - 0.5) - logistic_sums(tr, tr, p.scale)
        grad = round_scores(ranks) - expected
        step = p.k * weight * grad / ((nteams - 1) if p.normalize else 1.0)
        new_r = r + pw * step[team_index]
        return [np.array([new_r[i], beliefs[i][1] + 1.0]) for i in range(n)]

    def rate_matches(self, beliefs: Sequence[Belief], a: IntArray, b: IntArray, scores: FloatArray,
                     times_ms: IntArray, advantages: FloatArray | None = None) -> list[Belief]:
        """One numba pass over the batch (the service's hot path)."""
        p = self.params
        if len(beliefs) == 0:
            return []
        cols = np.array(beliefs, dtype=np.float64).reshape(len(beliefs), -1)
        r = np.ascontiguousarray(cols[:, 0])
        cnt = np.ascontiguousarray(cols[:, 1])
        shifts = np.zeros(len(a)) if advantages is None else np.asarray(advantages, dtype=np.float64)
        elo_match_steps(r, cnt, np.asarray(a, dtype=np.int64), np.asarray(b, dtype=np.int64),
                        np.asarray(scores, dtype=np.float64), float(p.k), float(p.scale), shifts)
        touched = np.zeros(len(beliefs), dtype=bool)
        touched[a] = True
        touched[b] = True
        out = list(beliefs)
        for i in np.flatnonzero(touched).tolist():
            out[i] = np.array([r[i], cnt[i]])
        return out

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        ra = float(a[0])
        return expected_score(ra + advantage if advantage else ra, float(b[0]), self.params.scale)

    def advantage_unit(self) -> float:
        """The sd of Elo's logistic performance difference over √2: scale/ln 10 · π/√3."""
        return float(self.params.scale) / math.log(10.0) * math.pi / math.sqrt(3.0)

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
