"""TrueSkill (Herbrich, Minka & Graepel 2006) for ranked rounds of players or teams, and 1-v-1.

Why our own implementation rather than the ``trueskill`` package: the package builds a Python
object graph per game (hours for the Codeforces history) and cannot run inside our array
interface. The model is the standard factor graph: skill ``s ~ N(μ, σ² + τ²)``, performance
``p ~ N(s, β²)``, and for adjacent players in the standings ``p_k − p_{k+1} > ε`` (``≤ ε`` in
absolute value for a tie), solved by expectation propagation with the package's schedule
(``kernels.trueskill_chain``); the tests cross-check it against the package. The draw margin
follows the package: ``ε = Φ⁻¹((draw_probability + 1)/2) · √2 · β``. Defaults: the package's ×42,
so ratings sit on the scale of the other systems.

Teams add the package's team layer: a team performs ``t = Σ ω_i p_i``, the chain runs over the
teams (√(players of both) in place of √2 in ε), and each member's skill gets the chain's message
back through the sum factor in closed form. Teams of one with ω = 1 are ``rate_round`` bit for bit.

Belief layout: ``[mu, sigma, rounds]``; displayed rating ``μ − 3σ`` (the package's
conservative exposure).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
from scipy.special import ndtri

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingSystem, team_round
from stream.ratings.baselines.kernels import _v_w_draw, _v_w_win, trueskill_chain


@dataclass(frozen=True)
class TrueSkillParams(Params):
    """Package defaults ×42; ``tau``: dynamics added before every event; ``tol``/``max_iter`` bound
    the EP sweeps of a multiplayer round."""

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
    side_advantage = True
    params_type = TrueSkillParams
    params: TrueSkillParams

    def new_belief(self) -> Belief:
        return np.array([self.params.mu, self.params.sigma, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0] - 3.0 * belief[1]), float(belief[0]), float(belief[1]), int(belief[2]))

    def draw_margin(self, players: int = 2) -> float:
        """The package's ε of a game of ``players``: ``Φ⁻¹((p_draw + 1)/2)·√players·β``."""
        p = self.params
        return float(ndtri((p.draw_probability + 1.0) / 2.0)) * math.sqrt(float(players)) * p.beta

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
        eps = np.full(n - 1, self.draw_margin())
        lik_pi, lik_tau = trueskill_chain(mu, sig2 + p.beta**2, tie, eps, p.tol, p.max_iter)
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

    def rate_team_round(self, beliefs: Sequence[Belief], team_of: IntArray, team_ranks: IntArray, time_ms: int,
                        weight: float = 1.0, perf_ceiling: float = math.inf,
                        player_weights: FloatArray | None = None,
                        team_shift: FloatArray | None = None) -> list[Belief]:
        """The team layer of the module docstring. The chain returns the likelihood ``(π_t, τ_t)`` of
        team t's performance. Member i's performance is ``p_i = (t − Σ_{j≠i} ω_j p_j) / ω_i`` with the
        others at their prior ``N(μ_j, σ_j² + τ² + β²)``, so the message into i's skill is Gaussian
        with precision ``ω_i² π_t / (1 + π_t (R_i + ω_i² β²))`` and precision-mean
        ``ω_i (τ_t − π_t (M_t − ω_i μ_i)) / (1 + π_t (R_i + ω_i² β²))``, ``M_t = Σ ω_j μ_j``,
        ``R_i = Σ_{j≠i} ω_j² (σ_j² + τ² + β²)``. ``team_shift[t]``: a member of known skill (added to
        ``M_t``, no variance)."""
        checked = team_round(beliefs, team_of, team_ranks, player_weights)
        if checked is None:
            return list(beliefs)
        team_index, ranks, pw = checked
        n, nteams = len(beliefs), len(ranks)
        p = self.params
        mu = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        sig2 = np.fromiter((b[1] for b in beliefs), dtype=np.float64, count=n) ** 2 + p.tau**2
        pvar = sig2 + p.beta**2
        tmu = np.zeros(nteams)
        np.add.at(tmu, team_index, pw * mu)
        if team_shift is not None:
            tmu = tmu + np.asarray(team_shift, dtype=np.float64)
        tvar = np.zeros(nteams)
        np.add.at(tvar, team_index, pw * pw * pvar)
        size = np.bincount(team_index, minlength=nteams)
        order = np.argsort(ranks, kind="stable")
        r_sorted = ranks[order]
        tie = r_sorted[1:] == r_sorted[:-1]
        s_sorted = size[order].astype(np.float64)
        eps = float(ndtri((p.draw_probability + 1.0) / 2.0)) * np.sqrt(s_sorted[:-1] + s_sorted[1:]) * p.beta
        pi_s, tau_s = trueskill_chain(tmu[order], tvar[order], tie, eps, p.tol, p.max_iter)
        lik_pi = np.empty(nteams)
        lik_tau = np.empty(nteams)
        lik_pi[order] = pi_s
        lik_tau[order] = tau_s
        t_pi, t_tau = lik_pi[team_index], lik_tau[team_index]
        rest_var = tvar[team_index] - pw * pw * pvar  # R_i: the other members' performance variance
        rest_mu = tmu[team_index] - pw * mu
        den = 1.0 + t_pi * (rest_var + pw * pw * p.beta**2)
        m_pi = pw * pw * t_pi / den
        m_tau = pw * (t_tau - t_pi * rest_mu) / den
        post_pi = 1.0 / sig2 + m_pi
        post_mu = (mu / sig2 + m_tau) / post_pi
        post_sig = np.sqrt(1.0 / post_pi)
        return [np.array([post_mu[i], post_sig[i], beliefs[i][2] + 1.0]) for i in range(n)]

    def rate_pair(self, a: Belief, b: Belief, score: float, advantage: float = 0.0) -> tuple[Belief, Belief]:
        """Closed-form 1-v-1 update (one truncation factor: EP is exact after one pass)."""
        p = self.params
        if score < 0.5:
            nb, na = self.rate_pair(b, a, 1.0 - score, -advantage)
            return na, nb
        va = float(a[1]) ** 2 + p.tau**2
        vb = float(b[1]) ** 2 + p.tau**2
        c2 = va + vb + 2.0 * p.beta**2
        c = math.sqrt(c2)
        diff = float(a[0]) - float(b[0])
        t = (diff + advantage if advantage else diff) / c
        v, w = (_v_w_draw if score == 0.5 else _v_w_win)(t, self.draw_margin() / c)
        na = np.array([a[0] + va / c * v, math.sqrt(va * (1.0 - va / c2 * w)), a[2] + 1.0])
        nb = np.array([b[0] - vb / c * v, math.sqrt(vb * (1.0 - vb / c2 * w)), b[2] + 1.0])
        return na, nb

    def rate_matches(self, beliefs: Sequence[Belief], a: IntArray, b: IntArray, scores: FloatArray,
                     times_ms: IntArray, advantages: FloatArray | None = None) -> list[Belief]:
        out = list(beliefs)
        shifts = [0.0] * len(a) if advantages is None else np.asarray(advantages, dtype=np.float64).tolist()
        for ia, ib, s, h in zip(a.tolist(), b.tolist(), scores.tolist(), shifts, strict=True):
            out[ia], out[ib] = self.rate_pair(out[ia], out[ib], s, h)
        return out

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """P(A wins) + P(draw)/2 with the draw margin: d ~ N(μa − μb + advantage, σa² + σb² + 2β²)."""
        diff = float(a[0] - b[0])
        win, draw, _ = self.outcomes(diff + advantage if advantage else diff, float(a[1]) ** 2, float(b[1]) ** 2, 2)
        return win + 0.5 * draw

    def advantage_unit(self) -> float:
        """β: a side advantage is a shift of a performance."""
        return float(self.params.beta)

    def outcomes(self, diff: float, var_a: float, var_b: float, players: int) -> tuple[float, float, float]:
        """(P(a wins), P(draw), P(b wins)) for ``d ~ N(diff, var_a + var_b + 2(β² + τ²))`` and the draw
        margin of ``players``. ``var``: a player's σ², or a team's ``Σ ω² (σ² + β² + τ²) − (β² + τ²)``
        (``lobby.outcomes``)."""
        p = self.params
        c = math.sqrt(var_a + var_b + 2.0 * (p.beta**2 + p.tau**2))
        eps = self.draw_margin(players)
        p_win = 0.5 * math.erfc((eps - diff) / (c * math.sqrt(2.0)))
        p_loss = 0.5 * math.erfc((eps + diff) / (c * math.sqrt(2.0)))
        return p_win, 1.0 - p_win - p_loss, p_loss

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
