"""Plain O(N²) oracle of Elo-MMR / Elo-MMχ (paper Algorithms 1–3): what the tests and ``mmr bench`` compare with.

Why it exists: the kernels solve every performance equation against a piecewise Chebyshev
interpolant, which is clever and therefore suspect. This module does the same mathematics the
obvious way (each equation summed term by term over all opponents, solved by a bracketed
Illinois iteration, once per distinct rank) on the belief layout of ``system``.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]

TANH_MULTIPLIER = math.pi / math.sqrt(3.0)
MS_PER_DAY = 86_400_000.0
HEADER = 6  # mu, sigma, gaussian centre, gaussian weight, rounds, last time (ms)
_erfc = np.vectorize(math.erfc, otypes=[np.float64])


def illinois(f: Callable[[float], float], lo: float, hi: float) -> float:
    """Root of a decreasing ``f`` on ``[lo, hi]`` (widening the bracket if needed)."""
    flo, fhi = f(lo), f(hi)
    while flo < 0:
        lo -= 1000.0
        flo = f(lo)
    while fhi > 0:
        hi += 1000.0
        fhi = f(hi)
    side = 0
    for _ in range(300):
        if flo == 0:
            return lo
        if fhi == 0:
            return hi
        x = (lo * fhi - hi * flo) / (fhi - flo)
        if not lo < x < hi:
            x = 0.5 * (lo + hi)
        fx = f(x)
        if fx > 0:
            lo, flo = x, fx
            if side == 1:
                fhi *= 0.5
            side = 1
        else:
            hi, fhi = x, fx
            if side == -1:
                flo *= 0.5
            side = -1
        if hi - lo <= 1e-12 * max(1.0, abs(lo)):
            break
    return 0.5 * (lo + hi)


def _weight(params: Any, round_weight: float, rounds: int) -> float:
    w = params.weight_limit * round_weight
    if rounds < len(params.noob_delay):
        w *= params.noob_delay[rounds]
    return float(w)


def _logistic_terms(x: float, mu: FloatArray, s: FloatArray, rel: FloatArray, split: bool) -> float:
    """Σ_j of the reference's tanh terms; rel = -1 (j better), 0 (tie), +1 (j worse)."""
    w = TANH_MULTIPLIER / s
    v = -np.tanh((x - mu) * w * 0.5) * w
    val = np.where(rel < 0, v - w, np.where(rel > 0, v + w, v if split else 2.0 * v))
    return float(np.sum(val))


def _inv_mills(t: FloatArray) -> FloatArray:
    """φ(t)/(1 − Φ(t)) elementwise; past t = 30 (erfc underflows) the asymptotic series."""
    safe = np.minimum(t, 30.0)
    direct = np.exp(-0.5 * safe * safe) / math.sqrt(2.0 * math.pi) / (0.5 * _erfc(safe / math.sqrt(2.0)))
    big = np.maximum(t, 30.0)
    u = 1.0 / (big * big)
    series = big / (1.0 - u + 3.0 * u**2 - 15.0 * u**3 + 105.0 * u**4)
    return np.asarray(np.where(t < 30.0, direct, series), dtype=np.float64)


def _gaussian_terms(x: float, mu: FloatArray, s: FloatArray, rel: FloatArray, split: bool) -> float:
    """Σ_j of the Gaussian (Elo-MMχ) terms: d/dx log of P(outcome vs j | performance x).

    Opponent ranked worse: φ(z)/Φ(z)/s; better: −φ(z)/(1 − Φ(z))/s; tied: −z/s (or the
    mean of the two when ties are split), z = (x − μ_j)/s_j.
    """
    z = (x - mu) / s
    greater = _inv_mills(-z) / s
    less = -_inv_mills(z) / s
    equal = 0.5 * (less + greater) if split else -z / s
    return float(np.sum(np.where(rel < 0, less, np.where(rel > 0, greater, equal))))


def robust_average(offset: float, slope: float, terms: FloatArray) -> float:
    """Zero of ``offset + slope·x + Σ w_out·tanh((x − c)·w_arg)`` (increasing in x)."""
    c, wa, wo = terms[:, 0], terms[:, 1], terms[:, 2]

    def f(x: float) -> float:
        return -(offset + slope * x + float(np.sum(wo * np.tanh((x - c) * wa))))

    centres = [*c.tolist(), -offset / slope]
    return illinois(f, min(centres) - 1.0, max(centres) + 1.0)


Diffused = tuple[float, float, float, float, FloatArray, float]
"""A belief after the diffusion of a round: (σ, Gaussian centre, Gaussian weight, σ_perf, logistic terms, rounds)."""


