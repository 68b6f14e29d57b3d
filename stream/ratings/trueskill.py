"""TrueSkill (Herbrich, Minka & Graepel 2006) for ranked rounds of single players and 1-v-1.

Why our own implementation rather than the ``trueskill`` package: the package builds a
Python object graph per game (≈ tens of µs per factor), so the Codeforces history (3.1 M
results, rounds of up to 16,783 players) would take hours, and it cannot run inside our
numba-friendly array interface. The model here is the standard factor graph with
single-player teams: skill ``s ~ N(μ, σ² + τ²)``, performance ``p ~ N(s, β²)``, and for
adjacent players in the standings a difference factor ``p_k − p_{k+1} > ε`` (or
``|p_k − p_{k+1}| ≤ ε`` for a tie), solved by expectation propagation with the same
forward/backward schedule as the package (``_baseline_kernels.trueskill_chain``). The
test suite cross-checks results against the package on rounds with ties.

The draw margin follows the package: ``ε = Φ⁻¹((draw_probability + 1)/2) · √2 · β``.
Default scale: the package's defaults multiplied by 42 (μ 1500 ~ 25·60, σ 350 ≈ 25/3·42,
β = σ/2, τ = σ/100) so ratings sit on the same scale as the other systems.

Belief layout: ``[mu, sigma, rounds]``; displayed rating ``μ − 3σ`` (the package's
conservative exposure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from stream.ratings._baseline_kernels import _v_w_draw, _v_w_win, trueskill_chain
from stream.ratings.base import (
    Belief,
    FloatArray,
    IntArray,
    Params,
    Rating,
    RatingSystem,
)


@dataclass(frozen=True)
class TrueSkillParams(Params):
    """Package defaults ×42: ``mu``/``sigma`` prior, ``beta`` performance noise, ``tau`` dynamics
    added before every event, ``draw_probability`` sets the draw margin; ``tol``/``max_iter``
    bound the EP sweeps of a multiplayer round."""

    mu: float = 1500.0
    sigma: float = 350.0
    beta: float = 175.0
    tau: float = 3.5
    draw_probability: float = 0.10
    tol: float = 1e-6
    max_iter: int = 50

    def __post_init__(self) -> None:
        fin = math.isfinite
        self.require({"mu": fin(self.mu), "sigma": fin(self.sigma) and self.sigma > 0,
                      "beta": fin(self.beta) and self.beta > 0, "tau": fin(self.tau) and self.tau >= 0,
                      "draw_probability": 0 <= self.draw_probability < 1, "tol": fin(self.tol) and self.tol > 0,
                      "max_iter": self.max_iter >= 1})


class TrueSkill(RatingSystem):
    name = "trueskill"
    params_type = TrueSkillParams
    params: TrueSkillParams

    def new_belief(self) -> Belief:
        return np.array([self.params.mu, self.params.sigma, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0] - 3.0 * belief[1]), float(belief[0]), float(belief[1]), int(belief[2]))

    @property
    def draw_margin(self) -> float:
        p = self.params
        return float(ndtri((p.draw_probability + 1.0) / 2.0)) * math.sqrt(2.0) * p.beta

    def rate_round(self, beliefs: Sequence[Belief], ranks: IntArray, time_ms: int, weight: float = 1.0,
                   perf_ceiling: float = math.inf) -> list[Belief]:
        n = len(beliefs)
        if n < 2 or np.all(ranks == ranks[0]):
            return list(beliefs)
        p = self.params
        order = np.argsort(np.asarray(ranks), kind="stable")
        mu = np.fromiter((beliefs[i][0] for i in order), dtype=np.float64, count=n)
        sig2 = np.fromiter((beliefs[i][1] for i in order), dtype=np.float64, count=n) ** 2 + p.tau**2
        r_sorted = np.asarray(ranks)[order]
        tie = r_sorted[1:] == r_sorted[:-1]
        lik_pi, lik_tau = trueskill_chain(mu, sig2 + p.beta**2, tie, self.draw_margin, p.tol, p.max_iter)
        # message into the skill through the β² factor, then skill posterior
        m_pi = lik_pi / (1.0 + p.beta**2 * lik_pi)
        m_tau = lik_tau / (1.0 + p.beta**2 * lik_pi)
        post_pi = 1.0 / sig2 + m_pi
        post_mu = (mu / sig2 + m_tau) / post_pi
        post_sig = np.sqrt(1.0 / post_pi)
        out = list(beliefs)
        for k, i in enumerate(order.tolist()):
            out[i] = np.array([post_mu[k], post_sig[k], beliefs[i][2] + 1.0])
        return out

    def rate_pair(self, a: Belief, b: Belief, score: float) -> tuple[Belief, Belief]:
        """Closed-form 1-v-1 update (one truncation factor: EP is exact after one pass)."""
        p = self.params
        if score < 0.5:
            nb, na = self.rate_pair(b, a, 1.0 - score)
            return na, nb
        va = float(a[1]) ** 2 + p.tau**2
        vb = float(b[1]) ** 2 + p.tau**2
        c2 = va + vb + 2.0 * p.beta**2
        c = math.sqrt(c2)
        t = (float(a[0]) - float(b[0])) / c
        v, w = (_v_w_draw if score == 0.5 else _v_w_win)(t, self.draw_margin / c)
        na = np.array([a[0] + va / c * v, math.sqrt(va * (1.0 - va / c2 * w)), a[2] + 1.0])
        nb = np.array([b[0] - vb / c * v, math.sqrt(vb * (1.0 - vb / c2 * w)), b[2] + 1.0])
        return na, nb

    def rate_matches(self, beliefs: Sequence[Belief], a: IntArray, b: IntArray, scores: FloatArray,
                     times_ms: IntArray) -> list[Belief]:
        out = list(beliefs)
        for ia, ib, s in zip(a.tolist(), b.tolist(), scores.tolist(), strict=True):
            out[ia], out[ib] = self.rate_pair(out[ia], out[ib], s)
        return out

    def win_probability(self, a: Belief, b: Belief) -> float:
        """P(A wins) + P(draw)/2 with the draw margin: d ~ N(μa − μb, σa² + σb² + 2β²)."""
        p = self.params
        c = math.sqrt(float(a[1]) ** 2 + float(b[1]) ** 2 + 2.0 * (p.beta**2 + p.tau**2))
        dm = float(a[0] - b[0])
        eps = self.draw_margin
        p_win = 0.5 * math.erfc((eps - dm) / (c * math.sqrt(2.0)))
        p_loss = 0.5 * math.erfc((eps + dm) / (c * math.sqrt(2.0)))
        return p_win + 0.5 * (1.0 - p_win - p_loss)

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
