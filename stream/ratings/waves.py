"""Conflict-free wave scheduling of 1-v-1 matches.

Why: a batch of matches means "one at a time, in arrival order", yet matches between disjoint
players commute. Each match in the wave after the last that touched either player is the
shallowest schedule keeping every player's matches in order, and a wave's matches touch distinct
players, so a kernel may run them in parallel, bit-identical to the sequential run.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import numpy as np
from numba import njit

from stream.ratings.base import IntArray


@njit(cache=True, nogil=True)
def _waves(a: np.ndarray, b: np.ndarray, nplayers: int) -> np.ndarray:
    last = np.full(nplayers, -1, dtype=np.int64)
    wave = np.empty(a.shape[0], dtype=np.int64)
    for m in range(a.shape[0]):
        w = max(last[a[m]], last[b[m]]) + 1
        wave[m] = w
        last[a[m]] = w
        last[b[m]] = w
    return wave


def wave_index(a: IntArray, b: IntArray, nplayers: int | None = None) -> IntArray:
    """Wave of each match ``(a[m], b[m])``: 1 + the last wave that touched either player."""
    a = np.ascontiguousarray(a, dtype=np.int64)
    b = np.ascontiguousarray(b, dtype=np.int64)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError("a and b must be 1-D arrays of one length")
    if a.shape[0] == 0:
        return np.zeros(0, dtype=np.int64)
    if nplayers is None:
        nplayers = int(max(a.max(), b.max())) + 1
    if min(a.min(), b.min()) < 0 or max(a.max(), b.max()) >= nplayers:
        raise ValueError("player index out of range")
    return np.asarray(_waves(a, b, nplayers))


def schedule_waves(
    a: IntArray, b: IntArray, nplayers: int | None = None
) -> tuple[IntArray, IntArray, IntArray]:
    """``(wave, order, starts)``: ``order[starts[w]:starts[w+1]]`` are the matches of wave
    ``w`` in arrival order (a stable sort by wave)."""
    wave = wave_index(a, b, nplayers)
    order = np.argsort(wave, kind="stable").astype(np.int64)
    nw = int(wave.max()) + 1 if wave.shape[0] else 0
    starts = np.zeros(nw + 1, dtype=np.int64)
    np.cumsum(np.bincount(wave, minlength=nw), out=starts[1:])
    return wave, order, starts


__all__ = ["schedule_waves", "wave_index"]
