"""Cowan beliefs as windows on the grid: their moments, and the window of belief i of many
(``flat[offsets[i]:offsets[i + 1]]``, ``[lo, rounds, p_lo, ..., p_hi]``)."""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numpy as np
from numba import njit

HEADER = 2  # belief[0] = lo, belief[1] = rounds


@njit(cache=True, nogil=True)
def moments(probs: np.ndarray, grid: np.ndarray, lo: int) -> tuple[float, float]:
    """``(mean, sd)`` of a window on ``grid[lo:]``, each sum over four interleaved partial sums
    added as ``(s0 + s1) + (s2 + s3)``: a fixed order, so every caller gets the same bits."""
    m = probs.shape[0]
    top = m - m % 4
    s0 = s1 = s2 = s3 = 0.0
    for i in range(0, top, 4):
        s0 += probs[i] * grid[lo + i]
        s1 += probs[i + 1] * grid[lo + i + 1]
        s2 += probs[i + 2] * grid[lo + i + 2]
        s3 += probs[i + 3] * grid[lo + i + 3]
    for i in range(top, m):
        s0 += probs[i] * grid[lo + i]
    mean = (s0 + s1) + (s2 + s3)
    s0 = s1 = s2 = s3 = 0.0
    for i in range(0, top, 4):
        d0 = grid[lo + i] - mean
        d1 = grid[lo + i + 1] - mean
        d2 = grid[lo + i + 2] - mean
        d3 = grid[lo + i + 3] - mean
        s0 += probs[i] * (d0 * d0)
        s1 += probs[i + 1] * (d1 * d1)
        s2 += probs[i + 2] * (d2 * d2)
        s3 += probs[i + 3] * (d3 * d3)
    for i in range(top, m):
        d0 = grid[lo + i] - mean
        s0 += probs[i] * (d0 * d0)
    var = (s0 + s1) + (s2 + s3)
    return mean, math.sqrt(max(var, 0.0))


@njit(cache=True, nogil=True, inline="always")
def window_at(flat: np.ndarray, offsets: np.ndarray, i: int, cells: int) -> tuple[int, int]:
    """``(lo, cells in the window)`` of belief ``flat[offsets[i]:offsets[i + 1]]``, or
    ``(-1, 0)`` where ``window`` (or ``int``) would reject it."""
    o = offsets[i]
    m = offsets[i + 1] - o - HEADER
    if m <= 0:
        return -1, 0
    lo_f = flat[o]
    if not abs(lo_f) < 2.0**62:  # NaN/inf: int() raises
        return -1, 0
    lo = int(lo_f)
    if lo < 0 or lo + m > cells:
        return -1, 0
    return lo, m
