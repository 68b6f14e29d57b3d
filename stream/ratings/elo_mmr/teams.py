"""numba kernel of one team round of Elo-MMχ or Elo-MMR (the derivation is docs/teams.md).

Member i of team t, after the usual diffusion, has performance ``p_i ~ N(μ_i, v_i)`` with
``v_i = σ_i² + β_i²`` (``pre[i, 4]`` and ``pre[i, 5]²`` of ``_elo_mmr_kernels._prepare``),
independent of everyone else's. A team performs ``P_t = Σ_{i∈t} ω_i·p_i`` (ω_i: the part of
the round i played), so ``P_t ~ N(M_t, V_t)`` with ``M_t = Σ ω_i·μ_i``, ``V_t = Σ ω_i²·v_i``.
The teams' performances are solved by the individual system's performance solve with the
teams as its players; each member's performance is then the conditional expectation
``E[p_i | P_t] = μ_i + ω_i·v_i/V_t · (P_t − M_t)``, and each member's belief gets the
individual system's update with it.

Elo-MMR (logistic) uses the same steps with logistic terms of the same means and variances
(the proposal of docs/teams.md) and adds each member's performance to their logistic history.

With ``exact_sigma`` (the parameter ``team_exact_sigma``, on by default), each member is instead
updated as a player who performed ``μ_i + (P_t − M_t)/ω_i`` with noise ``β_i² + R_i/ω_i²`` (``R_i`` the other
members' performance variance, ``V_t − ω_i² v_i``): for Elo-MMχ the same new μ and the exact
conditional variance ``σ_i² − ω_i² σ_i⁴ / V_t`` as new σ² (docs/teams.md); for Elo-MMR a
history term of that centre and scale.

A team of one member with ω = 1 takes the individual system's numbers themselves (its centre
``μ_i``, its scale ``pre[i, 5]`` and its performance ``P_t``), so a round of such teams is
bit for bit the individual round.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numba as nb
import numpy as np

from stream.ratings.elo_mmr import kernels as K


@nb.njit(cache=True, nogil=True)
def team_terms(pre, team_of, player_weights, nteams: int):
    """Each team's performance centre ``M_t``, variance ``V_t`` and scale ``√V_t``."""
    tmu = np.zeros(nteams)
    tvar = np.zeros(nteams)
    size = np.zeros(nteams, dtype=np.int64)
    for i in range(team_of.shape[0]):
        t = team_of[i]
        w = player_weights[i]
        tmu[t] += w * pre[i, 4]
        tvar[t] += w * w * (pre[i, 5] * pre[i, 5])
        size[t] += 1
    tscale = np.sqrt(tvar)
    for i in range(team_of.shape[0]):
        t = team_of[i]
        if size[t] == 1 and player_weights[i] == 1.0:  # the individual system's own numbers
            tmu[t] = pre[i, 4]
            tscale[t] = pre[i, 5]
    return tmu, tvar, tscale, size


@nb.njit(cache=True, nogil=True)
def member_performances(pre, team_of, player_weights, tmu, tvar, size, team_perfs, perf_ceiling: float):
    """``E[p_i | P_t = team_perfs[t]]`` for every member (capped at ``perf_ceiling``)."""
    n = team_of.shape[0]
    perfs = np.empty(n)
    for i in range(n):
        t = team_of[i]
        w = player_weights[i]
        if size[t] == 1 and w == 1.0:
            p = team_perfs[t]
        else:
            share = w * (pre[i, 5] * pre[i, 5]) / tvar[t]
            p = pre[i, 4] + share * (team_perfs[t] - tmu[t])
        perfs[i] = min(p, perf_ceiling)
    return perfs


@nb.njit(cache=True, nogil=True)
def exact_sigma_terms(pre, team_of, player_weights, tmu, tvar, size, team_perfs, perf_ceiling: float):
    """The members' observations of the ``exact_sigma`` update: a copy of ``pre`` whose
    performance noise (column 3) is ``√(β_i² + R_i/ω_i²)``, and the observed performances
    ``μ_i + (P_t − M_t)/ω_i`` (capped). Teams of one with ω = 1 keep their own numbers."""
    n = team_of.shape[0]
    pre2 = pre.copy()
    obs = np.empty(n)
    for i in range(n):
        t = team_of[i]
        w = player_weights[i]
        if size[t] == 1 and w == 1.0:
            obs[i] = min(team_perfs[t], perf_ceiling)
            continue
        rest = max(tvar[t] - w * w * (pre[i, 5] * pre[i, 5]), 0.0)
        pre2[i, 3] = math.sqrt(pre[i, 3] * pre[i, 3] + rest / (w * w))
        obs[i] = min(pre[i, 4] + (team_perfs[t] - tmu[t]) / w, perf_ceiling)
    return pre2, obs


@nb.njit(cache=True, nogil=True)
def rate_team_round_flat(flat, offsets, team_of, team_ranks, player_weights, time_ms: float, weight: float,
                         perf_ceiling: float, weight_limit: float, noob_delay, sig_limit: float,
                         drift_per_day: float, rho: float, split: bool, gaussian: bool, history_limit: int,
                         exact_sigma: bool):
    """One team round: (new flat beliefs, new offsets, member performances, team performances,
    bad player), like ``_elo_mmr_kernels.rate_round_flat``. ``gaussian``: Elo-MMχ; else the
    logistic proposal of docs/teams.md (teams' terms logistic of the same variance, members'
    performances added to their logistic histories)."""
    bad = K._first_non_finite(flat, offsets)
    if bad >= 0:
        return np.empty(0), np.zeros(1, dtype=np.int64), np.empty(0), np.empty(0), bad
    collapse = gaussian or math.isinf(rho)
    pre = K.prepare_weighted(flat, offsets, time_ms, weight, player_weights, weight_limit, noob_delay, sig_limit,
                             drift_per_day, rho, collapse)
    nteams = team_ranks.shape[0]
    tmu, tvar, tscale, size = team_terms(pre, team_of, player_weights, nteams)
    order, gstart = K._groups(team_ranks)
    perf_g = K.solve_performances(tmu[order], tscale[order], gstart, gaussian, split)
    team_perfs = np.empty(nteams)
    for g in range(gstart.shape[0] - 1):
        for q in range(gstart[g], gstart[g + 1]):
            team_perfs[order[q]] = perf_g[g]
    perfs = member_performances(pre, team_of, player_weights, tmu, tvar, size, team_perfs, perf_ceiling)
    n = team_of.shape[0]
    lengths = K._new_lengths(offsets, collapse, gaussian, history_limit)
    out_offsets = np.empty(n + 1, dtype=np.int64)
    out_offsets[0] = 0
    for i in range(n):
        out_offsets[i + 1] = out_offsets[i] + lengths[i]
    out = np.empty(out_offsets[n])
    if exact_sigma:
        pre2, obs = exact_sigma_terms(pre, team_of, player_weights, tmu, tvar, size, team_perfs, perf_ceiling)
        K._finish(flat, offsets, pre2, obs, out, out_offsets, time_ms, gaussian, collapse, history_limit)
    else:
        K._finish(flat, offsets, pre, perfs, out, out_offsets, time_ms, gaussian, collapse, history_limit)
    return out, out_offsets, perfs, team_perfs, -1
