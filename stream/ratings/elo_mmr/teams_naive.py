"""Plain dense-Gaussian oracle of a team round (docs/teams.md), for tests only.

Why it exists: the kernel in ``_elo_mmr_teams`` works member by member with the algebra
already done (a team's variance as a running sum, a member's share as one ratio). This
module does it the obvious way: it builds the joint covariance of every member's
performance, the matrix of team sums, the teams' covariance ``A Σ Aᵀ``, and conditions the
members' performances on the solved team performances with a linear solve. Diffusion, the
teams' performance equations and the members' updates are ``_elo_mmr_naive``'s, term by
term. Nothing here is fast.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from stream.ratings.elo_mmr.naive import diffuse_naive, solve_naive, update_naive

FloatArray = npt.NDArray[np.float64]


def rate_team_round_naive(
    beliefs: Sequence[FloatArray],
    team_of: Sequence[int],
    team_ranks: Sequence[int],
    time_ms: int,
    params: Any,
    gaussian: bool = True,
    weight: float = 1.0,
    perf_ceiling: float = math.inf,
    player_weights: Sequence[float] | FloatArray | None = None,
) -> tuple[list[FloatArray], FloatArray, FloatArray]:
    """One team round: the new beliefs, every member's performance and every team's."""
    n = len(beliefs)
    omega = np.ones(n) if player_weights is None else np.asarray(player_weights, dtype=np.float64)
    pre = [diffuse_naive(b, time_ms, params, gaussian, weight * float(w)) for b, w in zip(beliefs, omega, strict=True)]
    mu = np.array([float(b[0]) for b in beliefs])  # members' performance means
    var = np.array([d[0] ** 2 + d[3] ** 2 for d in pre])  # and variances σ'² + β²
    # the joint covariance of the members' performances and the team sums P = A p
    cov = np.diag(var)
    sums = np.zeros((len(team_ranks), n))
    sums[np.asarray(team_of), np.arange(n)] = omega
    team_mu = sums @ mu
    team_cov = sums @ cov @ sums.T
    rk = np.asarray(team_ranks, dtype=np.int64)
    perf_of_rank = solve_naive(team_mu, np.sqrt(np.diag(team_cov)), rk, gaussian, params.split_ties)
    team_perfs = np.array([perf_of_rank[int(r)] for r in rk])
    # E[p | A p = P] = μ + Σ Aᵀ (A Σ Aᵀ)⁻¹ (P − A μ)
    perfs = np.minimum(mu + cov @ sums.T @ np.linalg.solve(team_cov, team_perfs - team_mu), perf_ceiling)
    if not getattr(params, "team_exact_sigma", False):
        out = [update_naive(b, d, float(p), time_ms, params, gaussian)
               for b, d, p in zip(beliefs, pre, perfs, strict=True)]
        return out, perfs, team_perfs
    # team_exact_sigma: member i observed as μ_i + (P_t − M_t)/ω_i with noise β_i² + (V_t − ω_i² v_i)/ω_i²
    t_of = np.asarray(team_of)
    team_var = np.diag(team_cov)[t_of]
    obs = np.minimum(mu + (team_perfs - team_mu)[t_of] / omega, perf_ceiling)
    out = []
    for i, (b, d) in enumerate(zip(beliefs, pre, strict=True)):
        beta2 = d[3] ** 2 + max(team_var[i] - omega[i] ** 2 * var[i], 0.0) / omega[i] ** 2
        out.append(update_naive(b, (d[0], d[1], d[2], math.sqrt(beta2), d[4], d[5]), float(obs[i]), time_ms, params,
                                gaussian))
    return out, perfs, team_perfs
