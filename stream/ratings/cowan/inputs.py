"""A batch of Cowan matches checked before any kernel runs (a kernel would read out of bounds or
rate nonsense), and the tables of its partial scores stacked."""

from __future__ import annotations

import numpy as np

from stream.ratings.base import FloatArray, RatingError


def check_advantages(advantages: FloatArray | None, count: int, limit: float) -> np.ndarray | None:
    """A batch's side advantages as float64, None when there are none (absent or all 0: the
    matches rate as without them, with the register sweeps); ``RatingError`` unless one per
    match, each finite and at most ``limit`` (the grid's width, 2M) in size."""
    if advantages is None:
        return None
    advs = np.ascontiguousarray(advantages, dtype=np.float64)
    if advs.shape != (count,):
        raise RatingError(f"cowan: {count} matches but advantages of shape {advs.shape}")
    if not np.any(advs):
        return None
    if not bool(np.all(np.abs(advs) <= limit)):  # also NaN
        raise RatingError(f"cowan: a side advantage must be finite and within ±{limit:g} (2M)")
    return advs


def stack_rows(rows: list[np.ndarray]) -> np.ndarray:
    """Rows of different lengths as one zero-padded matrix."""
    if len(rows) == 1:
        return rows[0][None, :]
    out = np.zeros((len(rows), max(r.shape[0] for r in rows)))
    for i, r in enumerate(rows):
        out[i, : r.shape[0]] = r
    return out


def check_matches(a: np.ndarray, b: np.ndarray, scores: np.ndarray, nplayers: int) -> None:
    """``RatingError`` unless one column each, indices of ``nplayers`` players, no one against
    themself, scores finite in [0, 1]."""
    if not (a.shape == b.shape == scores.shape) or a.ndim != 1:
        raise RatingError("cowan: a, b and scores must be 1-D arrays of one length")
    if a.shape[0] == 0:
        return
    if a.shape[0] == 1:  # scalar checks: numpy reductions cost more than the rest of the call
        ia, ib, sc = int(a[0]), int(b[0]), float(scores[0])
        if not (0 <= ia < nplayers and 0 <= ib < nplayers):
            raise RatingError("cowan: player index out of range")
        if ia == ib:
            raise RatingError(f"cowan: match 0 pits player {ia} against itself")
        if not 0.0 <= sc <= 1.0:  # also rejects NaN
            raise RatingError("cowan: scores must be finite and lie in [0, 1]")
        return
    if a.min() < 0 or b.min() < 0 or a.max() >= nplayers or b.max() >= nplayers:
        raise RatingError("cowan: player index out of range")
    bad = np.flatnonzero(a == b)
    if bad.size:
        raise RatingError(f"cowan: match {int(bad[0])} pits player {int(a[bad[0]])} against itself")
    if not np.all(np.isfinite(scores)) or scores.min() < 0.0 or scores.max() > 1.0:
        raise RatingError("cowan: scores must be finite and lie in [0, 1]")
