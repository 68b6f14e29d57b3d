"""Cowan's luck function with a side advantage: the table of ``Λ(x_i + h, x_k)`` for one match.

A side advantage ``h`` makes A play as if its skill were ``h`` higher: ``Λ(x_i + h, x_k) =
g_h(i − k)``, ``g_h(d) = Λ(d·step + h, 0)``, ``step = 2M/n`` (docs/advantage.md, "Cowan"). Unless
``h`` is a whole number of steps this is a new function of ``d``, which the residual's sum of
exponentials (fitted at whole distances) does not give; so the match tabulates it and takes the
draw fallback's convolutions (``kernels._conv``). With ``h = 0`` nothing here runs.

Why a table of exponentials: ``h`` is learned, so ``g_h`` is made per match, and an ``exp`` per
value would cost more than the match, with bits that depend on the C library. With ``h = j·step +
r`` (``0 ≤ r < step``) and ``t = (d + j)·step + r``, each exponential is a fixed table times one of
two numbers of the match:

    e^(−t/s) = ex[d + j]·e^(−r/s)    (t ≥ 0),      e^(t/s) = ex[−d − j]·e^(r/s)    (t < 0),

``ex[k] = e^(−k·step/s)``, ``s`` the luck's scale. Both factors are ≤ ``e^(step/s)`` (no overflow)
and each branch decays in ``|t|`` (no cancellation). ``ex`` is correctly rounded
(``model.exp_exact``), the two numbers plain IEEE (``quant.exp_det``): the same bits on every CPU.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math

import numpy as np
from numba import njit

from stream.ratings.cowan.model import exp_exact
from stream.ratings.cowan.quant import exp_det

#: ``lpar[0]``: the luck function's form
LUCK_LOGISTIC = 0.0
LUCK_LAPLACE = 1.0


def luck_tables(n: int, step: float, scale: float, laplace: bool) -> tuple[np.ndarray, np.ndarray]:
    """``(ex, lpar)`` for ``shifted_luck``: ``ex[k] = e^(−k·step/scale)``, k = 0..2n + 1 (the
    farthest distance of a shift of at most ``2M`` from any cell), by ``exp_exact``, and
    ``lpar = [form, step, 1/scale]``."""
    k = np.arange(2 * n + 2, dtype=np.float64)
    ex = np.ascontiguousarray(exp_exact(-k * step / scale), dtype=np.float64)
    lpar = np.array([LUCK_LAPLACE if laplace else LUCK_LOGISTIC, step, 1.0 / scale])
    return ex, lpar


@njit(cache=True, nogil=True, error_model="numpy")
def shifted_luck(ex: np.ndarray, lpar: np.ndarray, a0: float, beta: float, h: float, dlo: int, dhi: int,
                 out: np.ndarray) -> None:
    """``out[d + n] = Λ(d·step + h, 0)`` for ``d ∈ [dlo, dhi]`` (``out`` has ``2n + 1`` cells;
    the module docstring gives the factors). ``|h| ≤ 2M`` (checked by the caller)."""
    n = (out.shape[0] - 1) // 2
    step = lpar[1]
    inv_s = lpar[2]
    j = np.int64(math.floor(h / step))
    r = h - j * step
    cm = exp_det(-r * inv_s)
    cp = exp_det(r * inv_s)
    if lpar[0] == LUCK_LOGISTIC:
        for d in range(dlo, dhi + 1):
            k = d + j
            if k >= 0:
                out[d + n] = a0 + beta / (1.0 + ex[k] * cm)
            else:
                e = ex[-k] * cp
                out[d + n] = a0 + beta * (e / (1.0 + e))
    else:
        for d in range(dlo, dhi + 1):
            k = d + j
            if k >= 0:
                out[d + n] = a0 + beta * (1.0 - 0.5 * (ex[k] * cm))
            else:
                out[d + n] = a0 + beta * (0.5 * (ex[-k] * cp))


@njit(cache=True, nogil=True, inline="always")
def power(x: float, e: float) -> float:
    """``x ** e``: ``sqrt`` at ½ (correctly rounded, as ``model.pow_exact`` is there), exact at 0
    and 1; elsewhere the C library's ``pow`` (as the Bradley–Terry draw form's ``w**score``), whose
    last bit may differ by CPU: a partial score other than ½ with an advantage is the one case."""
    if e == 0.5:
        return math.sqrt(x)
    if e == 1.0:
        return x
    if e == 0.0:
        return 1.0
    return x**e


@njit(cache=True, nogil=True)
def shifted_draw(gp: np.ndarray, gm: np.ndarray, score: float, dlo: int, dhi: int) -> None:
    """The paper-form draw kernel of a match with an advantage, in place: on entry ``gp[d + n] =
    g_h(d)`` for ``d ∈ [dlo, dhi]`` (A's side) and ``gm[e + n] = g_−h(e)`` for ``e ∈ [−dhi, −dlo]``
    (B's); on return ``gp[d + n] = D(d) = g_h(d)^s · g_−h(−d)^(1−s)`` (``Λ(x_i + h, x_k)^s
    Λ(x_k, x_i + h)^(1−s)`` at ``d = i − k``) and ``gm[e + n] = D(−e)`` (B's side, at ``e = k − i``)."""
    n = (gp.shape[0] - 1) // 2
    q = 1.0 - score
    for d in range(dlo, dhi + 1):
        gp[d + n] = power(gp[d + n], score) * power(gm[n - d], q)
    for e in range(-dhi, -dlo + 1):
        gm[e + n] = gp[n - e]
