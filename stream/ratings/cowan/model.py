"""Cowan's model tables and curve fits, the same bits on every CPU: what numpy or LAPACK computes
differently by CPU is either correctly rounded here (``exp_exact``, ``pow_exact``) or frozen bit
for bit for the default grid (``_FROZEN_RESIDUALS``, ``_FROZEN_DRAW_FITS``), each frozen table
checked against this machine's target before use.
"""

from __future__ import annotations

import decimal
import math
from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache
from typing import Any

import numpy as np
import numpy.typing as npt


def fit_soe(n: int, h: float, terms: int) -> tuple[np.ndarray, np.ndarray]:
    """Coefficients ``c_j`` and rates ``r_j = e^(−j h)`` with ``Σ_j c_j r_j^d ≈ 1/(1+e^(dh))`` for
    d = 1..n by least squares (a polynomial fit of u/(1+u) in u = e^(−dh), limited by the
    singularity at u = −1)."""
    d = np.arange(1, n + 1, dtype=float)
    u = np.exp(-d * h)
    target = 1.0 / (1.0 + np.exp(d * h))
    basis = u[:, None] ** np.arange(1, terms + 1)[None, :]
    coef, *_ = np.linalg.lstsq(basis, target, rcond=None)
    return coef.astype(np.float64), np.exp(-h * np.arange(1, terms + 1, dtype=float))


#: the paper-form draw kernel uses its exponential-sum fit only if it is at least this good
#: (max |fit − D| over the grid distances; otherwise the FFT/direct convolution)
DRAW_SOE_MAX_ERR = 2e-13


def fit_exp_sum(
    y: npt.ArrayLike, max_terms: int = 24, tol: float = 2e-14
) -> tuple[np.ndarray, np.ndarray, float]:
    """Rates ``z_j`` (complex, |z_j| < 1, one per conjugate pair), coefficients ``c_j`` with ``Re Σ_j
    c_j z_j^d ≈ y[d − 1]`` (d = 1..len(y)) and the max error, by matrix pencil (the shift operator's
    eigenvalues on the dominant right singular vectors of ``y``'s Hankel matrix, then real least
    squares), more terms until the error is ≤ ``tol``. Free complex rates keep the paper-form draw
    kernel short (its branch point defeats fixed rates)."""
    ya = np.asarray(y, dtype=float)
    n = ya.shape[0]
    if n == 0 or float(np.max(np.abs(ya))) == 0.0:
        return np.zeros(0, complex), np.zeros(0, complex), 0.0
    half = n // 2
    if half < 3:
        return np.zeros(0, complex), np.zeros(0, complex), math.inf
    hankel = np.lib.stride_tricks.sliding_window_view(ya, half + 1)
    _, _, vt = np.linalg.svd(hankel, full_matrices=False)
    d = np.arange(1, n + 1, dtype=float)
    best: tuple[np.ndarray, np.ndarray, float] = (np.zeros(0, complex), np.zeros(0, complex), math.inf)
    for k in range(1, min(max_terms, half - 1) + 1):
        v = vt[:k].T
        z = np.linalg.eigvals(np.linalg.pinv(v[:-1]) @ v[1:])
        z = z[z.imag >= 0.0]
        if z.size == 0 or np.any(np.abs(z) >= 1.0) or np.any(z == 0):
            continue
        pw = z[None, :] ** d[:, None]
        cplx = z.imag > 0.0
        basis = np.concatenate([pw.real, pw[:, cplx].imag], axis=1)
        sol, *_ = np.linalg.lstsq(basis, ya, rcond=None)
        c = sol[: z.shape[0]].astype(complex)
        c[cplx] -= 1j * sol[z.shape[0] :]
        err = float(np.max(np.abs(basis @ sol - ya)))
        if err < best[2]:
            best = (z, c, err)
        if err <= tol:
            break
    return best


