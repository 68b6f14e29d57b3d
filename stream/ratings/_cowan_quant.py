"""The quantisation core of Cowan beliefs, shared by the codec and the kernels.

Why a module of its own
-----------------------
A Cowan belief is *stored* quantised (``stream.state.cowan_codec``): log-densities
relative to the peak rounded to multiples of ``δ = 2^−24``, cells below a fixed floor
dropped from the window edges. If the kernels carried unquantised beliefs from match to
match and the quantisation happened only when a batch is stored, results would depend on
how matches are batched. So the quantised belief *is* the state: every belief Cowan
returns is already ``decode(encode(b))``, bit for bit. That is only true if the kernels
and the codec do exactly the same floating-point operations, hence one set of ``njit``
functions both import:

* ``quantise`` — ``q_i = rint((ln p_i − ln p_max) / δ)`` (encode);
* ``qwindow`` — the outermost cells with ``q ≥ QMIN`` (encode's window rule);
* ``dequantise`` — ``exp(q·δ)`` normalised by its in-order sum (decode);
* ``canonicalise_row`` — all three on a dense row in place (the kernels, after each match),
  and ``canonical`` — the same on a belief array (the prior, the naive path).

Nothing here uses ``fastmath``: results must not depend on vectorisation or alignment.
"""

from __future__ import annotations

import math

import numpy as np
from numba import njit

DELTA = 2.0**-24
#: per-cell floor relative to the peak, for grids up to this many cells (n + 1)
MAX_CELLS = 4097


def floor_q(cells: int) -> int:
    """The most negative q kept at a window edge: cells below τ·p_max, τ = 1e-12/cells."""
    return -math.floor(math.log(cells / 1e-12) / DELTA)


#: a fixed floor (not one derived from the belief) keeps re-encoding idempotent
QMIN = floor_q(MAX_CELLS)


@njit(cache=True, nogil=True)
def quantise(probs: np.ndarray, qmin: int, q: np.ndarray) -> bool:
    """``q_i = rint((ln p_i − ln p_max) / δ)`` (zeros → below the floor); False if the
    values are not finite, negative or all zero."""
    pmax = 0.0
    for p in probs:
        if not (p >= 0.0 and p < math.inf):
            return False
        pmax = max(pmax, p)
    if pmax <= 0.0:
        return False
    lmax = math.log(pmax)
    inv = 1.0 / DELTA
    for i in range(probs.shape[0]):
        p = probs[i]
        q[i] = np.int64(np.rint((math.log(p) - lmax) * inv)) if p > 0.0 else qmin - 1
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


@njit(cache=True, nogil=True)
def dequantise(q: np.ndarray, a: int, cnt: int, out: np.ndarray) -> None:
    """``out[t] = exp(q[a + t]·δ) / Σ`` for t < cnt, the sum taken in order (decode)."""
    total = 0.0
    for t in range(cnt):
        e = math.exp(q[a + t] * DELTA)
        out[t] = e
        total += e
    inv = 1.0 / total
    for t in range(cnt):
        out[t] *= inv


@njit(cache=True, nogil=True)
def canonicalise_row(row: np.ndarray, bounds: np.ndarray, qmin: int, codes: np.ndarray) -> bool:
    """Replace the window ``row[bounds[0] : bounds[1] + 1]`` by ``decode(encode(·))`` in
    place: quantise, drop edge cells below the floor (zeroing them), clamp interior ones to
    it, dequantise; ``bounds`` receives the new window. False (row untouched) if the window
    holds non-finite, negative or only zero values — what ``encode`` rejects.

    ``codes`` (int64, as long as ``row``) is the scratch for the quantised values; on True
    ``codes[bounds[0] : bounds[1] + 1]`` holds the new window's, exactly the ``q`` that
    ``encode`` would compute again from the new row (``CowanCodec.encode_coded`` writes the
    bytes from them: no logarithm per cell a second time)."""
    lo = int(bounds[0])
    hi = int(bounds[1])
    m = hi - lo + 1
    q = codes[lo : hi + 1]
    if not quantise(row[lo : hi + 1], qmin, q):
        return False
    a, z = qwindow(q, m, qmin)
    for t in range(a, z + 1):
        if q[t] < qmin:
            q[t] = qmin
    for x in range(lo, lo + a):
        row[x] = 0.0
    for x in range(lo + z + 1, hi + 1):
        row[x] = 0.0
    dequantise(q, a, z - a + 1, row[lo + a : lo + z + 1])
    bounds[0] = lo + a
    bounds[1] = lo + z
    return True


@njit(cache=True, nogil=True)
def _canonical(belief: np.ndarray, qmin: int) -> np.ndarray:
    probs = belief[2:]
    m = probs.shape[0]
    q = np.empty(m, dtype=np.int64)
    if not quantise(probs, qmin, q):
        raise ValueError("cowan belief must hold finite non-negative probabilities")
    a, z = qwindow(q, m, qmin)
    for t in range(a, z + 1):
        if q[t] < qmin:
            q[t] = qmin
    out = np.empty(2 + z - a + 1)
    out[0] = int(belief[0]) + a
    out[1] = int(belief[1])
    dequantise(q, a, z - a + 1, out[2:])
    return out


def canonical(belief: np.ndarray) -> np.ndarray:
    """``decode(encode(belief))`` without the bytes: ``[lo, rounds, p...]`` quantised."""
    b = np.ascontiguousarray(belief, dtype=np.float64)
    if b.ndim != 1 or b.shape[0] < 3:
        raise ValueError("not a cowan belief")
    return np.asarray(_canonical(b, QMIN))


__all__ = [
    "DELTA",
    "MAX_CELLS",
    "QMIN",
    "canonical",
    "canonicalise_row",
    "dequantise",
    "floor_q",
    "quantise",
    "qwindow",
]
