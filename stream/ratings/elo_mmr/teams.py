"""numba kernel of one team round of Elo-MMχ or Elo-MMR (the model and its derivation: docs/teams.md).

Member i of team t, after the usual diffusion, has skill ``s_i ~ N(μ_i, σ_i²)`` (``pre[i, 4]``,
``pre[i, 0]``) and performance noise ``β_i²`` (``pre[i, 3]²``). Its coefficient in the team is
``a_i``: ``ω_i / Σ_{j∈t} ω_j`` in the default team model (``mean_model``: one noise per team) or
``ω_i`` in the sum model, so ``P_t ~ N(M_t, V_t)``, ``M_t = Σ a_i μ_i + shift_t`` (the side's
advantage). The teams' performances are solved by the individual solve with the teams as players;
each member's performance is the linear estimate ``μ_i + a_i·v_i/V_t · (P_t − M_t)``
(``v_i = σ_i² + β_i²``), or with ``exact_sigma`` the member is observed at ``μ_i + (P_t − M_t)/a_i``
with noise ``(V_t − a_i² σ_i²)/a_i²``, then updated by the individual system.

A team of one member with ``a = 1`` takes the individual system's own numbers (centre ``μ_i``,
scale ``pre[i, 5]``, performance ``P_t − shift_t``), so a round of such teams is bit for bit the
individual round.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numba as nb
import numpy as np

from stream.ratings.elo_mmr import kernels as K


@nb.njit(cache=True, nogil=True)
def member_coefficients(team_of, player_weights, nteams: int, mean_model: bool):
    """Each member's coefficient ``a_i`` in its team's performance (module docstring)."""
    if not mean_model:
        return player_weights.copy()
    total = np.zeros(nteams)
    for i in range(team_of.shape[0]):
        total[team_of[i]] += player_weights[i]
    coef = np.empty(team_of.shape[0])
    for i in range(team_of.shape[0]):
        coef[i] = player_weights[i] / total[team_of[i]]
    return coef


@nb.njit(cache=True, nogil=True)
def team_terms(pre, team_of, coef, nteams: int, mean_model: bool, team_shift):
    """Each team's performance centre ``M_t`` (with its side's shift), variance ``V_t`` and
    scale ``√V_t``."""
    tmu = np.zeros(nteams)
    tvar = np.zeros(nteams)
    tprec = np.zeros(nteams)  # mean model: Σ a_i / β_i², the precision of the team's noise
    size = np.zeros(nteams, dtype=np.int64)
    for i in range(team_of.shape[0]):
        t = team_of[i]
        a = coef[i]
        tmu[t] += a * pre[i, 4]
        if mean_model:
            tvar[t] += a * a * (pre[i, 0] * pre[i, 0])
            tprec[t] += a / (pre[i, 3] * pre[i, 3])
        else:
            tvar[t] += a * a * (pre[i, 5] * pre[i, 5])
        size[t] += 1
    if mean_model:
        for t in range(nteams):
            tvar[t] += 1.0 / tprec[t]
    tscale = np.sqrt(tvar)
    for i in range(team_of.shape[0]):
        t = team_of[i]
        if size[t] == 1 and coef[i] == 1.0:  # the individual system's own numbers
            tmu[t] = pre[i, 4]
            tscale[t] = pre[i, 5]
    for t in range(nteams):
        if team_shift[t] != 0.0:  # (adding a zero would turn a centre of -0.0 into 0.0)
            tmu[t] += team_shift[t]
    return tmu, tvar, tscale, size


@nb.njit(cache=True, nogil=True)
def member_performances(pre, team_of, coef, tmu, tvar, size, team_perfs, team_shift, perf_ceiling: float):
    """Each member's performance given ``P_t = team_perfs[t]`` (capped at ``perf_ceiling``)."""
    n = team_of.shape[0]
    perfs = np.empty(n)
    for i in range(n):
        t = team_of[i]
        a = coef[i]
        if size[t] == 1 and a == 1.0:
            p = team_perfs[t] - team_shift[t] if team_shift[t] != 0.0 else team_perfs[t]
        else:
            share = a * (pre[i, 5] * pre[i, 5]) / tvar[t]
            p = pre[i, 4] + share * (team_perfs[t] - tmu[t])
        perfs[i] = min(p, perf_ceiling)
    return perfs


