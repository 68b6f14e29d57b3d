"""numba kernels of one Elo-MMR / Elo-MMχ round over structure-of-arrays beliefs.

Layout: ``flat`` is every player's belief concatenated, ``offsets[i]:offsets[i+1]`` player i's
(the belief layout: ``stream.ratings.elo_mmr.system``).

Why the performance phase is not O(N²)
--------------------------------------
Player i's performance p solves ``f_g(p) = 0`` where g is i's tie group and, with
``G_j`` / ``L_j`` / ``E_j`` the term of an opponent ranked worse / better / equal,

    f_g(x) = Σ_j G_j(x) + Σ_{j better than g} (L_j − G_j)(x) + Σ_{j in g} (E_j − G_j)(x).

All tied players share the equation, so there is one root per tie group, and the
roots are ordered by rank (paper, aligned incentives). First the extreme groups' roots
are bracketed with direct O(N) sums; [lo, hi] then holds every root and is cut into
panels.

*Logistic (Elo-MMR).* ``L_j − G_j = −2 w_j`` is a constant, so
``f_g(x) = T(x) + c_g (+ Σ_{j in g} v_j(x) unless ties are split)`` with ONE shared
monotone ``T(x) = −Σ_j w_j·tanh((x − μ_j)·w_j/2)`` and ``c_g`` = weight ranked worse −
weight ranked better (prefix sums). T is evaluated at the Chebyshev nodes of every panel
(O(nodes · N), parallel over nodes), turned into Chebyshev coefficients by a small DCT,
and each group solves its equation by Newton on the panel's series (Clenshaw for value
and derivative), its own tie-group sum being added exactly; the panel holding a root is
found by binary search on exact boundary values, and bisection guards every step.

*Gaussian (Elo-MMχ).* ``L_j − G_j`` is a genuine function, so each panel tabulates
``f_g`` at its nodes for all groups at once — ``Σ_j G_j`` per node, the better-ranked
part as a running prefix over groups, the tie part per group: still O(nodes · N) — and
each group's root is found by Illinois on the barycentric interpolant of its row.

Panels are at most ``2·h`` wide with ``h = PANEL_FRACTION`` × the distance from the real axis
to the nearest complex singularity of any term (√3·s for tanh, > 2.8·s for the Gaussian Mills
ratios, s the smallest term scale): 42 nodes per panel then interpolate to ~1e-16 of Σ w,
whatever the spread of ratings (accuracy against the naive oracle: ``system``'s docstring).

Root solvers are Newton steps guarded by a bracket and by rtsafe's rule (bisect unless the step
at least halves every other iteration): plain bracketed Newton cycles on tanh-shaped functions.
The parallel kernels must be called from one thread at a time (numba's workqueue layer is not
thread-safe). Their loops hand out chunks of work to the threads as they get free
(``stream.runtime.balanced``): a round's players differ in their terms, and the replay's reader
shares the cores.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numba as nb
import numpy as np

from stream.runtime.balanced import WORKERS, claim
from stream.runtime.copies import U64

TANH_MULTIPLIER = math.pi / math.sqrt(3.0)
MS_PER_DAY = 86_400_000.0
HEADER = 6
SQRT2 = math.sqrt(2.0)
INV_SQRT_2PI = 1.0 / math.sqrt(2.0 * math.pi)
#: Chebyshev degree per panel and panel half-width as a fraction of the singularity distance
PANEL_DEGREE = 42
PANEL_FRACTION = 1.3
#: items a chunk of the balanced loops (``stream.runtime.balanced``): enough work per chunk that
#: claiming it costs little beside it, small enough that the threads finish close together
GROUP_CHUNK = 16
PLAYER_CHUNK = 64
#: more panels than this (performances spread over ~10⁷ rating points: only from a corrupt stored
#: value such as μ = 10¹⁶) and every group's root is bisected instead: the panels' cost and memory
#: grow with the spread, bisection's only with the round
MAX_PANELS = 10_000


# ---- terms of the performance equation ---------------------------------------------------
#: the loops over a belief's terms index by unsigned integers (``stream.runtime.copies``: there numba's
#: negative-index checks cost more than the loops' arithmetic); a count of terms is clamped at 0 before
#: it is made unsigned (``range(start, stop, 3)`` of a stop below start has no term)
_U = U64

@nb.njit(cache=True, nogil=True)
def _inv_mills(t: float) -> float:
    """φ(t) / (1 − Φ(t)), stable for large t (asymptotic series once erfc underflows)."""
    if t < 30.0:
        return math.exp(-0.5 * t * t) * INV_SQRT_2PI / (0.5 * math.erfc(t / SQRT2))
    t2 = 1.0 / (t * t)
    r = (1.0 - t2 * (1.0 - t2 * (3.0 - t2 * (15.0 - 105.0 * t2)))) / t
    return 1.0 / r


@nb.njit(cache=True, nogil=True)
def _tanh(z: float) -> float:
    """tanh via one exp (cheaper than libm's tanh; error ~1 ulp of 1)."""
    return 1.0 - 2.0 / (1.0 + math.exp(2.0 * z))


@nb.njit(cache=True, nogil=True)
def _gauss_term(x: float, mu: float, s: float, split: bool) -> tuple[float, float, float]:
    """(G, L − G, E − G) of one Gaussian opponent at x: worse, better-minus-worse, tied-minus-worse."""
    z = (x - mu) / s
    g = _inv_mills(-z) / s  # φ/Φ(z): opponent ranked worse
    lo = -_inv_mills(z) / s  # φ/(Φ(z) − 1): opponent ranked better
    e = 0.5 * (g + lo) if split else -z / s
    return g, lo - g, e - g


@nb.njit(cache=True, nogil=True)
def direct_f(x: float, grp: int, smu, ss, gstart, gaussian: bool, split: bool) -> float:
    """f_g(x) summed directly over every player (O(N); used to bracket the extremes).

    ``smu``/``ss`` are the performance terms' centres and scales in rank order.
    """
    total = 0.0
    ngroups = gstart.shape[0] - 1
    for g in range(ngroups):
        for j in range(gstart[g], gstart[g + 1]):
            if gaussian:
                gv, dv, ev = _gauss_term(x, smu[j], ss[j], split)
            else:
                w = TANH_MULTIPLIER / ss[j]
                v = -_tanh((x - smu[j]) * 0.5 * w) * w
                gv, dv = v + w, -2.0 * w
                ev = -w if split else v - w
            total += gv
            if g < grp:
                total += dv
            elif g == grp:
                total += ev
    return total


# ---- panels ------------------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _panel_nodes(a: float, b: float, n: int):
    """Chebyshev points of the second kind on [a, b], node 0 = b and node n = a exactly."""
    xs = np.empty(n + 1)
    mid = 0.5 * (a + b)
    h = 0.5 * (b - a)
    for k in range(n + 1):
        xs[k] = mid + h * math.cos(math.pi * k / n)
    xs[0] = b
    xs[n] = a
    return xs


@nb.njit(parallel=True, cache=True, nogil=True)
def _panel_table_gauss(xs, smu, ss, gstart, split: bool):
    """tab[k, g] = f_g(xs[k]) for the Gaussian model via a running prefix over groups."""
    nk = xs.shape[0]
    ngroups = gstart.shape[0] - 1
    tab = np.empty((nk, ngroups))
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            k = claim(counter)  # a node a chunk: each is a pass over the whole round
            if k >= nk:
                break
            x = xs[k]
            total = 0.0
            prefix = 0.0
            for g in range(ngroups):
                own = 0.0
                dsum = 0.0
                for j in range(gstart[g], gstart[g + 1]):
                    gv, dv, ev = _gauss_term(x, smu[j], ss[j], split)
                    total += gv
                    own += ev
                    dsum += dv
                tab[k, g] = prefix + own
                prefix += dsum
            for g in range(ngroups):
                tab[k, g] += total
    return tab


@nb.njit(cache=True, nogil=True)
def _bary(x: float, xs, bw, tab, g: int) -> float:
    """Barycentric interpolant of group g's node values at x."""
    num = 0.0
    den = 0.0
    for k in range(xs.shape[0]):
        d = x - xs[k]
        if d == 0.0:
            return tab[k, g]
        t = bw[k] / d
        num += t * tab[k, g]
        den += t
    return num / den


@nb.njit(cache=True, nogil=True)
def _illinois_panel(a: float, b: float, fa: float, fb: float, xs, bw, tab, g: int) -> float:
    """Root of the decreasing interpolant on [a, b] with f(a) ≥ 0 > f(b)."""
    if fa == 0.0:
        return a
    side = 0
    tol = 1e-13 * max(1.0, abs(a) + abs(b))
    for _ in range(200):
        x = (a * fb - b * fa) / (fb - fa)
        if not (a < x < b):
            x = 0.5 * (a + b)
        fx = _bary(x, xs, bw, tab, g)
        if fx == 0.0:
            return x
        if fx > 0.0:
            a, fa = x, fx
            if side == 1:
                fb *= 0.5
            side = 1
        else:
            b, fb = x, fx
            if side == -1:
                fa *= 0.5
            side = -1
        if b - a <= tol:
            break
    return 0.5 * (a + b)


@nb.njit(parallel=True, cache=True, nogil=True)
def _solve_panel(a: float, b: float, xs, bw, tab, perf_g) -> None:
    n = xs.shape[0] - 1
    ngroups = tab.shape[1]
    chunks = (ngroups + GROUP_CHUNK - 1) // GROUP_CHUNK
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            c = claim(counter)
            if c >= chunks:
                break
            for g in range(c * GROUP_CHUNK, min(ngroups, (c + 1) * GROUP_CHUNK)):
                fb = tab[0, g]
                fa = tab[n, g]
                if fa >= 0.0 and fb < 0.0:
                    perf_g[g] = _illinois_panel(a, b, fa, fb, xs, bw, tab, g)


@nb.njit(parallel=True, cache=True, nogil=True)
def _shared_t_values(xs, smu, sarg, sw):
    """T(x_k) = −Σ_j w_j·tanh((x_k − μ_j)·w_j/2) at every node (the shared logistic sum)."""
    nk = xs.shape[0]
    vals = np.empty(nk)
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            k = claim(counter)  # a node a chunk: each is a pass over the whole round
            if k >= nk:
                break
            x = xs[k]
            total = 0.0
            for j in range(smu.shape[0]):
                total -= sw[j] * _tanh((x - smu[j]) * sarg[j])
            vals[k] = total
    return vals


@nb.njit(cache=True, nogil=True)
def _cheb_coefficients(vals, cosines):
    """Chebyshev coefficients from values at x_k = cos(πk/n) (a plain O(n²) DCT-I)."""
    n = vals.shape[0] - 1
    coef = np.empty(n + 1)
    for j in range(n + 1):
        acc = 0.5 * (vals[0] + vals[n] * (1.0 if j % 2 == 0 else -1.0))
        for k in range(1, n):
            acc += vals[k] * cosines[j, k]
        coef[j] = 2.0 * acc / n
    coef[0] *= 0.5
    coef[n] *= 0.5
    return coef


@nb.njit(cache=True, nogil=True)
def _clenshaw2(coef, t: float) -> tuple[float, float]:
    """Value and d/dt of a Chebyshev series in one pass (two interleaved recurrences)."""
    b1 = 0.0
    b2 = 0.0
    d1 = 0.0
    d2 = 0.0
    for j in range(coef.shape[0] - 1, 0, -1):
        d1, d2 = 2.0 * b1 + 2.0 * t * d1 - d2, d1
        b1, b2 = 2.0 * t * b1 - b2 + coef[j], b1
    return t * b1 - b2 + coef[0], b1 + t * d1 - d2


@nb.njit(cache=True, nogil=True)
def _own_sum(x: float, smu, sarg, sw, start: int, stop: int) -> tuple[float, float]:
    """Σ_{j in the tie group} v_j(x) and its derivative, summed exactly."""
    v = 0.0
    d = 0.0
    for j in range(start, stop):
        t = _tanh((x - smu[j]) * sarg[j])
        v -= sw[j] * t
        d -= sw[j] * sarg[j] * (1.0 - t * t)
    return v, d


@nb.njit(parallel=True, cache=True, nogil=True)
def _solve_logistic_groups(bounds, bvals, coefs, smu, sarg, sw, gstart, const, split: bool, perf_g):
    """Each group's root of T(x) + const_g (+ own tie-group sum) = 0 on the panel interpolants
    (``_solve_group``), ``GROUP_CHUNK`` groups a chunk."""
    ngroups = gstart.shape[0] - 1
    chunks = (ngroups + GROUP_CHUNK - 1) // GROUP_CHUNK
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            c = claim(counter)
            if c >= chunks:
                break
            for g in range(c * GROUP_CHUNK, min(ngroups, (c + 1) * GROUP_CHUNK)):
                perf_g[g] = _solve_group(g, bounds, bvals, coefs, smu, sarg, sw, gstart, const, split)


@nb.njit(cache=True, nogil=True)
def _solve_group(g: int, bounds, bvals, coefs, smu, sarg, sw, gstart, const, split: bool) -> float:
    """Group g's root of T(x) + const_g (+ own tie-group sum) = 0 on the panel interpolants.

    ``bounds``/``bvals``: panel boundaries and exact T there (boundaries are nodes), so the
    panel holding a root is found by binary search on exact values; Newton then runs on
    the panel's Chebyshev series, safeguarded by bisection inside the bracket.
    """
    npanels = bounds.shape[0] - 1
    s0 = gstart[g]
    s1 = gstart[g + 1]
    c = const[g]
    # f decreasing: f(bounds[0]) >= 0 > f(bounds[npanels]); find p with f(b_p) >= 0 > f(b_{p+1})
    lo_i = 0
    hi_i = npanels
    while hi_i - lo_i > 1:
        mid = (lo_i + hi_i) // 2
        fm = bvals[mid] + c
        if not split:
            fm += _own_sum(bounds[mid], smu, sarg, sw, s0, s1)[0]
        if fm >= 0.0:
            lo_i = mid
        else:
            hi_i = mid
    p = lo_i
    a = bounds[p]
    b = bounds[p + 1]
    fa = bvals[p] + c
    fb = bvals[p + 1] + c
    if not split:
        fa += _own_sum(a, smu, sarg, sw, s0, s1)[0]
        fb += _own_sum(b, smu, sarg, sw, s0, s1)[0]
    if fa == 0.0:
        return a
    mid_p = 0.5 * (a + b)
    half = 0.5 * (b - a)
    x = a + (b - a) * fa / (fa - fb)
    tol = 1e-12 * max(1.0, abs(x))
    prev_step = b - a
    for _ in range(200):
        t = (x - mid_p) / half
        f, fp = _clenshaw2(coefs[p], t)
        f += c
        fp /= half
        if not split:
            ov, od = _own_sum(x, smu, sarg, sw, s0, s1)
            f += ov
            fp += od
        if f > 0.0:
            a = x
        elif f < 0.0:
            b = x
        else:
            break
        step = f / fp if fp < 0.0 else 0.0
        nx = x - step
        if step != 0.0 and abs(step) <= 1e-9:  # converged (the step may be below one ulp)
            x = min(max(nx, a), b)
            break
        # bisect when Newton leaves the bracket or stops halving its steps (cycling)
        if step == 0.0 or not (a < nx < b) or abs(2.0 * step) > abs(prev_step):
            prev_step = 0.5 * (b - a)
            nx = 0.5 * (a + b)
        else:
            prev_step = step
        if b - a <= tol:
            x = 0.5 * (a + b)
            break
        x = nx
    return x


@nb.njit(cache=True, nogil=True)
def _solve_logistic(smu, ss, gstart, split: bool, lo: float, hi: float, max_width: float):
    """Logistic performances via one shared T interpolated on panels over [lo, hi]."""
    ngroups = gstart.shape[0] - 1
    sw = TANH_MULTIPLIER / ss
    sarg = 0.5 * sw
    const = _group_constants(sw, gstart)
    npanels = max(1, math.ceil((hi - lo) / max_width))
    width = (hi - lo) / npanels
    # fewer nodes when the panels came out narrower than the widest accurate panel
    n = min(PANEL_DEGREE, max(16, math.ceil(PANEL_DEGREE * width / max_width) + 4))
    cosines = np.empty((n + 1, n + 1))
    for j in range(n + 1):
        for k in range(n + 1):
            cosines[j, k] = math.cos(math.pi * j * k / n)
    bounds = np.empty(npanels + 1)
    for p in range(npanels + 1):
        bounds[p] = lo + p * width
    bounds[npanels] = hi
    xs_all = np.empty(npanels * (n + 1))
    for p in range(npanels):
        xs_all[p * (n + 1):(p + 1) * (n + 1)] = _panel_nodes(bounds[p], bounds[p + 1], n)
    vals = _shared_t_values(xs_all, smu, sarg, sw)
    coefs = np.empty((npanels, n + 1))
    bvals = np.empty(npanels + 1)
    for p in range(npanels):
        v = vals[p * (n + 1):(p + 1) * (n + 1)]
        coefs[p] = _cheb_coefficients(v, cosines)
        bvals[p + 1] = v[0]  # node 0 is the panel's right end
        if p == 0:
            bvals[0] = v[n]
    perf_g = np.empty(ngroups)
    _solve_logistic_groups(bounds, bvals, coefs, smu, sarg, sw, gstart, const, split, perf_g)
    return perf_g


@nb.njit(cache=True, nogil=True)
def _group_constants(sw, gstart):
    """Logistic const_g = Σ w ranked worse − Σ w ranked better (the same with split ties)."""
    ngroups = gstart.shape[0] - 1
    own = np.zeros(ngroups)
    for g in range(ngroups):
        for j in range(gstart[g], gstart[g + 1]):
            own[g] += sw[j]
    const = np.empty(ngroups)
    better = 0.0
    total = own.sum()
    for g in range(ngroups):
        worse = total - better - own[g]
        const[g] = worse - better
        better += own[g]
    return const


@nb.njit(cache=True, nogil=True)
def solve_performances(smu, ss, gstart, gaussian: bool, split: bool):
    """Performance of every tie group (best group first); smu/ss in rank order."""
    ngroups = gstart.shape[0] - 1
    smin = ss.min()
    dist = (math.sqrt(3.0) if not gaussian else 2.8) * smin
    max_width = 2.0 * PANEL_FRACTION * dist
    # tight bracket [lo, hi] of all roots: the extreme groups' roots, found directly
    _, hi = _bracket_direct(0, smu.max(), max_width, smu, ss, gstart, gaussian, split)
    lo, _ = _bracket_direct(ngroups - 1, smu.min(), max_width, smu, ss, gstart, gaussian, split)
    if not (hi - lo) / max_width <= MAX_PANELS:  # (also NaN)
        perf_g = np.empty(ngroups)
        for g in range(ngroups):
            perf_g[g] = _bisect_direct(g, lo, hi, smu, ss, gstart, gaussian, split)
        return perf_g
    if not gaussian:
        return _solve_logistic(smu, ss, gstart, split, lo, hi, max_width)
    npanels = max(1, math.ceil((hi - lo) / max_width))
    width = (hi - lo) / npanels
    n = PANEL_DEGREE
    bw = np.empty(n + 1)
    for k in range(n + 1):
        bw[k] = 1.0 if k % 2 == 0 else -1.0
    bw[0] *= 0.5
    bw[n] *= 0.5
    perf_g = np.full(ngroups, np.nan)
    for p in range(npanels):
        a = lo + p * width
        b = lo + (p + 1) * width if p + 1 < npanels else hi
        xs = _panel_nodes(a, b, n)
        tab = _panel_table_gauss(xs, smu, ss, gstart, split)
        _solve_panel(a, b, xs, bw, tab, perf_g)
    for g in range(ngroups):  # never expected: a root missed by rounding at a panel boundary
        if math.isnan(perf_g[g]):
            perf_g[g] = _bisect_direct(g, lo, hi, smu, ss, gstart, gaussian, split)
    return perf_g


@nb.njit(cache=True, nogil=True)
def _bracket_direct(g: int, x0: float, step: float, smu, ss, gstart, gaussian: bool, split: bool):
    """(a, b) with f_g(a) ≥ 0 > f_g(b) and b − a ≤ step/8, by marching then bisecting."""
    a = x0
    b = x0
    if direct_f(x0, g, smu, ss, gstart, gaussian, split) >= 0.0:
        for _ in range(1_000_000):
            b = a + step
            if direct_f(b, g, smu, ss, gstart, gaussian, split) < 0.0:
                break
            a = b
    else:
        for _ in range(1_000_000):
            a = b - step
            if direct_f(a, g, smu, ss, gstart, gaussian, split) >= 0.0:
                break
            b = a
    for _ in range(3):
        m = 0.5 * (a + b)
        if direct_f(m, g, smu, ss, gstart, gaussian, split) >= 0.0:
            a = m
        else:
            b = m
    return a, b


@nb.njit(cache=True, nogil=True)
def _bisect_direct(g: int, a: float, b: float, smu, ss, gstart, gaussian: bool, split: bool) -> float:
    for _ in range(200):
        m = 0.5 * (a + b)
        if not a < m < b:
            break
        if direct_f(m, g, smu, ss, gstart, gaussian, split) >= 0.0:
            a = m
        else:
            b = m
    return 0.5 * (a + b)


# ---- the belief phases -------------------------------------------------------------------
@nb.njit(cache=True, nogil=True)
def _diffusion(mu: float, sig: float, nmu: float, nw: float, tw: float, var: float, rho: float,
               collapse: bool) -> tuple[float, float, float, float]:
    """Pseudodiffusion (paper Alg. 2 / §4) of a belief by variance ``var``: (new σ, Gaussian-term
    centre, Gaussian-term weight, factor for every logistic ``w_out``). A ρ-dependent part of every
    term's weight moves to the Gaussian term centred on the current μ, then all weights shrink by
    σ²/(σ² + var): μ is preserved and σ² grows by var (Thm 4.1). ``collapse`` (ρ = ∞ or the
    Gaussian model) replaces everything by one Gaussian term."""
    new_sig = math.sqrt(sig * sig + var)
    if collapse:
        return new_sig, mu, 1.0 / (new_sig * new_sig), 0.0
    decay = (sig / new_sig) ** 2
    transfer = decay**rho
    from_old = transfer * nw
    from_transfers = (1.0 - transfer) * (nw + tw)
    total = from_old + from_transfers
    return new_sig, (from_old * nmu + from_transfers * mu) / total, decay * total, transfer * decay


@nb.njit(cache=True, nogil=True)
def _terms_weight(flat, start: int, stop: int) -> float:
    """Σ precision of the logistic terms in flat[start:stop] (2·w_arg·w_out·3/π² each)."""
    tw = 0.0
    first = _U(start)
    for m in range(_U(max(stop - start + 2, 0) // 3)):
        q = first + _U(3) * m
        tw += flat[q + _U(1)] * flat[q + _U(2)]
    return tw * 2.0 / (TANH_MULTIPLIER * TANH_MULTIPLIER)


@nb.njit(cache=True, nogil=True)
def diffuse_belief(belief, var: float, rho: float, collapse: bool):
    """A diffused copy of one belief (used by ``EloMMR.diffuse`` and the property tests)."""
    stop = belief.shape[0]
    new_sig, nmu, nw, factor = _diffusion(belief[0], belief[1], belief[2], belief[3],
                                          _terms_weight(belief, HEADER, stop), var, rho, collapse)
    out = belief[:HEADER].copy() if collapse else belief.copy()
    out[1] = new_sig
    out[2] = nmu
    out[3] = nw
    if not collapse:
        for q in range(HEADER, stop, 3):
            out[q + 2] *= factor
    return out


@nb.njit(cache=True, nogil=True)
def _prepare_player(pre, i: int, flat, o: int, stop: int, time_ms: float, w: float, noob_delay, lim2: float,
                    drift_per_day: float, rho: float, collapse: bool) -> None:
    """``pre[i]`` of the belief ``flat[o:stop]`` in a round of weight ``w`` (before the noob delay)."""
    rounds = flat[o + 4]
    r = int(rounds)
    if 0 <= r < noob_delay.shape[0]:  # 0 <=: a corrupt negative count must not index out of bounds
        w *= noob_delay[r]
    days = 0.0
    if rounds > 0:
        days = max(0.0, (time_ms - flat[o + 5]) / MS_PER_DAY)
    sig_perf = math.sqrt((1.0 + 1.0 / w) * lim2 + drift_per_day / w)
    tw = 0.0 if collapse else _terms_weight(flat, o + HEADER, stop)
    new_sig, nmu, nw, factor = _diffusion(flat[o], flat[o + 1], flat[o + 2], flat[o + 3], tw,
                                          w * lim2 + drift_per_day * days, rho, collapse)
    pre[i, 0] = new_sig
    pre[i, 1] = nmu
    pre[i, 2] = nw
    pre[i, 3] = sig_perf
    pre[i, 4] = flat[o]
    pre[i, 5] = math.sqrt(new_sig * new_sig + sig_perf * sig_perf)
    pre[i, 6] = factor


@nb.njit(parallel=True, cache=True, nogil=True)
def prepare_weighted(flat, offsets, time_ms: float, weight: float, player_weights, weight_limit: float,
                     noob_delay, sig_limit: float, drift_per_day: float, rho: float, collapse: bool):
    """Diffusion of every belief and its performance term (centre μ, scale √(σ² + σ_perf²)), each
    player with its own round weight ``weight × player_weights[i]`` (partial play; 1: the same bits)."""
    n = offsets.shape[0] - 1
    pre = np.empty((n, 7))  # new_sig, gauss_mu, gauss_w, sig_perf, term_mu, term_s, w_out factor
    lim2 = sig_limit * sig_limit
    chunks = (n + PLAYER_CHUNK - 1) // PLAYER_CHUNK
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            c = claim(counter)
            if c >= chunks:
                break
            for i in range(c * PLAYER_CHUNK, min(n, (c + 1) * PLAYER_CHUNK)):
                _prepare_player(pre, i, flat, offsets[i], offsets[i + 1], time_ms,
                                weight_limit * (weight * player_weights[i]), noob_delay, lim2, drift_per_day, rho,
                                collapse)
    return pre


@nb.njit(cache=True, nogil=True)
def _robust_average(offset: float, slope: float, out, start: int, stop: int, guess: float) -> float:
    """Zero of offset + slope·x + Σ w_out·tanh((x − c)·w_arg): safeguarded Newton from the
    previous μ in the bracket [min centre, max centre], which holds the root. Once a step is below
    1e-7 points the next iterate is exact to ~1e-14 (quadratic convergence), so it is returned
    without another O(terms) evaluation."""
    lo = -offset / slope
    hi = lo
    first, terms = _U(start), _U(max(stop - start + 2, 0) // 3)
    for m in range(terms):
        c = out[first + _U(3) * m]
        lo = min(lo, c)
        hi = max(hi, c)
    if hi == lo:
        return lo
    x = min(max(guess, lo), hi)
    prev_step = hi - lo
    for _ in range(200):
        f = offset + slope * x
        fp = slope
        for m in range(terms):
            q = first + _U(3) * m
            t = _tanh((x - out[q]) * out[q + _U(1)])
            f += out[q + _U(2)] * t
            fp += out[q + _U(2)] * out[q + _U(1)] * (1.0 - t * t)
        if f == 0.0:
            return x
        if f > 0.0:
            hi = x
        else:
            lo = x
        step = f / fp
        nx = x - step
        # bisect when Newton leaves the bracket or does not at least halve its step every
        # other iteration (Newton can cycle on tanh-shaped functions: rtsafe's rule)
        if not (lo <= nx <= hi) or abs(2.0 * step) > abs(prev_step):
            prev_step = 0.5 * (hi - lo)
            nx = 0.5 * (lo + hi)
        else:
            prev_step = step
            if abs(step) <= 1e-7:
                return nx
        if hi - lo <= 1e-12 * max(1.0, abs(x)):
            return nx
        x = nx
    return x


@nb.njit(cache=True, nogil=True)
def _out_offsets(offsets, collapse: bool, gaussian: bool, history_limit: int):
    """Where each new belief starts in the round's output: the header, and (Elo-MMR) the logistic
    terms kept plus the new one, at most ``history_limit`` of them."""
    n = offsets.shape[0] - 1
    out = np.empty(n + 1, dtype=np.int64)
    out[0] = 0
    for i in range(n):
        length = HEADER
        if not gaussian:
            m = 1 + (0 if collapse else (offsets[i + 1] - offsets[i] - HEADER) // 3)
            if history_limit > 0 and m > history_limit:
                m = history_limit
            length += 3 * m
        out[i + 1] = out[i] + length
    return out


@nb.njit(parallel=True, cache=True, nogil=True)
def _finish(flat, offsets, pre, perfs, out, out_offsets, time_ms: float, gaussian: bool,
            collapse: bool, history_limit: int) -> None:
    """Add the performance to each belief (Alg. 3: robust average) and write it out
    (``_finish_player``), ``PLAYER_CHUNK`` players a chunk."""
    n = offsets.shape[0] - 1
    chunks = (n + PLAYER_CHUNK - 1) // PLAYER_CHUNK
    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            c = claim(counter)
            if c >= chunks:
                break
            for i in range(c * PLAYER_CHUNK, min(n, (c + 1) * PLAYER_CHUNK)):
                _finish_player(i, flat, offsets, pre, perfs, out, out_offsets, time_ms, gaussian, collapse,
                               history_limit)


@nb.njit(cache=True, nogil=True)
def _finish_player(i: int, flat, offsets, pre, perfs, out, out_offsets, time_ms: float, gaussian: bool,
                   collapse: bool, history_limit: int) -> None:
    """Player i's new belief: its performance added (robust average) and written at ``out_offsets[i]``."""
    k2 = 2.0 / (TANH_MULTIPLIER * TANH_MULTIPLIER)
    o = offsets[i]
    d = out_offsets[i]
    new_sig, nmu, nw, sig_perf = pre[i, 0], pre[i, 1], pre[i, 2], pre[i, 3]
    factor = pre[i, 6]
    p = perfs[i]
    wp = 1.0 / (sig_perf * sig_perf)
    sig = 1.0 / math.sqrt(1.0 / (new_sig * new_sig) + wp)
    if gaussian:
        nmu = (nw * nmu + wp * p) / (nw + wp)
        nw = nw + wp
        mu = nmu
    else:
        m_old = 0 if collapse else (offsets[i + 1] - o - HEADER) // 3
        drop = 0
        if history_limit > 0 and m_old + 1 > history_limit:
            drop = m_old + 1 - history_limit
        q = _U(d + HEADER)
        src = _U(o + HEADER)
        for t in range(m_old):
            c, wa, wo = flat[src], flat[src + _U(1)], flat[src + _U(2)] * factor
            src += _U(3)
            if t < drop:  # fold the oldest terms into the Gaussian, preserving weight
                wl = wa * wo * k2
                nmu = (nw * nmu + wl * c) / (nw + wl)
                nw = nw + wl
            else:
                out[q] = c
                out[q + _U(1)] = wa
                out[q + _U(2)] = wo
                q += _U(3)
        wt = TANH_MULTIPLIER / sig_perf
        out[q] = p
        out[q + _U(1)] = 0.5 * wt
        out[q + _U(2)] = wt
        mu = _robust_average(-nmu * nw, nw, out, d + HEADER, nb.int64(q) + 3, flat[o])
    out[d] = mu
    out[d + 1] = sig
    out[d + 2] = nmu
    out[d + 3] = nw
    out[d + 4] = flat[o + 4] + 1.0
    # the latest round seen: an out-of-order round must not make later drift count twice
    out[d + 5] = max(time_ms, flat[o + 5]) if flat[o + 4] > 0.0 else time_ms


@nb.njit(cache=True, nogil=True)
def _groups(ranks):
    """Stable rank order and the start of each tie group in it (best group first)."""
    order = np.argsort(ranks, kind="mergesort")
    n = ranks.shape[0]
    starts = np.empty(n + 1, dtype=np.int64)
    ng = 0
    for q in range(n):
        if q == 0 or ranks[order[q]] != ranks[order[q - 1]]:
            starts[ng] = q
            ng += 1
    starts[ng] = n
    return order, starts[: ng + 1].copy()


@nb.njit(cache=True, nogil=True)
def rate_round_flat(flat, offsets, ranks, time_ms: float, weight: float, perf_ceiling: float,
                    weight_limit: float, noob_delay, sig_limit: float, drift_per_day: float,
                    rho: float, split: bool, gaussian: bool, history_limit: int):
    """One whole round: (new flat beliefs, new offsets, performances, bad player), ``bad`` −1 or the
    first player whose belief holds a non-finite number (then nothing else is computed)."""
    bad = _first_non_finite(flat, offsets)
    if bad >= 0:
        return np.empty(0), np.zeros(1, dtype=np.int64), np.empty(0), bad
    collapse = gaussian or math.isinf(rho)
    pre = prepare_weighted(flat, offsets, time_ms, weight, np.ones(ranks.shape[0]), weight_limit, noob_delay,
                           sig_limit, drift_per_day, rho, collapse)
    order, gstart = _groups(ranks)
    smu = pre[:, 4][order]
    ss = pre[:, 5][order]
    perf_g = solve_performances(smu, ss, gstart, gaussian, split)
    n = ranks.shape[0]
    perfs = np.empty(n)
    for g in range(gstart.shape[0] - 1):
        for q in range(gstart[g], gstart[g + 1]):
            perfs[order[q]] = min(perf_g[g], perf_ceiling)
    out_offsets = _out_offsets(offsets, collapse, gaussian, history_limit)
    out = np.empty(out_offsets[-1])
    _finish(flat, offsets, pre, perfs, out, out_offsets, time_ms, gaussian, collapse, history_limit)
    return out, out_offsets, perfs, -1


@nb.njit(cache=True, nogil=True)
def _first_non_finite(flat, offsets) -> int:
    """Index of the first player with a NaN/inf in its belief, or −1. ``x * 0.0`` is ±0.0 for every
    finite ``x`` and NaN otherwise; the pass ORs whether it is non-zero, which (unlike a sum of
    floats) may be taken in any order, so it compiles to vector code."""
    bad = False
    for q in range(flat.shape[0]):
        bad |= flat[q] * 0.0 != 0.0
    if not bad:
        return -1
    for i in range(offsets.shape[0] - 1):
        for q in range(offsets[i], offsets[i + 1]):
            if not math.isfinite(flat[q]):
                return i
    return -1
