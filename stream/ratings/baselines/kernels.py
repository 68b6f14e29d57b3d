"""numba kernels shared by the baseline systems (Elo, Glicko, Codeforces, TopCoder, TrueSkill).

Why numba: the multiplayer baselines compare every pair of a round's participants (O(N²) per
round); numpy would need N×N temporaries (2 GB for the largest Codeforces round) and many passes,
while these loops keep one row in registers and run in parallel over players.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numba
import numpy as np
from numba import njit, prange

from stream.runtime import parallel_min_players

#: rounds of fewer players run ``logistic_row_sums`` on one thread (None: ``MMR_ELO_PARALLEL_MIN``, as
#: Elo-MMR's kernels; for a few players the start-up of numba's threads also costs more than the sums)
PARALLEL_MIN_PLAYERS: int | None = None


@njit(cache=True, nogil=True, parallel=True, fastmath=True)
def logistic_row_sums(r: np.ndarray, q: np.ndarray, scale: float) -> np.ndarray:
    """``out[i] = Σ_j 1 / (1 + 10^((q[i] − r[j]) / scale))``: expected number of the r's beating q[i]
    (with ``q`` = ``r`` the j = i term, 1/2, is included: callers subtract it)."""
    k = math.log(10.0) / scale
    out = np.empty(q.shape[0])
    for i in prange(q.shape[0]):
        qi = q[i]
        s = 0.0
        for j in range(r.shape[0]):
            s += 1.0 / (1.0 + math.exp(k * (qi - r[j])))
        out[i] = s
    return out


def logistic_rows(r: np.ndarray, q: np.ndarray, scale: float) -> np.ndarray:
    """``logistic_row_sums`` on one thread below ``PARALLEL_MIN_PLAYERS`` players (``len(r)``): the
    same kernel either way, so the same bits (each row is one thread's loop over j); a kernel
    compiled without ``parallel`` would not do, LLVM vectorising its inner sum in another order."""
    threads = numba.get_num_threads()
    limit = parallel_min_players() if PARALLEL_MIN_PLAYERS is None else PARALLEL_MIN_PLAYERS
    if r.shape[0] >= limit or threads == 1:
        return logistic_row_sums(r, q, scale)
    numba.set_num_threads(1)
    try:
        return logistic_row_sums(r, q, scale)
    finally:
        numba.set_num_threads(threads)


#: above this many pair terms ``logistic_sums`` interpolates instead of summing every pair
EXACT_PAIR_LIMIT = 4_000_000


def logistic_sums(r: np.ndarray, q: np.ndarray, scale: float, nodes: int = 512) -> np.ndarray:
    """``logistic_row_sums`` in O(nodes·N) above ``EXACT_PAIR_LIMIT`` pairs. Safe because
    ``F(x) = Σ_j 1/(1 + 10^((x − r_j)/scale))`` is ONE smooth function of x for the whole round: a
    cubic spline through ``nodes`` exact values is ~1e-4 expected wins off for the largest
    Codeforces round, far below anything the systems resolve."""
    if r.shape[0] * q.shape[0] <= EXACT_PAIR_LIMIT:
        return logistic_rows(r, q, scale)
    from scipy.interpolate import CubicSpline

    lo, hi = float(q.min()), float(q.max())
    if hi - lo < 1e-9:
        return np.full(q.shape[0], logistic_rows(r, q[:1], scale)[0])
    xs = np.linspace(lo, hi, nodes)
    return np.asarray(CubicSpline(xs, logistic_rows(r, xs, scale))(q), dtype=np.float64)


@njit(cache=True, nogil=True, parallel=True, fastmath=True)
def glicko_row_sums(r: np.ndarray, rd: np.ndarray, score_rank: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Glicko sums of one rating period where every participant played every other (``score_rank``:
    lower = better, equal = draw): per player ``Σ_j g_j² E_ij (1 − E_ij)`` and ``Σ_j g_j (s_ij − E_ij)``."""
    q = math.log(10.0) / 400.0
    n = r.shape[0]
    g = np.empty(n)
    for j in range(n):
        g[j] = 1.0 / math.sqrt(1.0 + 3.0 * q * q * rd[j] * rd[j] / (math.pi * math.pi))
    dsum = np.empty(n)
    vsum = np.empty(n)
    for i in prange(n):
        a = 0.0
        b = 0.0
        for j in range(n):
            if j == i:
                continue
            e = 1.0 / (1.0 + math.exp(-g[j] * q * (r[i] - r[j])))
            s = 1.0 if score_rank[i] < score_rank[j] else (0.0 if score_rank[i] > score_rank[j] else 0.5)
            a += g[j] * g[j] * e * (1.0 - e)
            b += g[j] * (s - e)
        dsum[i] = a
        vsum[i] = b
    return dsum, vsum


@njit(cache=True, nogil=True, parallel=True, fastmath=True)
def topcoder_expected_ranks(r: np.ndarray, vol: np.ndarray) -> np.ndarray:
    """TopCoder ``ERank_i = 0.5 + Σ_j WP(j beats i)``, ``WP = Φ((R_j − R_i)/√(V_i² + V_j²))``, over all
    coders (the j = i term adds 1/2, as published)."""
    n = r.shape[0]
    out = np.empty(n)
    for i in prange(n):
        s = 0.5
        vi = vol[i] * vol[i]
        for j in range(n):
            s += 0.5 * (math.erf((r[j] - r[i]) / math.sqrt(2.0 * (vi + vol[j] * vol[j]))) + 1.0)
        out[i] = s
    return out


@njit(cache=True, nogil=True)
def _phi(x: float) -> float:
    return math.exp(-0.5 * x * x) / math.sqrt(2.0 * math.pi)


@njit(cache=True, nogil=True)
def _cdf(x: float) -> float:
    return 0.5 * math.erfc(-x / math.sqrt(2.0))


@njit(cache=True, nogil=True)
def _clip_unit(w: float) -> float:
    """``w`` clipped to [0, 1] (a NaN stays NaN): the variance factor of a truncated Gaussian, which
    rounding can push just outside."""
    if w > 1.0:
        w = 1.0
    if w < 0.0:
        w = 0.0
    return w


@njit(cache=True, nogil=True)
def _v_w_win(t: float, e: float) -> tuple[float, float]:
    """Additive/multiplicative corrections of a Gaussian truncated to d > ε (TrueSkill's v, w).

    Deep in the lower tail (x = t − ε < −30) ``Φ(x)`` underflows and ``v + x`` cancels, so
    the Mills-ratio series is used: with u = −x, ``Φ(−u) = φ(u)/u · (1 − a)``,
    ``a = 1/u² − 3/u⁴ + 15/u⁶ − 105/u⁸``, hence ``v = u/(1 − a)``, ``v − u = u·a/(1 − a)``.
    Without it, w collapses to 0 (no variance reduction) or 1 (infinite precision) and EP
    on long chains (rounds of thousands of players) converges to garbage.
    """
    x = t - e
    if x < -30.0:
        u = -x
        u2 = 1.0 / (u * u)
        a = u2 * (1.0 - u2 * (3.0 - u2 * (15.0 - 105.0 * u2)))
        v = u / (1.0 - a)
        w = v * (u * a / (1.0 - a))
    else:
        v = _phi(x) / _cdf(x)
        w = v * (v + x)
    return v, _clip_unit(w)


@njit(cache=True, nogil=True)
def _v_w_draw(t: float, e: float) -> tuple[float, float]:
    """Corrections of a Gaussian truncated to |d| ≤ ε (a draw)."""
    at = abs(t)
    den = _cdf(e - at) - _cdf(-e - at)
    if den < 2.2e-162:
        v = -at + e if at > 0 else 0.0
        w = 1.0
    else:
        v = (_phi(-e - at) - _phi(e - at)) / den
        w = v * v + ((e - at) * _phi(e - at) + (e + at) * _phi(e + at)) / den
    if t < 0:
        v = -v
    return v, _clip_unit(w)


@njit(cache=True, nogil=True)
def trueskill_chain(
    mu: np.ndarray, var: np.ndarray, tie: np.ndarray, eps: np.ndarray, tol: float, max_iter: int
) -> tuple[np.ndarray, np.ndarray]:
    """Expectation propagation on TrueSkill's ranking chain (of players, or of teams), sorted best
    first: performance ``p_k ~ N(mu[k], var[k])``, difference factors ``d_k = p_k − p_{k+1}``
    truncated to ``d_k > eps[k]`` or, when ``tie[k]``, to ``|d_k| ≤ eps[k]``. Sweeps forward then
    backward (the schedule of Herbrich et al. and of the ``trueskill`` package) until no truncation
    message moves by more than ``tol`` (scale-free). Returns the natural parameters (π, τ) of the
    likelihood each performance receives from the chain."""
    n = mu.shape[0]
    # messages from difference factor k to p_k (down) and to p_{k+1} (up), natural params
    lo_pi = np.zeros(n)  # message from factor k−1 into p_k (player k is the loser side)
    lo_tau = np.zeros(n)
    hi_pi = np.zeros(n)  # message from factor k into p_k (player k is the winner side)
    hi_tau = np.zeros(n)
    tr_pi = np.zeros(max(n - 1, 0))  # truncation-factor messages into d_k
    tr_tau = np.zeros(max(n - 1, 0))
    prior_pi = 1.0 / var
    prior_tau = mu / var
    for _it in range(max_iter):
        delta = 0.0
        for sweep in range(2):
            for kk in range(n - 1):
                k = kk if sweep == 0 else n - 2 - kk
                # cavities of p_k and p_{k+1} without factor k's messages
                a_pi = prior_pi[k] + lo_pi[k]
                a_tau = prior_tau[k] + lo_tau[k]
                b_pi = prior_pi[k + 1] + hi_pi[k + 1]
                b_tau = prior_tau[k + 1] + hi_tau[k + 1]
                a_m, a_v = a_tau / a_pi, 1.0 / a_pi
                b_m, b_v = b_tau / b_pi, 1.0 / b_pi
                # sum factor → d_k
                c_m = a_m - b_m
                c_v = a_v + b_v
                s = math.sqrt(c_v)
                if tie[k]:
                    v, w = _v_w_draw(c_m / s, eps[k] / s)
                else:
                    v, w = _v_w_win(c_m / s, eps[k] / s)
                w = min(max(w, 0.0), 1.0 - 1e-12)
                post_v = c_v * (1.0 - w)
                post_m = c_m + s * v
                new_pi = 1.0 / post_v - 1.0 / c_v
                new_tau = post_m / post_v - c_m / c_v
                # scale-free change: precision in units of the cavity's, mean-precision in its sd
                change = abs(new_pi - tr_pi[k]) * c_v + abs(new_tau - tr_tau[k]) * s
                if change > delta:
                    delta = change
                tr_pi[k] = new_pi
                tr_tau[k] = new_tau
                if new_pi <= 0.0:
                    continue
                # d_k message back through the sum factor: p_k = d_k + p_{k+1}, p_{k+1} = p_k − d_k
                d_m, d_v = new_tau / new_pi, 1.0 / new_pi
                hv = d_v + b_v
                hi_pi[k] = 1.0 / hv
                hi_tau[k] = (d_m + b_m) / hv
                lv = d_v + a_v
                lo_pi[k + 1] = 1.0 / lv
                lo_tau[k + 1] = (a_m - d_m) / lv
        if delta < tol:
            break
    return lo_pi + hi_pi, lo_tau + hi_tau


@njit(cache=True, nogil=True)
def pair_discordance(actual: np.ndarray, pred: np.ndarray) -> tuple[float, float]:
    """Pair inversions of one round in O(N log N) (Fenwick tree over predicted ranks): ``actual``
    outcome ranks (lower = better) sorted ascending, ``pred`` dense predicted keys (higher =
    better) 0..K−1 in the same order. ``(wrong, pairs)``: a pair is wrong when the worse finisher
    was predicted strictly better, half wrong when both were predicted equal; pairs tied in the
    outcome count as correct (in ``pairs``, never in ``wrong``)."""
    n = actual.shape[0]
    k = 0
    for i in range(n):
        if pred[i] + 1 > k:
            k = pred[i] + 1
    tree = np.zeros(k + 1, dtype=np.int64)
    wrong = 0.0
    start = 0
    while start < n:
        end = start
        while end < n and actual[end] == actual[start]:
            end += 1
        for i in range(start, end):
            # count inserted (strictly better finishers) with pred < pred[i] and pred == pred[i]
            less = 0
            x = pred[i]  # prefix [0, pred[i]) → indices 1..pred[i]
            while x > 0:
                less += tree[x]
                x -= x & (-x)
            leq = 0
            x = pred[i] + 1
            while x > 0:
                leq += tree[x]
                x -= x & (-x)
            # better finisher j predicted below i: inserted with pred_j < pred_i → wrong
            wrong += less + 0.5 * (leq - less)
        for i in range(start, end):
            x = pred[i] + 1
            while x <= k:
                tree[x] += 1
                x += x & (-x)
        start = end
    pairs = n * (n - 1) / 2.0
    return wrong, pairs


@njit(cache=True, nogil=True)
def elo_match_steps(r: np.ndarray, cnt: np.ndarray, a: np.ndarray, b: np.ndarray, scores: np.ndarray,
                    k: float, scale: float, shifts: np.ndarray) -> None:
    """Sequential Elo steps over a batch of matches, in place, A of match j shifted by ``shifts[j]``;
    no fastmath: the same bits as the plain loop of tests/unit/ratings/baselines/test_baselines.py."""
    for j in range(a.shape[0]):
        ia = a[j]
        ib = b[j]
        h = shifts[j]
        e = 1.0 / (1.0 + 10.0 ** ((r[ib] - (r[ia] + h if h != 0.0 else r[ia])) / scale))
        d = k * (scores[j] - e)
        r[ia] += d
        r[ib] -= d
        cnt[ia] += 1.0
        cnt[ib] += 1.0
