"""The drift step of ``kernels.update_pair_in``: each new posterior convolved with the drift
kernel, renormalised, its tails trimmed, written back to its row.

Besides the convolution it is two running sums a player (mass, then mass kept), latency-bound
chains run beside other work: the mass inside ``lanes.convolve_taps``, both players' kept masses
in one loop. Each sum adds its cells in ascending order from ``0.0``: one player's bits (tested).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numpy as np
from numba import njit

from stream.ratings.cowan.lanes import convolve_taps

# drift modes
DRIFT_TAPS = 0  # short direct convolution with symmetric taps
DRIFT_EXP = 1  # Laplace kernel w(d) = w0·r^|d| by two sweeps (unbounded support)


@njit(cache=True, nogil=True, inline="always")
def _drift_conv(
    post: np.ndarray, lo: int, hi: int, taps: np.ndarray, drift_mode: int, drift_rate: float, n1: int,
    work: np.ndarray,
) -> tuple[np.ndarray, int, float]:
    """The window ``post[0 : hi−lo+1]`` convolved with the drift kernel: ``(buf, nlo, total)``,
    ``buf[x]`` cell ``nlo + x``, ``total`` ``Σ buf`` with the taps (``convolve_taps``), else 0.0.
    ``buf`` and the padded input are views of ``work`` (``2·n1 + len(taps)`` cells, any values)."""
    m = hi - lo + 1
    if drift_mode == DRIFT_TAPS:
        half = (taps.shape[0] - 1) // 2
        nlo = max(0, lo - half)
        nhi = min(n1 - 1, hi + half)
        # pad[t] = post cell (nlo − half + t); buf[x] = Σ_t taps[t] pad[x + t] (taps are symmetric)
        width = nhi - nlo + 1
        pad = work[: width + 2 * half]
        shift = lo - (nlo - half)
        for t in range(shift):  # ≤ 2·half cells on either side of the window are zero
            pad[t] = 0.0
        right = pad[shift + m :]
        for t in range(right.shape[0]):
            right[t] = 0.0
        into = pad[shift : shift + m]
        for t in range(m):
            into[t] = post[t]
        buf = work[n1 + taps.shape[0] : n1 + taps.shape[0] + width]
        total = convolve_taps(pad, taps, width, buf)
    else:
        # Laplace kernel w(d) = w0 r^|d|: two sweeps. Its support is the whole grid, but
        # beyond `reach` cells every value is < 1e-20 of the mass (the tail trim below drops
        # far more), so the sweeps stop there.
        r = drift_rate
        reach = n1 if r <= 0.0 or r >= 1.0 else math.ceil(math.log(1e-20) / math.log(r))
        nlo = max(0, lo - reach)
        nhi = min(n1 - 1, hi + reach)
        buf = work[: nhi - nlo + 1]  # every cell is written by the forward sweep
        total = 0.0
        w0 = taps[0]
        s = 0.0
        for x in range(nlo, nhi + 1):
            v = post[x - lo] if lo <= x <= hi else 0.0
            buf[x - nlo] = w0 * (s + v)
            s = r * (s + v)
        s = 0.0
        for x in range(nhi, nlo - 1, -1):
            v = post[x - lo] if lo <= x <= hi else 0.0
            buf[x - nlo] += w0 * s
            s = r * (s + v)
    return buf, nlo, total


@njit(cache=True, nogil=True, inline="always")
def _trim(buf: np.ndarray, lim: float) -> tuple[int, int]:
    """``(a, b)``: drop outer cells of ``buf`` while the dropped mass stays within ``lim``."""
    a = 0
    cum = 0.0
    while a < buf.shape[0] - 1 and cum + buf[a] <= lim:
        cum += buf[a]
        a += 1
    b = buf.shape[0] - 1
    cum = 0.0
    while b > a and cum + buf[b] <= lim:
        cum += buf[b]
        b -= 1
    return a, b


@njit(cache=True, nogil=True, inline="always")
def _store(buf: np.ndarray, a: int, b: int, kept: float, nlo: int, row: np.ndarray, bounds: np.ndarray) -> None:
    """``buf[a : b + 1] / kept`` written to ``row`` at ``nlo + a`` (the old window zeroed
    first); ``bounds`` receives the new ``[lo, hi]``."""
    inv = 1.0 / kept
    old = row[int(bounds[0]) : int(bounds[1]) + 1]
    for t in range(old.shape[0]):
        old[t] = 0.0
    src = buf[a : b + 1]
    dst = row[nlo + a : nlo + b + 1]
    for t in range(src.shape[0]):
        dst[t] = src[t] * inv
    bounds[0] = nlo + a
    bounds[1] = nlo + b


@njit(cache=True, nogil=True, inline="always")
def _drift_and_store_pair_in(
    post_a: np.ndarray, la: int, ha: int, row_a: np.ndarray, bounds_a: np.ndarray,
    post_b: np.ndarray, lb: int, hb: int, row_b: np.ndarray, bounds_b: np.ndarray,
    taps: np.ndarray, drift_mode: int, drift_rate: float, tail: float, work: np.ndarray,
) -> None:
    """Each player's window ``post[0 : hi−lo+1]`` drifted, tails of ≤ ``tail`` of the mass a side
    trimmed, renormalised, stored (``_store``); ``work``: ``2·(2·n1 + len(taps))`` cells."""
    n1 = row_a.shape[0]
    per = 2 * n1 + taps.shape[0]
    buf_a, nlo_a, total_a = _drift_conv(post_a, la, ha, taps, drift_mode, drift_rate, n1, work[:per])
    buf_b, nlo_b, total_b = _drift_conv(post_b, lb, hb, taps, drift_mode, drift_rate, n1, work[per : 2 * per])
    if drift_mode != DRIFT_TAPS:  # the taps' convolution took the masses; the two sweeps did not
        na = buf_a.shape[0]
        nb = buf_b.shape[0]
        for x in range(max(na, nb)):
            if x < na:
                total_a += buf_a[x]
            if x < nb:
                total_b += buf_b[x]
    a_a, b_a = _trim(buf_a, tail * total_a)
    a_b, b_b = _trim(buf_b, tail * total_b)
    kept_a = 0.0
    kept_b = 0.0
    ka = buf_a[a_a : b_a + 1]
    kb = buf_b[a_b : b_b + 1]
    both = min(ka.shape[0], kb.shape[0])
    for x in range(both):
        kept_a += ka[x]
        kept_b += kb[x]
    for x in range(both, ka.shape[0]):
        kept_a += ka[x]
    for x in range(both, kb.shape[0]):
        kept_b += kb[x]
    _store(buf_a, a_a, b_a, kept_a, nlo_a, row_a, bounds_a)
    _store(buf_b, a_b, b_b, kept_b, nlo_b, row_b, bounds_b)
