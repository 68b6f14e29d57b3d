"""What the evaluation predicts for a team round, per system: the evaluation's team predictor.

``mmr eval`` scores a team round from the beliefs before it with two numbers per system:

* a team's **strength** (higher = predicted better), which orders the teams of a round for the
  pair inversion and rank deviation at team level;
* for a round of two teams, the **probability that the first team finishes ahead** of the
  second, ``P(ahead) + P(tie)/2`` where the system models ties (TrueSkill's draw margin), for
  log loss and Brier against the outcome score 1 / ½ / 0.

Each follows the system's own team model, so that a team of one member gives what the
system's ``ranking_score`` and ``win_probability`` give for that player:

* elo-mmx, elo-mmr: strength ``M_t = Σ ω_i μ_i`` (the mean of the team's performance); the
  difference ``P_A − P_B`` has variance ``Σ ω_i² (σ_i² + σ_perf²)`` over both teams, and the
  probability is its Gaussian tail (elo-mmx) or the logistic of that variance (elo-mmr), as in
  ``EloMMR.win_probability``;
* trueskill: strength ``Σ ω_i μ_i``; ``d ~ N(Σ_A ω μ − Σ_B ω μ, Σ ω² (σ² + τ² + β²))`` with the
  package's team draw margin ``Φ⁻¹((p_draw + 1)/2) · √(players of both) · β``;
* elo: strength the ω-weighted mean rating (the team rating of ``Elo.rate_team_round``); the
  probability is the logistic expected score of the two team ratings.

ω_i is the part of the round member i played (the event's ``weights``, 1 by default). These
are helpers of the evaluation (``stream.tools.evaluate``), not a lobby API; a system without a
team model has no predictor (``team_predictor`` raises ``RatingError``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from scipy.special import ndtri

from stream.ratings._elo_mmr_kernels import TANH_MULTIPLIER
from stream.ratings.base import Belief, FloatArray, RatingError, RatingSystem
from stream.ratings.elo import Elo, expected_score
from stream.ratings.elo_mmr import EloMMR
from stream.ratings.trueskill import TrueSkill


class TeamPredictor(Protocol):
    """The two team predictions ``mmr eval`` scores (module docstring)."""

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float: ...

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray) -> float: ...


def _col(beliefs: Sequence[Belief], k: int) -> FloatArray:
    return np.fromiter((float(x[k]) for x in beliefs), dtype=np.float64, count=len(beliefs))


@dataclass(frozen=True)
class EloMMRTeams:
    system: EloMMR

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float:
        return float(np.dot(weights, _col(beliefs, 0)))

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray) -> float:
        ps2 = self.system._perf_spread() ** 2
        var = float(np.dot(wa * wa, _col(a, 1) ** 2 + ps2) + np.dot(wb * wb, _col(b, 1) ** 2 + ps2))
        spread = math.sqrt(var)
        diff = self.strength(a, wa) - self.strength(b, wb)
        if self.system.gaussian:
            return 0.5 * math.erfc(-diff / (spread * math.sqrt(2.0)))
        return 1.0 / (1.0 + math.exp(-diff * TANH_MULTIPLIER / spread))


@dataclass(frozen=True)
class TrueSkillTeams:
    system: TrueSkill

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float:
        return float(np.dot(weights, _col(beliefs, 0)))

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray) -> float:
        p = self.system.params
        extra = p.tau**2 + p.beta**2
        c = math.sqrt(float(np.dot(wa * wa, _col(a, 1) ** 2 + extra) + np.dot(wb * wb, _col(b, 1) ** 2 + extra)))
        dm = self.strength(a, wa) - self.strength(b, wb)
        eps = float(ndtri((p.draw_probability + 1.0) / 2.0)) * math.sqrt(len(a) + len(b)) * p.beta
        p_win = 0.5 * math.erfc((eps - dm) / (c * math.sqrt(2.0)))
        p_loss = 0.5 * math.erfc((eps + dm) / (c * math.sqrt(2.0)))
        return p_win + 0.5 * (1.0 - p_win - p_loss)


@dataclass(frozen=True)
class EloTeams:
    system: Elo

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float:
        return float(np.dot(weights, _col(beliefs, 0)) / weights.sum())

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray) -> float:
        return expected_score(self.strength(a, wa), self.strength(b, wb), self.system.params.scale)


def team_predictor(system: RatingSystem) -> TeamPredictor:
    """The evaluation's team predictions for ``system`` (module docstring)."""
    if isinstance(system, EloMMR):
        return EloMMRTeams(system)
    if isinstance(system, TrueSkill):
        return TrueSkillTeams(system)
    if isinstance(system, Elo):
        return EloTeams(system)
    raise RatingError(f"{system.name} does not rate team rounds (a round with teams)")
