"""Both players' win likelihoods of a match by four sweeps run as the lanes of one vector.

Why
---
``win_lik`` for each side of a match is a forward and a backward sweep of a sum of
exponentials (``_cowan_kernels._sweep_r3c4``: 3 real and 4 complex states, ~56 scalar
floating-point operations a cell), and the four sweeps of a match are independent and do
the identical sequence of operations on different inputs. ``_sweep4_r3c4`` runs them as
the four lanes of ``F64x4`` vectors (``_simd``): one vector instruction where the scalar
sweep has four, so the sweeps, most of a match's time, take about a quarter of the
instructions.

Same bits
---------
Each lane performs the scalar sweep's operations in the scalar sweep's order (no FMA, no
reassociation: see ``_simd``), on the same inputs in the same order, starting from the
same zero states, so each lane's outputs are the scalar sweep's outputs bit for bit.
Lanes are as long as the longest sweep; a shorter lane continues past its last cell (on
whatever its row holds there), and those outputs are never read (a sweep's states after
its last kept cell are not used). ``win_lik_pair`` then combines the sweeps exactly as
``win_lik`` does; the tests compare it with two ``win_lik`` calls bit for bit.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from stream.ratings._simd import v4_add, v4_load, v4_make, v4_mul, v4_splat, v4_store, v4_sub

LANES = 4


@njit(cache=True, nogil=True)
def _sweep4_r3c4(soe: np.ndarray, rho_a: np.ndarray, rho_b: np.ndarray, start: int, stop: int, steps: int,
                 ys: np.ndarray) -> None:
    """Four sweeps at once, ``steps`` cells each: lane 0 forward over ``rho_b`` from cell
    ``start``, lane 1 backward over ``rho_b`` from ``stop``, lanes 2 and 3 the same over
    ``rho_a``; the sum before each step's update goes to ``ys[8·s + lane]``, and each lane's
    running sum of its inputs before the step (from ``0.0``) to ``ys[8·s + 4 + lane]``, for
    ``s ≤ steps`` (``s = steps``: after the last step). The sum of
    exponentials is packed at ``soe[0]`` as in ``_cowan_kernels._soe_views`` (≤ 3 real,
    ≤ 4 complex terms; absent ones are zero slots, as in ``_sweep_r3c4``). Every cell read
    lies in ``[start, stop]`` as long as ``steps ≤ stop − start + 1``."""
    nr = int(soe[0])
    nc = int(soe[1])
    r = np.zeros(3)
    c = np.zeros(3)
    for j in range(nr):
        r[j] = soe[2 + j]
        c[j] = soe[2 + nr + j]
    q = np.zeros(16)
    o = 2 + 2 * nr
    for j in range(nc):
        q[j] = soe[o + j]
        q[4 + j] = soe[o + nc + j]
        q[8 + j] = soe[o + 2 * nc + j]
        q[12 + j] = soe[o + 3 * nc + j]
    r0, r1, r2 = v4_splat(r[0]), v4_splat(r[1]), v4_splat(r[2])
    c0, c1, c2 = v4_splat(c[0]), v4_splat(c[1]), v4_splat(c[2])
    zr0, zr1, zr2, zr3 = v4_splat(q[0]), v4_splat(q[1]), v4_splat(q[2]), v4_splat(q[3])
    zi0, zi1, zi2, zi3 = v4_splat(q[4]), v4_splat(q[5]), v4_splat(q[6]), v4_splat(q[7])
    cr0, cr1, cr2, cr3 = v4_splat(q[8]), v4_splat(q[9]), v4_splat(q[10]), v4_splat(q[11])
    ci0, ci1, ci2, ci3 = v4_splat(q[12]), v4_splat(q[13]), v4_splat(q[14]), v4_splat(q[15])
    zero = v4_splat(0.0)
    s0 = s1 = s2 = zero
    a0 = a1 = a2 = a3 = b0 = b1 = b2 = b3 = zero
    run = zero
    for s in range(steps):
        x = v4_make(rho_b[start + s], rho_b[stop - s], rho_a[start + s], rho_a[stop - s])
        # acc = 0.0; acc += c0·s0; …; acc += crj·aj − cij·bj (the scalar sweep's order)
        acc = v4_add(zero, v4_mul(c0, s0))
        acc = v4_add(acc, v4_mul(c1, s1))
        acc = v4_add(acc, v4_mul(c2, s2))
        acc = v4_add(acc, v4_sub(v4_mul(cr0, a0), v4_mul(ci0, b0)))
        acc = v4_add(acc, v4_sub(v4_mul(cr1, a1), v4_mul(ci1, b1)))
        acc = v4_add(acc, v4_sub(v4_mul(cr2, a2), v4_mul(ci2, b2)))
        acc = v4_add(acc, v4_sub(v4_mul(cr3, a3), v4_mul(ci3, b3)))
        v4_store(ys, 2 * LANES * s, acc)
        v4_store(ys, 2 * LANES * s + LANES, run)
        run = v4_add(run, x)
        s0 = v4_mul(r0, v4_add(s0, x))
        s1 = v4_mul(r1, v4_add(s1, x))
        s2 = v4_mul(r2, v4_add(s2, x))
        t = v4_add(a0, x)
        a0, b0 = v4_sub(v4_mul(zr0, t), v4_mul(zi0, b0)), v4_add(v4_mul(zr0, b0), v4_mul(zi0, t))
        t = v4_add(a1, x)
        a1, b1 = v4_sub(v4_mul(zr1, t), v4_mul(zi1, b1)), v4_add(v4_mul(zr1, b1), v4_mul(zi1, t))
        t = v4_add(a2, x)
        a2, b2 = v4_sub(v4_mul(zr2, t), v4_mul(zi2, b2)), v4_add(v4_mul(zr2, b2), v4_mul(zi2, t))
        t = v4_add(a3, x)
        a3, b3 = v4_sub(v4_mul(zr3, t), v4_mul(zi3, b3)), v4_add(v4_mul(zr3, b3), v4_mul(zi3, t))
    v4_store(ys, 2 * LANES * steps + LANES, run)


@njit(cache=True, nogil=True)
def win_lik_pair(rho_a: np.ndarray, la: int, ha: int, rho_b: np.ndarray, lb: int, hb: int, a0: float,
                 beta: float, soe: np.ndarray, fa: np.ndarray, fb: np.ndarray, ys: np.ndarray) -> None:
    """``win_lik(rho_b, lb, hb, la, ha, …, fa)`` and ``win_lik(rho_a, la, ha, lb, hb, …, fb)``
    (the sum-of-exponentials mode with a sum ``_sweep_r3c4`` takes) in one pass of
    ``_sweep4_r3c4``; ``ys`` is scratch of at least ``8·(stop − start + 2)`` cells. Rows are zero
    outside their windows; a lane that runs past its last cell reads cells of its row up to
    ``stop`` (or down to ``start``), and what it computes there is never read."""
    start = min(la, lb)
    stop = max(ha, hb)
    # lanes: 0 forward over rho_b (A's side), 1 backward over rho_b, 2 forward over rho_a, 3 backward over rho_a
    n0 = ha - start + 1
    n1 = stop - la + 1
    n2 = hb - start + 1
    n3 = stop - lb + 1
    steps = max(max(n0, n1), max(n2, n3))
    _sweep4_r3c4(soe, rho_a, rho_b, start, stop, steps, ys)
    _combine(rho_b, la, ha, start, stop, steps, a0, beta, ys, 0, fa)
    _combine(rho_a, lb, hb, start, stop, steps, a0, beta, ys, 2, fb)


@njit(cache=True, nogil=True, inline="always")
def _combine(rho: np.ndarray, lo: int, hi: int, start: int, stop: int, steps: int, a0: float, beta: float,
             ys: np.ndarray, lane: int, out: np.ndarray) -> None:
    """``win_lik``'s last loop on the sweeps in lanes ``lane`` (forward) and ``lane + 1``
    (backward): the same expression, so the same bits. ``win_lik``'s running sum ``run``
    (from ``start``) is the forward lane's; its ``total`` (the opponent's cells ``lo_o …
    hi_o`` from ``0.0``) is the forward lane's sum after its last step: the cells it adds
    besides (before ``lo_o``, after ``hi_o``) are ``+0.0``, which leave a sum of
    non-negative values unchanged."""
    total = ys[2 * LANES * steps + LANES + lane]
    for i in range(lo, hi + 1):
        f = 2 * LANES * (i - start) + lane
        fw = ys[f]
        run = ys[f + LANES]
        bw = ys[2 * LANES * (stop - i) + lane + 1]
        out[i - lo] = a0 * total + beta * (run + 0.5 * rho[i] - fw) + beta * bw


@njit(cache=True, nogil=True)
def convolve_taps(pad: np.ndarray, taps: np.ndarray, width: int, buf: np.ndarray) -> float:
    """``buf[x] = Σ_t taps[t]·pad[x + t]`` for ``x < width``, each sum started at ``0.0`` and
    taken in ascending ``t``: the same bits as accumulating ``buf[x] += taps[t]·pad[x + t]``
    over ``t`` (the drift's direct convolution). Sixteen outputs at a time, as the lanes of
    four vectors whose sums stay in registers (four independent chains of adds hide their
    latency); the scalar form kept ``buf`` in memory, a load and a store per product.

    Returns ``Σ_x buf[x]``, one running sum from ``0.0`` in ascending ``x`` (the drift's
    mass): a chain of dependent additions, latency-bound, which here runs beside the
    products of the next outputs instead of in a loop of its own."""
    nt = taps.shape[0]
    zero = v4_splat(0.0)
    total = 0.0
    x = 0
    while x + 4 * LANES <= width:
        s0 = s1 = s2 = s3 = zero
        for t in range(nt):
            w = v4_splat(taps[t])
            s0 = v4_add(s0, v4_mul(w, v4_load(pad, x + t)))
            s1 = v4_add(s1, v4_mul(w, v4_load(pad, x + t + LANES)))
            s2 = v4_add(s2, v4_mul(w, v4_load(pad, x + t + 2 * LANES)))
            s3 = v4_add(s3, v4_mul(w, v4_load(pad, x + t + 3 * LANES)))
        v4_store(buf, x, s0)
        v4_store(buf, x + LANES, s1)
        v4_store(buf, x + 2 * LANES, s2)
        v4_store(buf, x + 3 * LANES, s3)
        for j in range(4 * LANES):
            total += buf[x + j]
        x += 4 * LANES
    while x < width:
        acc = 0.0
        for t in range(nt):
            acc += taps[t] * pad[x + t]
        buf[x] = acc
        total += acc
        x += 1
    return total
