"""The quantisation core of Cowan beliefs, shared by the codec and the kernels.

Why: a belief is *stored* quantised (``codec``). Were the kernels to carry unquantised beliefs
and quantise only at storing, results would depend on batching. So the quantised belief *is* the
state: every belief Cowan returns is already ``decode(encode(b))``, which holds only if kernels and
codec run the very same operations: these ``njit`` functions (``canonicalise_row`` after each
match, on a dense row in place; ``canonical`` on a belief array).

Why its own ``log`` and ``exp``: one of each per window cell after every match, and the C
library's scalar calls were over a third of a match. ``log_det`` and ``exp_det`` are plain IEEE
arithmetic (bit casts, a range reduction, a polynomial), so loops vectorise and the bits are the
same on every CPU and C library; both within ~1 ulp (a code differs from an exact ``log``'s only
within ~1e-8 quanta of a rounding boundary). No ``fastmath``; divisions use numpy's error model (a
zero check would stop vectorisation), values that could divide by zero rejected before.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math
from collections.abc import Callable
from typing import Any, cast

import numpy as np
from numba import njit, types
from numba.extending import intrinsic


# Constants passed through these, not as literals: numba compiles a callee once per literal value
# (compile time at a cold start). Same values, same bits.
@njit(cache=True, nogil=True, inline="always")
def _ONE() -> Any:  # the int64 1
    return np.int64(1)


@njit(cache=True, nogil=True, inline="always")
def _ZERO() -> Any:  # the int64 0
    return np.int64(0)


@njit(cache=True, nogil=True, inline="always")
def _TRUE() -> Any:  # a boolean True
    return np.bool_(True)


@njit(cache=True, nogil=True, inline="always")
def _FALSE() -> Any:  # a boolean False
    return np.bool_(False)


DELTA = 2.0**-24
#: per-cell floor relative to the peak, for grids up to this many cells (n + 1)
MAX_CELLS = 4097


def floor_q(cells: int) -> int:
    """The most negative q kept at a window edge: cells below τ·p_max, τ = 1e-12/cells."""
    return -math.floor(math.log(cells / 1e-12) / DELTA)


#: a fixed floor (not one derived from the belief) keeps re-encoding idempotent
QMIN = floor_q(MAX_CELLS)


# --- bit casts (LLVM ``bitcast``: no memory round trip, so loops using them vectorise) ------
@intrinsic
def _bits_intrinsic(typingctx: Any, x: Any) -> Any:
    """The IEEE-754 bits of a float64 as an int64."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(types.int64))
    return types.int64(types.float64), codegen


@intrinsic
def _float_intrinsic(typingctx: Any, x: Any) -> Any:
    """The float64 whose IEEE-754 bits are the int64 ``x``."""
    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        return builder.bitcast(args[0], context.get_value_type(types.float64))
    return types.float64(types.int64), codegen


# what the jitted code calls them with (numba's typing sees the intrinsics themselves)
_bits = cast(Callable[[float], int], _bits_intrinsic)
_float = cast(Callable[[int], float], _float_intrinsic)


