"""Plain dense-Gaussian oracle of a team round (docs/teams.md), for tests only.

Why it exists: the kernel in ``teams`` works member by member with the algebra already done.
This module does it the obvious way: the matrix A of the members' coefficients, the teams'
covariance (``A D Aᵀ``, plus the teams' own noise in the mean model), the members' skills
conditioned on the solved team performances with a matrix inverse, each member then updated by
the individual update that gives that Gaussian posterior (``naive``'s, term by term).
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
    team_shift: Sequence[float] | FloatArray | None = None,
) -> tuple[list[FloatArray], FloatArray, FloatArray]:
    """One team round: the new beliefs, every member's performance and every team's."""
    n = len(beliefs)
    nteams = len(team_ranks)
    omega = np.ones(n) if player_weights is None else np.asarray(player_weights, dtype=np.float64)
    shift = np.zeros(nteams) if team_shift is None else np.asarray(team_shift, dtype=np.float64)
    pre = [diffuse_naive(b, time_ms, params, gaussian, weight * float(w)) for b, w in zip(beliefs, omega, strict=True)]
    mu = np.array([float(b[0]) for b in beliefs])  # members' skill means
    sig2 = np.array([d[0] ** 2 for d in pre])  # skill variances σ'²
    beta2 = np.array([d[3] ** 2 for d in pre])  # performance noise β²
    t_of = np.asarray(team_of)
    if getattr(params, "team_performance", "sum") == "mean":
        # P = A s + ε: A[t, i] = ω_i / Σ_{j∈t} ω_j, ε_t ~ N(0, 1/Σ_i A[t, i]/β_i²), one noise a team
        sums = np.zeros((nteams, n))
        sums[t_of, np.arange(n)] = omega
        sums /= sums.sum(axis=1, keepdims=True)
        cov_s = np.diag(sig2)  # the members' skills
        team_cov = sums @ cov_s @ sums.T + np.diag(1.0 / (sums @ (1.0 / beta2)))
        cross = cov_s @ sums.T  # Cov(s, P)
    else:
        # P = A p: the members' performances p_i ~ N(μ_i, σ'² + β²), A[t, i] = ω_i
        sums = np.zeros((nteams, n))
        sums[t_of, np.arange(n)] = omega
        cov_p = np.diag(sig2 + beta2)
        team_cov = sums @ cov_p @ sums.T
        cross = np.diag(sig2) @ sums.T  # Cov(s, P): a member's noise is not part of its skill
    team_mu = sums @ mu + shift
    rk = np.asarray(team_ranks, dtype=np.int64)
    perf_of_rank = solve_naive(team_mu, np.sqrt(np.diag(team_cov)), rk, gaussian, params.split_ties)
    team_perfs = np.array([perf_of_rank[int(r)] for r in rk])
    # the skills' Gaussian posterior given the teams' performances
    gain = cross @ np.linalg.inv(team_cov)
    post_mu = mu + gain @ (team_perfs - team_mu)
    post_var = sig2 - np.einsum("ij,ij->i", gain, cross)
    # the individual update's (performance, noise) that gives this posterior: the noise b² with
    # 1/post_var = 1/σ'² + 1/b², the performance p with post_mu = μ + σ'²/(σ'² + b²)·(p − μ)
    exact = bool(getattr(params, "team_exact_sigma", False))
    noise2 = 1.0 / (1.0 / post_var - 1.0 / sig2) if exact else beta2
    perfs = np.minimum(mu + (sig2 + beta2) / sig2 * (post_mu - mu), perf_ceiling)
    obs = np.minimum(mu + (sig2 + noise2) / sig2 * (post_mu - mu), perf_ceiling)
    out = []
    for i, (b, d) in enumerate(zip(beliefs, pre, strict=True)):
        out.append(update_naive(b, (d[0], d[1], d[2], math.sqrt(noise2[i]), d[4], d[5]), float(obs[i]), time_ms,
                                params, gaussian))
    return out, perfs, team_perfs
