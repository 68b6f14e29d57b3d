"""Both players' win likelihoods of a match by four sweeps run as the lanes of one vector.

Why: ``win_lik`` for each side is a forward and a backward sweep of a sum of exponentials (3 real,
4 complex states); the four sweeps of a match are independent and do identical operations, so
``_sweep8_r3c4`` runs them as the lanes of ``simd`` vectors, two terms of each in one 8-lane
vector: one instruction where scalar sweeps have eight. Each lane's outputs go to their own array
by cell, so that ``_combine`` reads with unit stride and vectorises too. Each lane does
``win_lik``'s operations in its order from the same zero states, so the bits are ``win_lik``'s
(tested); a shorter lane runs on past its last cell, outputs never read.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from typing import Any

import numpy as np
from numba import njit

from stream.ratings.cowan.simd import (
    f64_at,
    f64_put,
    v4_add,
    v4_get,
    v4_make,
    v4_splat,
    v8_add,
    v8_hi,
    v8_join,
    v8_lo,
    v8_load,
    v8_mul,
    v8_splat,
    v8_store,
    v8_sub,
)

LANES = 4


@njit(cache=True, nogil=True, inline="always")
def _term(soe: np.ndarray, base: int, count: int, j: int) -> float:
    """Term ``j`` of the part at ``soe[base]`` that has ``count`` terms, or 0.0 (a zero slot)."""
    return soe[base + j] if j < count else 0.0


@njit(cache=True, nogil=True, inline="always")
def _pair8(x: float, y: float) -> Any:
    """``x`` in lanes 0-3, ``y`` in lanes 4-7."""
    return v8_join(v4_splat(x), v4_splat(y))


@njit(cache=True, nogil=True)
def _sweep8_r3c4(soe: np.ndarray, rho_a: np.ndarray, rho_b: np.ndarray, start: int, stop: int, steps: int,
                 ys: np.ndarray) -> None:
    """Four sweeps of ``steps`` cells: 0 forward over ``rho_b`` from ``start``, 1 backward over
    ``rho_b`` from ``stop``, 2 and 3 the same over ``rho_a``; the sum packed at ``soe[0]`` as for
    ``kernels._soe_views`` (≤ 3 real, ≤ 4 complex terms, absent ones zero slots).

    Lanes 0-3 hold the four sweeps' states of one term, lanes 4-7 of another (real terms 0 | 1
    and 2 | the running sum ``(run + x)·1.0``, exact; complex 0 | 1 and 2 | 3); ``acc`` adds the
    scalar sweep's products in its order.

    Outputs by cell (``size = stop − start + 2``, cell ``i`` at ``i − start``): sweep ``k``'s sum
    before each update in ``ys[k·size …]``, the running sums of sweeps 0 and 2 before each step
    in ``ys[4·size …]`` and ``ys[5·size …]``, and after the last one (at ``steps``)."""
    nr = int(soe[0])
    nc = int(soe[1])
    r = 2  # the parts of the sum, as in ``_soe_views``: rates, coefs (real); Re z, Im z, Re c, Im c
    c = r + nr
    zr = r + 2 * nr
    zi = zr + nc
    cr = zi + nc
    ci = cr + nc
    r01, c01 = _pair8(_term(soe, r, nr, 0), _term(soe, r, nr, 1)), _pair8(_term(soe, c, nr, 0), _term(soe, c, nr, 1))
    r2, c2 = _pair8(_term(soe, r, nr, 2), 1.0), _pair8(_term(soe, c, nr, 2), 0.0)
    zr01, zr23 = _pair8(_term(soe, zr, nc, 0), _term(soe, zr, nc, 1)), _pair8(_term(soe, zr, nc, 2),
                                                                              _term(soe, zr, nc, 3))
    zi01, zi23 = _pair8(_term(soe, zi, nc, 0), _term(soe, zi, nc, 1)), _pair8(_term(soe, zi, nc, 2),
                                                                              _term(soe, zi, nc, 3))
    cr01, cr23 = _pair8(_term(soe, cr, nc, 0), _term(soe, cr, nc, 1)), _pair8(_term(soe, cr, nc, 2),
                                                                              _term(soe, cr, nc, 3))
    ci01, ci23 = _pair8(_term(soe, ci, nc, 0), _term(soe, ci, nc, 1)), _pair8(_term(soe, ci, nc, 2),
                                                                              _term(soe, ci, nc, 3))
    span = stop - start
    size = span + 2
    zero4 = v4_splat(0.0)
    zero = v8_splat(0.0)
    s01 = s2r = zero
    a01 = a23 = b01 = b23 = zero
    for s in range(steps):
        x4 = v4_make(f64_at(rho_b, start + s), f64_at(rho_b, stop - s), f64_at(rho_a, start + s),
                     f64_at(rho_a, stop - s))
        x = v8_join(x4, x4)
        p01 = v8_mul(c01, s01)
        p2 = v8_mul(c2, s2r)
        q01 = v8_sub(v8_mul(cr01, a01), v8_mul(ci01, b01))
        q23 = v8_sub(v8_mul(cr23, a23), v8_mul(ci23, b23))
        acc = v4_add(zero4, v8_lo(p01))
        acc = v4_add(acc, v8_hi(p01))
        acc = v4_add(acc, v8_lo(p2))
        acc = v4_add(acc, v8_lo(q01))
        acc = v4_add(acc, v8_hi(q01))
        acc = v4_add(acc, v8_lo(q23))
        acc = v4_add(acc, v8_hi(q23))
        run = v8_hi(s2r)
        f64_put(ys, s, v4_get(acc, 0))
        f64_put(ys, size + span - s, v4_get(acc, 1))
        f64_put(ys, 2 * size + s, v4_get(acc, 2))
        f64_put(ys, 3 * size + span - s, v4_get(acc, 3))
        f64_put(ys, 4 * size + s, v4_get(run, 0))
        f64_put(ys, 5 * size + s, v4_get(run, 2))
        s01 = v8_mul(r01, v8_add(s01, x))
        s2r = v8_mul(r2, v8_add(s2r, x))
        t = v8_add(a01, x)
        a01, b01 = v8_sub(v8_mul(zr01, t), v8_mul(zi01, b01)), v8_add(v8_mul(zr01, b01), v8_mul(zi01, t))
        t = v8_add(a23, x)
        a23, b23 = v8_sub(v8_mul(zr23, t), v8_mul(zi23, b23)), v8_add(v8_mul(zr23, b23), v8_mul(zi23, t))
    run = v8_hi(s2r)
    ys[4 * size + steps] = v4_get(run, 0)
    ys[5 * size + steps] = v4_get(run, 2)


@njit(cache=True, nogil=True)
def win_lik_pair(rho_a: np.ndarray, la: int, ha: int, rho_b: np.ndarray, lb: int, hb: int, a0: float,
                 beta: float, soe: np.ndarray, fa: np.ndarray, fb: np.ndarray, ys: np.ndarray) -> None:
    """``win_lik(rho_b, lb, hb, la, ha, …, fa)`` and ``win_lik(rho_a, la, ha, lb, hb, …, fb)`` for
    a sum ``kernels._takes_r3c4`` takes, in one ``_sweep8_r3c4``; ``ys``: scratch of at least
    ``6·(stop − start + 2)`` cells."""
    start = min(la, lb)
    stop = max(ha, hb)
    # lanes: 0 forward over rho_b (A's side), 1 backward over rho_b, 2 forward over rho_a, 3 backward over rho_a
    n0 = ha - start + 1
    n1 = stop - la + 1
    n2 = hb - start + 1
    n3 = stop - lb + 1
    steps = max(max(n0, n1), max(n2, n3))
    _sweep8_r3c4(soe, rho_a, rho_b, start, stop, steps, ys)
    size = stop - start + 2
    _combine(rho_b[la : ha + 1], la - start, ha - la + 1, ys[:size], ys[size : 2 * size], ys[4 * size : 5 * size],
             ys[4 * size + steps], a0, beta, fa)
    _combine(rho_a[lb : hb + 1], lb - start, hb - lb + 1, ys[2 * size : 3 * size], ys[3 * size : 4 * size],
             ys[5 * size : 6 * size], ys[5 * size + steps], a0, beta, fb)


@njit(cache=True, nogil=True, inline="always")
def _combine(rho: np.ndarray, off: int, m: int, fw: np.ndarray, bw: np.ndarray, run: np.ndarray, total: float,
             a0: float, beta: float, out: np.ndarray) -> None:
    """``win_lik``'s last loop, the same expression, on one side's sweeps ``fw``, ``bw`` and
    running sum ``run`` (indexed by cell − start; ``off`` = lo − start, ``rho`` the cells lo … hi),
    with unit strides so that it vectorises. ``total`` is the forward lane's sum after its last
    step: the cells it adds besides ``lo_o … hi_o`` are ``+0.0``, which change no such sum."""
    f = fw[off : off + m]
    b = bw[off : off + m]
    r = run[off : off + m]
    for t in range(m):
        out[t] = a0 * total + beta * (r[t] + 0.5 * rho[t] - f[t]) + beta * b[t]


@njit(cache=True, nogil=True)
def convolve_taps(pad: np.ndarray, taps: np.ndarray, width: int, buf: np.ndarray) -> float:
    """``buf[x] = Σ_t taps[t]·pad[x + t]`` for ``x < width``, each sum from ``0.0`` in ascending
    ``t``: thirty-two outputs at a time as four 8-lane vectors kept in registers (four chains of
    adds hide their latency), then one by one. Returns ``Σ_x buf[x]`` in ascending ``x`` from
    ``0.0`` (the drift's mass), a latency-bound chain run beside the next outputs' products."""
    nt = taps.shape[0]
    zero8 = v8_splat(0.0)
    total = 0.0
    x = 0
    while x + 8 * LANES <= width:
        u0 = u1 = u2 = u3 = zero8
        for t in range(nt):
            w8 = v8_splat(taps[t])
            u0 = v8_add(u0, v8_mul(w8, v8_load(pad, x + t)))
            u1 = v8_add(u1, v8_mul(w8, v8_load(pad, x + t + 2 * LANES)))
            u2 = v8_add(u2, v8_mul(w8, v8_load(pad, x + t + 4 * LANES)))
            u3 = v8_add(u3, v8_mul(w8, v8_load(pad, x + t + 6 * LANES)))
        v8_store(buf, x, u0)
        v8_store(buf, x + 2 * LANES, u1)
        v8_store(buf, x + 4 * LANES, u2)
        v8_store(buf, x + 6 * LANES, u3)
        for j in range(8 * LANES):
            total += buf[x + j]
        x += 8 * LANES
    while x < width:
        acc = 0.0
        for t in range(nt):
            acc += taps[t] * pad[x + t]
        buf[x] = acc
        total += acc
        x += 1
    return total