_LN2_HI = 6.93147180369123816490e-01  # ln 2 split so that k·_LN2_HI is exact for |k| < 2^11
_LN2_LO = 1.90821492927058770002e-10
_INV_LN2 = 1.0 / math.log(2.0)
_SQRT_HALF_BITS = 0x3FE6A09E667F3BCD  # bits of √½: mantissas are reduced into [√½, √2)
_MIN_NORMAL = 2.2250738585072014e-308
_TWO54 = 2.0**54
_INF_BITS = 0x7FF0000000000000
_NEG_ZERO_BITS = -0x8000000000000000


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def log_det(x: float) -> float:
    """``ln x`` for finite ``x > 0`` (subnormals included); abs. error ≤ 9e-16.

    ``x = 2^k·m`` with ``m ∈ [√½, √2)`` by integer arithmetic on the bits, then
    ``ln m = 2·atanh(f)``, ``f = (m−1)/(m+1)``, ``|f| ≤ 0.172``, by its series to f^19
    (truncation < 1e-17) and ``k·ln 2`` in two parts. Garbage for 0, negatives, inf, NaN:
    callers select those away."""
    sub = x < _MIN_NORMAL
    b = _bits(x * _TWO54 if sub else x)
    k = (b - _SQRT_HALF_BITS) >> 52
    m = _float(b - (k << 52))
    f = (m - 1.0) / (m + 1.0)
    s = f * f
    p = 1.0 / 19.0
    p = p * s + 1.0 / 17.0
    p = p * s + 1.0 / 15.0
    p = p * s + 1.0 / 13.0
    p = p * s + 1.0 / 11.0
    p = p * s + 1.0 / 9.0
    p = p * s + 1.0 / 7.0
    p = p * s + 1.0 / 5.0
    p = p * s + 1.0 / 3.0
    lm = 2.0 * f + (2.0 * f * s) * p
    kf = np.float64(k - 54 if sub else k)
    return kf * _LN2_HI + (lm + kf * _LN2_LO)


@njit(cache=True, nogil=True, error_model="numpy", inline="always")
def exp_det(x: float) -> float:
    """``e^x``; rel. error ≤ 2.3e-16, 0 below −745.2 and inf above 709.8 like ``math.exp``
    (subnormal results are kept). ``x = k·ln 2 + r``, ``|r| ≤ ½ ln 2``, ``e^r`` by its
    Taylor polynomial to r^13 (truncation < 2e-17), ``2^k`` built from two exponent
    fields so that the subnormal range needs no branch."""
    xc = min(max(x, -746.0), 710.0)
    kf = np.rint(xc * _INV_LN2)
    r = (xc - kf * _LN2_HI) - kf * _LN2_LO
    p = 1.0 / 6227020800.0
    p = p * r + 1.0 / 479001600.0
    p = p * r + 1.0 / 39916800.0
    p = p * r + 1.0 / 3628800.0
    p = p * r + 1.0 / 362880.0
    p = p * r + 1.0 / 40320.0
    p = p * r + 1.0 / 5040.0
    p = p * r + 1.0 / 720.0
    p = p * r + 1.0 / 120.0
    p = p * r + 1.0 / 24.0
    p = p * r + 1.0 / 6.0
    p = p * r + 0.5
    p = p * r + 1.0
    p = p * r + 1.0
    k = np.int64(kf)
    k1 = k >> 1
    y = (p * _float(int((k1 + 1023) << 52))) * _float(int((k - k1 + 1023) << 52))
    if x > 709.782712893384:
        y = math.inf
    return y


@njit(cache=True, nogil=True, error_model="numpy")
def quantise(probs: np.ndarray, qmin: int, q: np.ndarray) -> bool:
    """``q_i = rint((ln p_i − ln p_max) / δ)`` (zeros → below the floor); False if the values are
    not finite, negative or all zero. Checks and peak on the int64 bits (ordered like non-negative
    floats; −0.0 mapped to 0): integer maxima vectorise, a float maximum without ``fastmath`` not."""
    n = probs.shape[0]
    bmax = 0
    bmin = 0
    for i in range(n):
        b = _bits(probs[i])
        b = 0 if b == _NEG_ZERO_BITS else b
        bmax = max(bmax, b)
        bmin = min(bmin, b)
    if bmin < 0 or bmax >= _INF_BITS or bmax == 0:
        return False
    lmax = log_det(_float(bmax))
    inv = 1.0 / DELTA
    low = np.int64(qmin - 1)
    for i in range(n):
        p = probs[i]
        c = np.int64(np.rint((log_det(p) - lmax) * inv))
        q[i] = c if p > 0.0 else low
    return True


@njit(cache=True, nogil=True)
def qwindow(q: np.ndarray, m: int, qmin: int) -> tuple[int, int]:
    """``(a, z)``: the outermost of the first ``m`` cells with ``q >= qmin`` (the peak,
    q = 0, always qualifies; interior cells below the floor are clamped by the caller)."""
    a = 0
    while a < m - 1 and q[a] < qmin:
        a += 1
    z = m - 1
    while z > a and q[z] < qmin:
        z -= 1
    return a, z


