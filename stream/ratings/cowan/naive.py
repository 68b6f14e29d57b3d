"""The general algorithm of Cowan's paper (§4.1) by plain loops: the oracle of the fast kernels.

It forms the joint table of both players' distributions explicitly, O(|A|·|B|), and works on
arrays of ``Fraction`` as well (exact arithmetic), which is how the paper's Example 4.1 is
checked. It shares no code with ``kernels``.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import numpy.typing as npt

from stream.ratings.base import RatingError

Luck = Callable[[Any, Any], Any]


def posterior_naive(
    xs_a: npt.ArrayLike,
    p_a: npt.ArrayLike,
    xs_b: npt.ArrayLike,
    p_b: npt.ArrayLike,
    luck: Luck,
    score: float,
    draw_form: str = "paper",
) -> tuple[np.ndarray, np.ndarray]:
    """The general algorithm on arbitrary finite supports: both posteriors, no drift.

    ``luck(x, y)`` is the (vectorised) probability that a player of skill x beats one of
    skill y; ``score`` is A's score in [0, 1]. Works on object arrays of ``Fraction`` too
    (exact arithmetic for scores 0 and 1), which is how the paper's Example 4.1 is checked.
    The joint table ``ρ_A(x_i) ρ_B(y_k) L(x_i, y_k)`` is formed explicitly: O(|A|·|B|).
    """
    xa = np.asarray(xs_a)
    xb = np.asarray(xs_b)
    pa = np.asarray(p_a)
    pb = np.asarray(p_b)
    if not 0.0 <= float(score) <= 1.0:
        raise RatingError(f"score must lie in [0, 1] (got {score})")
    if draw_form not in ("paper", "blatmmr"):
        raise RatingError(f"draw_form must be 'paper' or 'blatmmr' (got {draw_form!r})")
    win = luck(xa[:, None], xb[None, :])  # P(A beats B | x_i, y_k)
    lose = luck(xb[None, :], xa[:, None])  # P(B beats A | x_i, y_k)
    if score == 1:
        table = win
    elif score == 0:
        table = lose
    elif draw_form == "paper":
        s = float(score)
        table = np.asarray(win, dtype=float) ** s * np.asarray(lose, dtype=float) ** (1.0 - s)
    else:
        s = float(score)
        w, lo = np.asarray(win, dtype=float), np.asarray(lose, dtype=float)
        pa_f, pb_f = pa.astype(float), pb.astype(float)
        like_a = (w @ pb_f) ** s * (lo @ pb_f) ** (1.0 - s)
        like_b = (pa_f @ w) ** s * (pa_f @ lo) ** (1.0 - s)
        post_a, post_b = pa_f * like_a, pb_f * like_b
        return post_a / post_a.sum(), post_b / post_b.sum()
    joint = pa[:, None] * pb[None, :] * table
    rows = joint.sum(axis=1)
    cols = joint.sum(axis=0)
    return rows / rows.sum(), cols / cols.sum()


def drift_naive(p: npt.ArrayLike, taps: npt.ArrayLike) -> np.ndarray:
    """Convolve ``p`` (on consecutive support points) with the symmetric kernel ``taps``
    (odd length, centred), drop what falls off the support, renormalise — the paper's
    kernel step on a bounded support, by plain loops (works on ``Fraction`` arrays)."""
    pa = np.asarray(p)
    ta = np.asarray(taps)
    half = (ta.shape[0] - 1) // 2
    if pa.dtype != object and ta.dtype != object:
        full = np.convolve(pa.astype(float), ta.astype(float))[half : half + pa.shape[0]]
        return full / full.sum()
    out = np.zeros(pa.shape[0], dtype=pa.dtype) * pa[:1].sum()
    for i in range(pa.shape[0]):
        if pa[i] == 0:
            continue
        for t in range(ta.shape[0]):
            x = i + t - half
            if 0 <= x < pa.shape[0]:
                out[x] = out[x] + pa[i] * ta[t]
    return out / out.sum()
