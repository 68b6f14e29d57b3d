"""Compact, deterministic, idempotent lossy codec for Cowan beliefs.

Why this format
---------------
A belief is a smooth distribution on ~300–850 grid cells; float64 would cost 8 bytes a
cell. Its log-density is smooth, so we store it quantised and predictively coded:

* window: the cells ``[first, last]`` outside of which every cell is below
  ``τ = 1e-12 / 4097`` of the peak (so the dropped mass is ≤ 1e-12 whatever the shape,
  for grids up to n = 4096);
* ``q_i = round((ln p_i − ln p_max) / δ)`` with ``δ = 2^−24`` (per-cell relative error
  ≤ δ/2 ≈ 3e-8 — finer than float32's rounding — and total-variation distance ~1e-8;
  a coarser δ hardly saves bytes, since the residuals are mostly rounding noise);
* residuals of the fourth-order predictor ``4q_{i−1} − 6q_{i−2} + 4q_{i−3} − q_{i−4}``
  (exact integer arithmetic; the true fourth differences of our log-densities are ~2
  quanta, so residuals are mostly rounding noise of a few quanta), zig-zag coded as
  *nibble* varints (3 data bits + a continuation bit): ~0.7 byte per cell.

Layout: ``0x43`` tag, LEB128 varints ``lo``, ``m`` (cells), ``rounds``, then the ``m``
residuals as nibbles, low nibble first, padded with a zero nibble to a whole byte.
Decoding is ``exp(q·δ)`` normalised. Because the quantisation is anchored
to the peak and the window rule works on the integers ``q``, re-encoding a decoded belief
reproduces the same bytes: ``decode(encode(decode(encode(b)))) == decode(encode(b))``.

The quantise / window / dequantise steps are ``stream.ratings._cowan_quant``'s njit
functions, which Cowan's kernels also run after every match: beliefs the system returns
are already ``decode(encode(b))`` bit for bit (``Cowan.canonical_state``).
"""

from __future__ import annotations

import numpy as np
from numba import njit

from stream.ratings._cowan_quant import DELTA, QMIN, dequantise, quantise, qwindow
from stream.ratings.base import Belief
from stream.state.codecs import register_codec

TAG = 0x43
#: the quantisation core lives in ``stream.ratings._cowan_quant``: Cowan's kernels run the
#: very same functions after every match, so beliefs are fixed points of this codec
_QMIN = QMIN


@njit(cache=True, nogil=True)
def _put(buf: np.ndarray, pos: int, value: int) -> int:
    v = value
    while v >= 0x80:
        buf[pos] = (v & 0x7F) | 0x80
        v >>= 7
        pos += 1
    buf[pos] = v
    return pos + 1


@njit(cache=True, nogil=True)
def _predict(t: int, q1: int, q2: int, q3: int, q4: int) -> int:
    """Order-min(t, 4) polynomial extrapolation from the previous quantised values."""
    if t == 0:
        return 0
    if t == 1:
        return q1
    if t == 2:
        return 2 * q1 - q2
    if t == 3:
        return 3 * q1 - 3 * q2 + q3
    return 4 * q1 - 6 * q2 + 4 * q3 - q4


@njit(cache=True, nogil=True)
def _encode(lo: int, rounds: int, q: np.ndarray, qmin: int) -> np.ndarray:
    # window on the integers: outermost cells with q >= qmin
    a, z = qwindow(q, q.shape[0], qmin)
    cnt = z - a + 1
    # residuals as nibble varints: 3 data bits + a continuation bit per nibble
    nib = np.empty(24 * cnt + 2, dtype=np.uint8)
    k = 0
    q1 = 0
    q2 = 0
    q3 = 0
    q4 = 0
    for t in range(cnt):
        v = q[a + t]
        if v < qmin:
            v = qmin  # interior cell below the floor (only in multimodal beliefs)
        r = v - _predict(t, q1, q2, q3, q4)
        zz = (r << 1) ^ (r >> 63)
        while zz >= 8:
            nib[k] = (zz & 7) | 8
            zz >>= 3
            k += 1
        nib[k] = zz
        k += 1
        q4 = q3
        q3 = q2
        q2 = q1
        q1 = v
    if k & 1:
        nib[k] = 0
        k += 1
    buf = np.empty(16 + k // 2, dtype=np.uint8)
    buf[0] = TAG
    pos = _put(buf, 1, lo + a)
    pos = _put(buf, pos, cnt)
    pos = _put(buf, pos, rounds)
    for t in range(0, k, 2):
        buf[pos] = nib[t] | (nib[t + 1] << 4)
        pos += 1
    return buf[:pos]


@njit(cache=True, nogil=True)
def _get(buf: np.ndarray, pos: int) -> tuple[int, int]:
    v = 0
    shift = 0
    while True:
        byte = int(buf[pos])
        pos += 1
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            return v, pos
        shift += 7


@njit(cache=True, nogil=True)
def _decode(buf: np.ndarray) -> np.ndarray:
    lo, pos = _get(buf, 1)
    cnt, pos = _get(buf, pos)
    rounds, pos = _get(buf, pos)
    out = np.empty(2 + cnt)
    out[0] = lo
    out[1] = rounds
    qs = np.empty(cnt, dtype=np.int64)
    q1 = 0
    q2 = 0
    q3 = 0
    q4 = 0
    k = 2 * pos  # nibble cursor
    end = 2 * buf.shape[0]
    for t in range(cnt):
        zz = 0
        shift = 0
        while True:
            if k >= end:
                raise ValueError("truncated cowan belief")
            nb = (int(buf[k >> 1]) >> (4 * (k & 1))) & 15
            k += 1
            zz |= (nb & 7) << shift
            shift += 3
            if nb < 8:
                break
        r = (zz >> 1) ^ -(zz & 1)
        v = _predict(t, q1, q2, q3, q4) + r
        qs[t] = v
        q4 = q3
        q3 = q2
        q2 = q1
        q1 = v
    if (k + 1) // 2 != buf.shape[0]:
        raise ValueError("trailing bytes in a cowan belief")
    dequantise(qs, 0, cnt, out[2:])
    return out


class CowanCodec:
    """See the module docstring. Lossy (``lossless = False``), deterministic, idempotent."""

    name = "cowan-q24"
    lossless = False

    def encode(self, belief: Belief) -> bytes:
        b = np.asarray(belief, dtype=np.float64)
        if b.ndim != 1 or b.shape[0] < 3:
            raise ValueError("not a cowan belief")
        q = np.empty(b.shape[0] - 2, dtype=np.int64)
        if not quantise(b[2:], _QMIN, q):
            raise ValueError("cowan belief must hold finite non-negative probabilities")
        return bytes(_encode(int(b[0]), int(b[1]), q, _QMIN))

    def decode(self, data: bytes) -> Belief:
        if not data or data[0] != TAG:
            raise ValueError(f"not a cowan belief (tag {data[:1]!r})")
        return np.asarray(_decode(np.frombuffer(data, dtype=np.uint8)))


register_codec("cowan", CowanCodec)

__all__ = ["DELTA", "CowanCodec"]