@nb.njit(cache=True, nogil=True)
def exact_sigma_terms(pre, team_of, coef, tmu, tvar, size, team_perfs, team_shift, perf_ceiling: float,
                      mean_model: bool):
    """The members' observations of the ``exact_sigma`` update: a copy of ``pre`` whose
    performance noise (column 3) is ``√((V_t − a_i² σ_i²)/a_i²)`` (the sum model's own spelling
    of it: ``√(β_i² + R_i/ω_i²)``, ``R_i = V_t − ω_i² v_i``), and the observed performances
    ``μ_i + (P_t − M_t)/a_i`` (capped). Teams of one with a = 1 keep their own numbers."""
    n = team_of.shape[0]
    pre2 = pre.copy()
    obs = np.empty(n)
    for i in range(n):
        t = team_of[i]
        a = coef[i]
        if size[t] == 1 and a == 1.0:
            perf = team_perfs[t] - team_shift[t] if team_shift[t] != 0.0 else team_perfs[t]
            obs[i] = min(perf, perf_ceiling)
            continue
        if mean_model:
            rest = max(tvar[t] - a * a * (pre[i, 0] * pre[i, 0]), 0.0)
            pre2[i, 3] = math.sqrt(rest) / a
        else:
            rest = max(tvar[t] - a * a * (pre[i, 5] * pre[i, 5]), 0.0)
            pre2[i, 3] = math.sqrt(pre[i, 3] * pre[i, 3] + rest / (a * a))
        obs[i] = min(pre[i, 4] + (team_perfs[t] - tmu[t]) / a, perf_ceiling)
    return pre2, obs


@nb.njit(cache=True, nogil=True)
def rate_team_round_flat(flat, offsets, team_of, team_ranks, player_weights, time_ms: float, weight: float,
                         perf_ceiling: float, weight_limit: float, noob_delay, sig_limit: float,
                         drift_per_day: float, rho: float, split: bool, gaussian: bool, history_limit: int,
                         exact_sigma: bool, mean_model: bool, team_shift):
    """One team round: (new flat beliefs, new offsets, member performances, team performances,
    bad player), like ``kernels.rate_round_flat``. ``gaussian``: Elo-MMχ; else the
    logistic proposal of docs/teams.md (teams' terms logistic of the same variance, members'
    performances added to their logistic histories). ``mean_model``: the team model of the
    parameter ``team_performance`` (module docstring); ``team_shift[t]``: the side advantage
    team t plays with (0 for none)."""
    bad = K._first_non_finite(flat, offsets)
    if bad >= 0:
        return np.empty(0), np.zeros(1, dtype=np.int64), np.empty(0), np.empty(0), bad
    collapse = gaussian or math.isinf(rho)
    pre = K.prepare_weighted(flat, offsets, time_ms, weight, player_weights, weight_limit, noob_delay, sig_limit,
                             drift_per_day, rho, collapse)
    nteams = team_ranks.shape[0]
    coef = member_coefficients(team_of, player_weights, nteams, mean_model)
    tmu, tvar, tscale, size = team_terms(pre, team_of, coef, nteams, mean_model, team_shift)
    order, gstart = K._groups(team_ranks)
    perf_g = K.solve_performances(tmu[order], tscale[order], gstart, gaussian, split)
    team_perfs = np.empty(nteams)
    for g in range(gstart.shape[0] - 1):
        for q in range(gstart[g], gstart[g + 1]):
            team_perfs[order[q]] = perf_g[g]
    perfs = member_performances(pre, team_of, coef, tmu, tvar, size, team_perfs, team_shift, perf_ceiling)
    out_offsets = K._out_offsets(offsets, collapse, gaussian, history_limit)
    out = np.empty(out_offsets[-1])
    if exact_sigma:
        pre2, obs = exact_sigma_terms(pre, team_of, coef, tmu, tvar, size, team_perfs, team_shift, perf_ceiling,
                                      mean_model)
        K._finish(flat, offsets, pre2, obs, out, out_offsets, time_ms, gaussian, collapse, history_limit)
    else:
        K._finish(flat, offsets, pre, perfs, out, out_offsets, time_ms, gaussian, collapse, history_limit)
    return out, out_offsets, perfs, team_perfs, -1