def diffuse_naive(b: FloatArray, time_ms: int, params: Any, gaussian: bool, weight: float) -> Diffused:
    """One belief diffused for a round of weight ``weight`` (Alg. 2 / §4 of the paper)."""
    lim2 = params.sig_limit**2
    mu, sig, nmu, nw, rounds, last = (float(v) for v in b[:HEADER])
    terms = np.array(b[HEADER:], dtype=np.float64).reshape(-1, 3)
    w = _weight(params, weight, int(rounds))
    days = max(0.0, (time_ms - last) / MS_PER_DAY) if rounds > 0 else 0.0
    sig_perf = math.sqrt((1 + 1 / w) * lim2 + params.drift_per_day / w)
    new_sig = math.sqrt(sig * sig + w * lim2 + params.drift_per_day * days)
    if gaussian or math.isinf(params.rho):
        nmu, nw, terms = mu, new_sig**-2, terms[:0]
    else:
        decay = (sig / new_sig) ** 2
        transfer = decay**params.rho
        tw = float(np.sum(terms[:, 1] * terms[:, 2])) * 2 / TANH_MULTIPLIER**2
        from_old = transfer * nw
        from_transfers = (1 - transfer) * (nw + tw)
        total = from_old + from_transfers
        nmu = (from_old * nmu + from_transfers * mu) / total
        nw = decay * total
        terms = terms.copy()
        terms[:, 2] *= transfer * decay
    return new_sig, nmu, nw, sig_perf, terms, rounds


def update_naive(b: FloatArray, pre: Diffused, p: float, time_ms: int, params: Any, gaussian: bool) -> FloatArray:
    """The belief ``b`` after a round where it performed ``p`` (``pre``: its diffusion; Alg. 3)."""
    new_sig, nmu, nw, sig_perf, terms, rounds = pre
    last = float(b[5])
    wp = sig_perf**-2
    if gaussian:
        nmu = (nw * nmu + wp * p) / (nw + wp)
        nw = nw + wp
        mu = nmu
    else:
        limit = params.history_limit
        while limit > 0 and len(terms) + 1 > limit:
            c, wa, wo = terms[0]
            wl = wa * wo * 2 / TANH_MULTIPLIER**2
            nmu = (nw * nmu + wl * c) / (nw + wl)
            nw = nw + wl
            terms = terms[1:]
        wt = TANH_MULTIPLIER / sig_perf
        terms = np.vstack([terms, [[p, 0.5 * wt, wt]]])
        mu = robust_average(-nmu * nw, nw, terms)
    sig = (new_sig**-2 + wp) ** -0.5
    head = [mu, sig, nmu, nw, rounds + 1, max(float(time_ms), last) if rounds > 0 else float(time_ms)]
    return np.concatenate([np.array(head), terms.reshape(-1)])


def solve_naive(term_mu: FloatArray, term_s: FloatArray, ranks: npt.NDArray[np.int64], gaussian: bool,
                split: bool) -> dict[int, float]:
    """The performance of each distinct rank, each equation summed term by term over everybody."""
    perf_of_rank: dict[int, float] = {}
    evaluate = _gaussian_terms if gaussian else _logistic_terms
    for r in sorted(set(ranks.tolist())):
        rel = np.sign(ranks - r).astype(np.float64)

        def f(x: float, rel: FloatArray = rel) -> float:
            return evaluate(x, term_mu, term_s, rel, split)

        perf_of_rank[r] = illinois(f, -6000.0, 9000.0)
    return perf_of_rank


def rate_round_naive(
    beliefs: Sequence[FloatArray],
    ranks: Sequence[int] | npt.NDArray[np.integer[Any]],
    time_ms: int,
    params: Any,
    gaussian: bool = False,
    weight: float = 1.0,
    perf_ceiling: float = math.inf,
) -> tuple[list[FloatArray], FloatArray]:
    """One round; returns the new beliefs and every player's performance."""
    rk = np.asarray(ranks, dtype=np.int64)
    pre = [diffuse_naive(b, time_ms, params, gaussian, weight) for b in beliefs]
    term_mu = np.array([float(b[0]) for b in beliefs])
    term_s = np.array([math.hypot(d[0], d[3]) for d in pre])
    perf_of_rank = solve_naive(term_mu, term_s, rk, gaussian, params.split_ties)
    perfs = np.array([min(perf_of_rank[int(r)], perf_ceiling) for r in rk])
    out = [update_naive(b, d, float(p), time_ms, params, gaussian) for b, d, p in zip(beliefs, pre, perfs, strict=True)]
    return out, perfs