@njit(cache=True, nogil=True, inline="always")
def sum8(x: np.ndarray, start: int, stop: int) -> float:
    """``Σ x[start:stop]`` over 8 interleaved partial sums (the < 8 cells left go to the total),
    added in a fixed order: 8 chains run in vector registers where one sum is latency-bound, and
    the order is the code's, not the compiler's or the CPU's."""
    s0 = s1 = s2 = s3 = s4 = s5 = s6 = s7 = 0.0
    t = start
    while t + 8 <= stop:
        s0 += x[t]
        s1 += x[t + 1]
        s2 += x[t + 2]
        s3 += x[t + 3]
        s4 += x[t + 4]
        s5 += x[t + 5]
        s6 += x[t + 6]
        s7 += x[t + 7]
        t += 8
    total = ((s0 + s1) + (s2 + s3)) + ((s4 + s5) + (s6 + s7))
    while t < stop:
        total += x[t]
        t += 1
    return total


@njit(cache=True, nogil=True, error_model="numpy")
def dequantise(q: np.ndarray, a: int, cnt: int, out: np.ndarray) -> None:
    """``out[t] = exp(q[a + t]·δ) / Σ`` for t < cnt (decode; the sum by ``sum8``)."""
    qa = q[a : a + cnt]
    for t in range(cnt):
        out[t] = exp_det(qa[t] * DELTA)
    inv = 1.0 / sum8(out, 0, cnt)
    for t in range(cnt):
        out[t] *= inv


@njit(cache=True, nogil=True)
def canonicalise_row(row: np.ndarray, bounds: np.ndarray, qmin: int, codes: np.ndarray) -> bool:
    """Replace the window ``row[bounds[0] : bounds[1] + 1]`` by ``decode(encode(·))`` in place:
    quantise, zero edge cells below the floor, clamp interior ones to it, dequantise; ``bounds``
    receives the new window, ``codes`` (int64, as long as ``row``) is scratch. False (row
    untouched) for what ``encode`` rejects: non-finite, negative or only zero values."""
    lo = int(bounds[0])
    hi = int(bounds[1])
    m = hi - lo + 1
    q = codes[lo : hi + 1]
    if not quantise(row[lo : hi + 1], qmin, q):
        return False
    a, z = qwindow(q, m, qmin)
    inner = q[a : z + 1]
    for t in range(inner.shape[0]):
        inner[t] = max(inner[t], qmin)
    for x in range(lo, lo + a):
        row[x] = 0.0
    for x in range(lo + z + 1, hi + 1):
        row[x] = 0.0
    dequantise(q, a, z - a + 1, row[lo + a : lo + z + 1])
    bounds[0] = lo + a
    bounds[1] = lo + z
    return True


def canonical(belief: np.ndarray) -> np.ndarray:
    """``decode(encode(belief))`` without the bytes: ``[lo, rounds, p...]`` quantised, by
    ``canonicalise_row`` on the window."""
    b = np.ascontiguousarray(belief, dtype=np.float64)
    if b.ndim != 1 or b.shape[0] < 3:
        raise ValueError("not a cowan belief")
    row = b[2:].copy()
    bounds = np.array([0, row.shape[0] - 1], dtype=np.int64)
    if not canonicalise_row(row, bounds, QMIN, np.empty(row.shape[0], dtype=np.int64)):
        raise ValueError("cowan belief must hold finite non-negative probabilities")
    lo, hi = bounds.tolist()
    return np.concatenate(([float(int(b[0]) + lo), float(int(b[1]))], row[lo : hi + 1]))


__all__ = [
    "DELTA",
    "MAX_CELLS",
    "QMIN",
    "canonical",
    "canonicalise_row",
    "dequantise",
    "exp_det",
    "floor_q",
    "log_det",
    "quantise",
    "qwindow",
    "sum8",
]