#: The residual fit of the default grid (n = 1000, M = 7: h = 0.014; 16 terms allowed) frozen bit
#: for bit as a ``pack_soe`` row: the matrix pencil's eigenvalues come from LAPACK, whose code path
#: (so the fit's last bits, even its split into real and complex rates) differs by CPU, and workers
#: on different CPUs would rate a pool differently. ``_fit_residual(1000, 0.014, 16)``, 3 real + 4
#: complex terms, checked against the local target before use; other grids are fitted at start.
_FROZEN_RESIDUALS: dict[tuple[int, float, int], tuple[str, ...]] = {
    (1000, 0.014, 16): (
        "0x1.8000000000000p+1", "0x1.0000000000000p+2", "0x1.f8e1c6fe8d896p-1", "0x1.f1dce3391a530p-1",
        "0x1.eaf16ef1eef8fp-1", "0x1.fffffffda2481p-1", "-0x1.00001f5357c22p+0", "0x1.ff2dd67379e72p-1",
        "0x1.e2ebeed326d6cp-1", "0x1.de51b97a0d54cp-1", "0x1.d9d8424503016p-1", "0x1.d47eb0937824ep-1",
        "0x1.6075eddc7ee40p-11", "0x1.021dd01caa6c1p-6", "0x1.0db967d7c8963p-5", "0x1.cdd9cdfb77294p-5",
        "-0x1.17af047d0d4c6p-1", "0x1.9083a6a829558p-5", "-0x1.0e023a0540280p-10", "0x1.9b29059fc0000p-20",
        "0x1.b5a1f679ca9d6p+2", "-0x1.1ceed02acc09cp-5", "-0x1.0652392e54880p-11", "0x1.38c3b3e29c000p-18",
    ),
}

#: a frozen fit is used only if it fits this machine's target within this (it fits to ~2e-15)
_FROZEN_MAX_ERR = 1e-14

#: The paper-form draw fit of the default model at score ½ (n = 1000, M = 7, β = 0.8, logistic),
#: frozen likewise: ``pack_soe`` of the one-sided kernel ``D(d) − t₊``, d = 1..n (symmetric at ½:
#: one row serves both sides), as ``Cowan()._dsoe(0.5)[5 : int(row[4])]`` printed in hex.
_FROZEN_DRAW_FITS: dict[tuple[int, float, float, float], tuple[str, ...]] = {
    (1000, 7.0, 0.8, 0.5): (
        "0x1.0000000000000p+1", "0x1.8000000000000p+2", "0x1.f8e1c6fe1a1c7p-1", "0x1.f1dd24b6bea2fp-1",
        "0x1.111111fadbf36p+0", "-0x1.01813b5b080cbp+2", "0x1.eb9302485295bp-1", "0x1.e9c1e242abd04p-1",
        "0x1.e858a35164340p-1", "0x1.e72ecadeb4b54p-1", "0x1.e642070e2bf12p-1", "0x1.e61c3f37728aep-1",
        "0x1.cc117bb85a5adp-9", "0x1.c1818f42facdcp-7", "0x1.a8c29d1950966p-6", "0x1.4b5f0b654a34cp-5",
        "0x1.d9461fc9c230ap-5", "0x1.4b9158859d97bp-4", "0x1.1a06878c56226p+2", "-0x1.56c2ef758cec8p+0",
        "0x1.763bb618466a8p-4", "-0x1.2b3dd49174b00p-9", "0x1.c5a2509d50000p-16", "-0x1.18704c8e00000p-23",
        "-0x1.31c86de8a857ap+3", "0x1.08af7dcd3dbaep-1", "0x1.57197083e74b8p-5", "-0x1.7f31bea29b900p-9",
        "0x1.fe1d7f630c000p-15", "-0x1.7757ae5800000p-23",
    ),
}
#: ... used only if it fits this machine's target within this (it fits to ~1.8e-14)
_FROZEN_DRAW_MAX_ERR = 5e-14


