"""Plain dense-Gaussian oracle of an Elo-MMχ team round (docs/teams.md), for tests only.

Why it exists: the kernel in ``_elo_mmx_teams`` works member by member with the algebra
already done (a team's variance as a running sum, a member's share as one ratio). This
module does it the obvious way: it builds the joint Gaussian of every member's performance,
the matrix of team sums, the teams' covariance ``A Σ Aᵀ``, and conditions the members'
performances on the solved team performances with a linear solve. Team performances are
solved by ``_elo_mmr_naive``'s term-by-term equation. Nothing here is fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from stream.ratings._elo_mmr_naive import HEADER, MS_PER_DAY, _gaussian_terms, _weight, illinois

FloatArray = npt.NDArray[np.float64]


def rate_team_round_naive(
    beliefs: Sequence[FloatArray],
    team_of: Sequence[int],
    team_ranks: Sequence[int],
    time_ms: int,
    params: Any,
    weight: float = 1.0,
    perf_ceiling: float = math.inf,
    player_weights: Sequence[float] | None = None,
) -> tuple[list[FloatArray], FloatArray, FloatArray]:
    """One team round: the new beliefs, every member's performance and every team's."""
    n = len(beliefs)
    nteams = len(team_ranks)
    omega = np.ones(n) if player_weights is None else np.asarray(player_weights, dtype=np.float64)
    lim2 = params.sig_limit**2
    mu = np.empty(n)  # members' performance means
    var = np.empty(n)  # members' performance variances σ'² + β²
    diffused: list[tuple[float, float]] = []  # (σ' after diffusion, β)
    for i, b in enumerate(beliefs):
        m, sig, _, _, rounds, last = (float(v) for v in b[:HEADER])
        w = _weight(params, weight * float(omega[i]), int(rounds))
        days = max(0.0, (time_ms - last) / MS_PER_DAY) if rounds > 0 else 0.0
        beta = math.sqrt((1 + 1 / w) * lim2 + params.drift_per_day / w)
        new_sig = math.sqrt(sig * sig + w * lim2 + params.drift_per_day * days)
        mu[i] = m
        var[i] = new_sig**2 + beta**2
        diffused.append((new_sig, beta))
    # the joint Gaussian of the members' performances and the team sums P = A p
    cov = np.diag(var)
    sums = np.zeros((nteams, n))
    sums[np.asarray(team_of), np.arange(n)] = omega
    team_mu = sums @ mu
    team_cov = sums @ cov @ sums.T
    team_s = np.sqrt(np.diag(team_cov))
    rk = np.asarray(team_ranks, dtype=np.int64)
    perf_of_rank: dict[int, float] = {}
    for r in sorted(set(rk.tolist())):
        rel = np.sign(rk - r).astype(np.float64)

        def f(x: float, rel: FloatArray = rel) -> float:
            return _gaussian_terms(x, team_mu, team_s, rel, params.split_ties)

        perf_of_rank[r] = illinois(f, -6000.0, 9000.0)
    team_perfs = np.array([perf_of_rank[int(r)] for r in rk])
    # E[p | A p = P] = μ + Σ Aᵀ (A Σ Aᵀ)⁻¹ (P − A μ)
    perfs = mu + cov @ sums.T @ np.linalg.solve(team_cov, team_perfs - team_mu)
    perfs = np.minimum(perfs, perf_ceiling)
    out: list[FloatArray] = []
    for i, b in enumerate(beliefs):
        new_sig, beta = diffused[i]
        nw, wp = new_sig**-2, beta**-2
        new_mu = (nw * mu[i] + wp * float(perfs[i])) / (nw + wp)
        rounds, last = float(b[4]), float(b[5])
        head = [new_mu, (nw + wp) ** -0.5, new_mu, nw + wp, rounds + 1,
                max(float(time_ms), last) if rounds > 0 else float(time_ms)]
        out.append(np.array(head))
    return out, perfs, team_perfs
