"""Compact, deterministic, idempotent lossy codec for Cowan beliefs.

Why this format
---------------
A belief is a smooth distribution on ~300–850 grid cells (8 bytes a cell as float64) with a
smooth log-density, so it is stored quantised and predictively coded:

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
Decoding is ``exp(q·δ)`` normalised. The quantisation is anchored to the peak and the window
rule works on the integers ``q``, so re-encoding a decoded belief reproduces its bytes. The steps
are ``quant``'s, which the kernels also run after every match: beliefs the system returns are
already ``decode(encode(b))`` bit for bit (``CowanFastPath.canonical_state``).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Sequence

import numpy as np
from numba import njit

from stream.ratings.base import Belief, flat_of, offsets_of, split
from stream.ratings.codec import CodecBase
from stream.ratings.cowan.quant import _ZERO, DELTA, QMIN, dequantise, quantise, qwindow

TAG = 0x43


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
def _encode_into(lo: int, rounds: int, q: np.ndarray, qmin: int, nib: np.ndarray, buf: np.ndarray, pos: int) -> int:
    """Write one encoded belief at ``buf[pos:]``; returns the end. ``nib`` is scratch of
    at least ``24·len(q) + 2`` nibbles, ``buf`` has room for ``16 + 12·len(q) + 1`` bytes."""
    # window on the integers: outermost cells with q >= qmin
    a, z = qwindow(q, q.shape[0], qmin)
    cnt = z - a + 1
    # residuals as nibble varints: 3 data bits + a continuation bit per nibble
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
    buf[pos] = TAG
    pos = _put(buf, pos + 1, lo + a)
    pos = _put(buf, pos, cnt)
    pos = _put(buf, pos, rounds)
    for t in range(0, k, 2):
        buf[pos] = nib[t] | (nib[t + 1] << 4)
        pos += 1
    return pos


@njit(cache=True, nogil=True)
def _with_room(buf: np.ndarray, pos: int, room: int) -> np.ndarray:
    """``buf`` if it has ``room`` bytes after ``pos``, else a copy of ``buf[:pos]`` in one at
    least twice as large."""
    if pos + room <= buf.shape[0]:
        return buf
    grown = np.empty(max(2 * buf.shape[0], pos + room), dtype=np.uint8)
    grown[:pos] = buf[:pos]
    return grown


@njit(cache=True, nogil=True)
def _encode(lo: int, rounds: int, q: np.ndarray, qmin: int) -> np.ndarray:
    cnt = q.shape[0]
    nib = np.empty(24 * cnt + 2, dtype=np.uint8)
    buf = np.empty(16 + 12 * cnt + 1, dtype=np.uint8)
    pos = _encode_into(lo, rounds, q, qmin, nib, buf, _ZERO())
    return buf[:pos]


@njit(cache=True, nogil=True)
def _encode_many(flat: np.ndarray, offsets: np.ndarray, qmin: int) -> tuple[np.ndarray, np.ndarray, int]:
    """Every belief ``flat[offsets[i]:offsets[i + 1]]`` encoded back to back:
    ``(bytes, byte offsets, -1)``, or ``(_, _, i)`` for the first belief ``encode``
    would reject (the caller lets ``encode`` raise). Same operations as ``encode``."""
    n = offsets.shape[0] - 1
    ends = np.zeros(n + 1, dtype=np.int64)
    widest = 0
    for i in range(n):
        m = offsets[i + 1] - offsets[i]
        if m < 3:
            return np.empty(0, dtype=np.uint8), ends, i
        widest = max(widest, m - 2)
    q = np.empty(widest, dtype=np.int64)
    nib = np.empty(24 * widest + 2, dtype=np.uint8)
    room = 16 + 12 * widest + 1  # the most one belief can take
    buf = np.empty(max(2 * room, 4 * (offsets[n] - offsets[0])), dtype=np.uint8)
    pos = 0
    for i in range(n):
        o = offsets[i]
        m = offsets[i + 1] - o - 2
        lo = flat[o]
        rounds = flat[o + 1]
        if not (abs(lo) < 2.0**62 and abs(rounds) < 2.0**62):
            return buf, ends, i  # NaN/inf (int() raises) or out of int64: per-item path
        if not quantise(flat[o + 2 : o + 2 + m], qmin, q[:m]):
            return buf, ends, i
        buf = _with_room(buf, pos, room)
        pos = _encode_into(int(lo), int(rounds), q[:m], qmin, nib, buf, pos)
        ends[i + 1] = pos
    return buf[:pos], ends, -1


@njit(cache=True, nogil=True)
def _get(buf: np.ndarray, pos: int, end: int) -> tuple[int, int]:
    """A LEB128 varint at ``buf[pos:end]``: ``(value, next pos)``, next pos −1 if truncated."""
    v = 0
    shift = 0
    while True:
        if pos >= end or shift > 56:
            return 0, -1
        byte = int(buf[pos])
        pos += 1
        v |= (byte & 0x7F) << shift
        if byte < 0x80:
            return v, pos
        shift += 7


@njit(cache=True, nogil=True)
def _header(buf: np.ndarray, start: int, end: int) -> tuple[int, int, int, int]:
    """``(lo, cells, rounds, pos of the first residual)`` of the belief at ``buf[start:end]``
    (after its tag); pos is −1 if the header is truncated."""
    lo, pos = _get(buf, start + 1, end)
    if pos < 0:
        return 0, 0, 0, -1
    cnt, pos = _get(buf, pos, end)
    if pos < 0:
        return 0, 0, 0, -1
    rounds, pos = _get(buf, pos, end)
    return lo, cnt, rounds, pos


@njit(cache=True, nogil=True)
def _decode_into(buf: np.ndarray, pos: int, end: int, cnt: int, qs: np.ndarray, out: np.ndarray) -> int:
    """Decode ``cnt`` residuals from ``buf[pos:end]`` into ``out`` (``cnt`` cells; ``qs``
    scratch of ≥ ``cnt``): 0, or 1 if truncated, 2 if bytes are left over."""
    q1 = 0
    q2 = 0
    q3 = 0
    q4 = 0
    k = 2 * pos  # nibble cursor
    stop = 2 * end
    for t in range(cnt):
        zz = 0
        shift = 0
        while True:
            if k >= stop:
                return 1
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
    if (k + 1) // 2 != end:
        return 2
    dequantise(qs, _ZERO(), cnt, out)
    return 0


@njit(cache=True, nogil=True)
def _decode(buf: np.ndarray) -> tuple[np.ndarray, int]:
    """``(belief, 0)``, or ``(_, status)``: 1 truncated, 2 trailing bytes."""
    end = buf.shape[0]
    lo, cnt, rounds, pos = _header(buf, _ZERO(), end)
    if pos < 0 or cnt > 2 * end:  # every cell takes at least one nibble
        return np.empty(0), 1
    out = np.empty(2 + cnt)
    out[0] = lo
    out[1] = rounds
    qs = np.empty(cnt, dtype=np.int64)
    status = _decode_into(buf, pos, end, cnt, qs, out[2:])
    return out, status


@njit(cache=True, nogil=True)
def _decode_many(buf: np.ndarray, offsets: np.ndarray) -> tuple[np.ndarray, np.ndarray, int]:
    """Every belief at ``buf[offsets[i]:offsets[i + 1]]`` decoded back to back:
    ``(values, value offsets, -1)``, or ``(_, _, i)`` for the first one ``decode`` would
    reject (the caller lets ``decode`` raise). Same operations as ``decode``."""
    n = offsets.shape[0] - 1
    ends = np.zeros(n + 1, dtype=np.int64)
    widest = 0
    for i in range(n):
        s = offsets[i]
        e = offsets[i + 1]
        if e <= s or buf[s] != TAG:
            return np.empty(0), ends, i
        lo, cnt, rounds, pos = _header(buf, s, e)
        if pos < 0 or cnt > 2 * (e - s):
            return np.empty(0), ends, i
        ends[i + 1] = ends[i] + 2 + cnt
        widest = max(widest, cnt)
    out = np.empty(ends[n])
    qs = np.empty(widest, dtype=np.int64)
    for i in range(n):
        s = offsets[i]
        e = offsets[i + 1]
        lo, cnt, rounds, pos = _header(buf, s, e)
        o = ends[i]
        out[o] = lo
        out[o + 1] = rounds
        if _decode_into(buf, pos, e, cnt, qs, out[o + 2 : o + 2 + cnt]) != 0:
            return out, ends, i
    return out, ends, -1


class CowanCodec(CodecBase):
    """See the module docstring. Lossy (``lossless = False``), deterministic, idempotent."""

    name = "cowan-q24"
    lossless = False

    def encode(self, belief: Belief) -> bytes:
        b = np.asarray(belief, dtype=np.float64)
        if b.ndim != 1 or b.shape[0] < 3:
            raise ValueError("not a cowan belief")
        q = np.empty(b.shape[0] - 2, dtype=np.int64)
        if not quantise(b[2:], QMIN, q):
            raise ValueError("cowan belief must hold finite non-negative probabilities")
        return bytes(_encode(int(b[0]), int(b[1]), q, QMIN))

    def decode(self, data: bytes) -> Belief:
        if not data or data[0] != TAG:
            raise ValueError(f"not a cowan belief (tag {data[:1]!r})")
        out, status = _decode(np.frombuffer(data, dtype=np.uint8))
        if status:
            raise ValueError("truncated cowan belief" if status == 1 else "trailing bytes in a cowan belief")
        return np.asarray(out)

    def encode_many(self, beliefs: Sequence[Belief]) -> list[bytes]:
        """One njit call for the whole batch; byte for byte ``[encode(b) for b in beliefs]``."""
        n = len(beliefs)
        if n < 2:
            return [self.encode(b) for b in beliefs]
        gathered = flat_of(beliefs)
        if gathered is None:
            return super().encode_many(beliefs)  # 0-d or mixed shapes: let encode say why
        buf, ends, bad = _encode_many(*gathered, QMIN)
        if bad >= 0:
            return super().encode_many(beliefs)  # raises encode's own error
        return split(buf.tobytes(), ends)

    def decode_many(self, datas: Sequence[bytes]) -> list[Belief]:
        """One njit call for the whole batch; bit for bit ``[decode(d) for d in datas]``
        (the arrays are non-overlapping views of one buffer)."""
        n = len(datas)
        if n < 2:
            return [self.decode(d) for d in datas]
        out, ends, bad = _decode_many(np.frombuffer(b"".join(datas), dtype=np.uint8), offsets_of(datas))
        if bad >= 0:
            return super().decode_many(datas)  # raises decode's own error
        return split(out, ends)


__all__ = ["DELTA", "CowanCodec"]