def soe_values(soe: np.ndarray, d: np.ndarray) -> np.ndarray:
    """``Re Σ_j c_j z_j^d`` of a ``pack_soe`` row at the distances ``d`` (for checking fits)."""
    nr, nc = int(soe[0]), int(soe[1])
    o = 2 + 2 * nr
    z = np.concatenate([soe[2 : 2 + nr], soe[o : o + nc] + 1j * soe[o + nc : o + 2 * nc]])
    c = np.concatenate([soe[2 + nr : o], soe[o + 2 * nc : o + 3 * nc] + 1j * soe[o + 3 * nc : o + 4 * nc]])
    return np.asarray(((z[None, :] ** d[:, None]) @ c).real)


def _residual_target(n: int, h: float) -> tuple[np.ndarray, np.ndarray]:
    """φ(d) = 1/(1 + e^(dh)) at d = 1..n, and d."""
    dd = np.arange(1, n + 1, dtype=float)
    return 1.0 / (1.0 + np.exp(dd * h)), dd


@lru_cache(maxsize=16)
def _residual_soe(n: int, h: float, terms: int) -> tuple[np.ndarray, float]:
    """``pack_soe`` of φ(d) = 1/(1 + e^(dh)), d = 1..n, and its max error: the frozen fit of
    the default grid (``_FROZEN_RESIDUALS``) when it fits here, else ``_fit_residual``."""
    thawed = thaw(_FROZEN_RESIDUALS.get((n, h, terms)), _residual_target(n, h)[0], _FROZEN_MAX_ERR)
    return thawed if thawed is not None else _fit_residual(n, h, terms)


def thaw(hexes: tuple[str, ...] | None, target: np.ndarray, max_err: float) -> tuple[np.ndarray, float] | None:
    """A frozen ``pack_soe`` row (``float.hex``) and its max error against ``target`` (d = 1..len),
    or None if there is none or it misses ``max_err`` on this machine."""
    if hexes is None:
        return None
    soe = np.array([float.fromhex(x) for x in hexes])
    err = float(np.max(np.abs(soe_values(soe, np.arange(1, target.shape[0] + 1, dtype=float)) - target)))
    return (soe, err) if err <= max_err else None


def _fit_residual(n: int, h: float, terms: int) -> tuple[np.ndarray, float]:
    """Free (complex) rates by matrix pencil (7-8 terms, 2e-15–8e-15 on the default grid)
    unless the fixed rates ``e^(−jh)`` (``fit_soe``) fit better. The SVD takes ~50 ms."""
    target, dd = _residual_target(n, h)
    # 1e-14: float64 rounding noise of the sum itself (the same fit's error differs by CPU, and a
    # tighter tolerance took a spurious extra term on some)
    z, c, err = fit_exp_sum(target, max_terms=terms, tol=1e-14)
    coef, rates = fit_soe(n, h, terms)
    fixed_error = float(np.max(np.abs((rates[None, :] ** dd[:, None]) @ coef - target)))
    if fixed_error < err:
        z, c, err = rates.astype(complex), coef.astype(complex), fixed_error
    soe = pack_soe(z, c)
    return soe, err


def pack_soe(z: np.ndarray, c: np.ndarray) -> np.ndarray:
    """``Re Σ_j c_j z_j^d`` as the row the kernels read (``kernels._soe_views``):
    ``[R, C, real rates (R), their coefficients (R), Re z, Im z, Re c, Im c (C each)]`` —
    real rates apart, since a real term costs a third of a complex one."""
    z = np.asarray(z, dtype=complex)
    c = np.asarray(c, dtype=complex)
    real = z.imag == 0.0
    zc, cc = z[~real], c[~real]
    return np.concatenate(
        ([float(real.sum()), float(zc.shape[0])], z[real].real, c[real].real, zc.real, zc.imag, cc.real, cc.imag)
    )


def pack_draw_soe(
    tp: float, tm: float, t0: float, plus: tuple[np.ndarray, np.ndarray], minus: tuple[np.ndarray, np.ndarray]
) -> np.ndarray:
    """The row ``kernels.draw_lik`` reads: ``[1, t₊, t₋, t₀, start of the minus
    part, pack_soe(plus), pack_soe(minus)]``."""
    p, m = pack_soe(*plus), pack_soe(*minus)
    return np.concatenate(([1.0, tp, tm, t0, 5.0 + p.shape[0]], p, m))


@dataclass(frozen=True)
class Model:
    """Everything the kernels need, precomputed once per parameter set."""

    grid: np.ndarray
    a0: float
    beta: float
    soe: np.ndarray  # pack_soe of φ (the residual's exponential sum)
    form: int
    taps: np.ndarray  # drift taps (DRIFT_TAPS) or [w0] (DRIFT_EXP)
    full_taps: np.ndarray  # the drift kernel on d = −n..n (naive path) or the short taps
    drift_mode: int
    drift_rate: float
    soe_error: float  # max |fit − φ| over the grid distances (0 when exact)
    luck_table: Callable[[], np.ndarray]  # makes ``gtab``

    @cached_property
    def gtab(self) -> np.ndarray:
        """g(d), d = −n..n, made at first use: only a draw of the paper's form reads it, and its
        correctly rounded ``exp`` of every grid distance is a noticeable part of a start-up."""
        return self.luck_table()


def exp_exact(x: Any) -> np.ndarray:
    """``exp`` of every element, correctly rounded (40-digit ``decimal``). Not ``np.exp``: numpy
    picks its code by CPU, differing in the last bit, and so would two workers' ratings. Built once
    per grid (cached); sums of these tables use ``math.fsum`` for the same reason."""
    return _decimal_map(x, "exp")


def pow_exact(x: np.ndarray, e: float) -> np.ndarray:
    """``x ** e`` with the same bits on every CPU (numpy's power picks its code by CPU): ``sqrt``
    at e = ½ (correctly rounded), exact at 0 and 1, else 40-digit ``decimal``."""
    if e == 0.5:
        return np.sqrt(x)
    if e == 1.0:
        return np.array(x, dtype=np.float64)
    if e == 0.0:
        return np.ones_like(x, dtype=np.float64)
    return _decimal_map(x, "power", e)


def _decimal_map(x: Any, op: str, e: float = 0.0) -> np.ndarray:
    """``op`` ("exp", or "power" with exponent ``e``) of every element in 40-digit ``decimal``."""
    arr = np.ascontiguousarray(x, dtype=np.float64)
    return np.frombuffer(_decimal_map_bytes(arr.tobytes(), op, e), dtype=np.float64).reshape(arr.shape).copy()


@lru_cache(maxsize=64)
def _decimal_map_bytes(raw: bytes, op: str, e: float) -> bytes:
    """``_decimal_map`` on float64 bytes (cached: systems with the same grid share their tables)."""
    ctx = decimal.Context(prec=40)
    values = np.frombuffer(raw, dtype=np.float64).tolist()
    if op == "exp":
        out = [float(ctx.exp(decimal.Decimal(v))) for v in values]
    else:
        de = decimal.Decimal(e)
        out = [float(ctx.power(decimal.Decimal(v), de)) for v in values]
    return np.array(out, dtype=np.float64).tobytes()


def gauss_taps(sd: float, h: float, rel: float = 1e-9) -> np.ndarray:
    """Normal(0, sd²) drift kernel on the grid, trimmed where it falls below ``rel`` of its
    peak, normalised (sd = 0.03, h = 0.014: 27 taps)."""
    if sd == 0:
        return np.ones(1)
    half = 0
    while math.exp(-0.5 * ((half + 1) * h / sd) ** 2) >= rel:
        half += 1
    d = np.arange(-half, half + 1, dtype=float) * h
    w = exp_exact(-0.5 * (d / sd) ** 2)
    return w / math.fsum(w)


def trim_bounds(p: np.ndarray, tail: float) -> tuple[int, int]:
    """Outermost cells to keep so that each dropped tail holds ≤ ``tail`` of the mass
    (the same rule as the kernels' ``_drift_and_store``)."""
    total = float(p.sum())
    lim = tail * total
    a, cum = 0, 0.0
    while a < p.shape[0] - 1 and cum + p[a] <= lim:
        cum += p[a]
        a += 1
    z, cum = p.shape[0] - 1, 0.0
    while z > a and cum + p[z] <= lim:
        cum += p[z]
        z -= 1
    return a, z

