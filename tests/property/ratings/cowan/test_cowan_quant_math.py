"""The quantisation core's own ``log``/``exp`` (``stream.ratings.cowan.quant``) against
``math``, and ``quantise``'s codes against the definition computed with ``math.log``."""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from numba import njit

from stream.ratings.cowan.quant import DELTA, QMIN, dequantise, exp_det, log_det, quantise

TINY = 5e-324
MIN_NORMAL = 2.2250738585072014e-308


def _elementwise(fn: Callable[[float], float]) -> Callable[[np.ndarray], np.ndarray]:
    """``fn`` over an array, compiled as the kernels call it (numpy's error model)."""
    @njit(error_model="numpy")
    def apply(x: np.ndarray) -> np.ndarray:
        out = np.empty_like(x)
        for i in range(x.shape[0]):
            out[i] = fn(x[i])
        return out
    return apply


_logs = _elementwise(log_det)
_exps = _elementwise(exp_det)


positive = st.floats(min_value=TINY, max_value=1.7976931348623157e308, allow_nan=False, allow_infinity=False)


@settings(max_examples=300, deadline=None)
@given(st.lists(positive, min_size=1, max_size=40))
def test_log_det_is_within_an_ulp_of_math_log(xs: list[float]) -> None:
    got = _logs(np.array(xs))
    for x, g in zip(xs, got, strict=True):
        ref = math.log(x)
        assert abs(g - ref) <= 2.0 * math.ulp(max(abs(ref), 1.0)), (x, g, ref)


def test_log_det_on_grid_of_magnitudes() -> None:
    rng = np.random.default_rng(3)
    x = np.concatenate([np.exp(rng.uniform(-744.0, 709.0, 20000)), rng.uniform(0.0, 1.0, 20000) + TINY,
                        [TINY, 1e-310, MIN_NORMAL, 0.5, 1.0, 2.0, math.sqrt(0.5), math.sqrt(2.0), 1.79e308]])
    ref = np.array([math.log(v) for v in x])
    assert np.max(np.abs(_logs(x) - ref)) <= 1e-15
    assert _logs(np.array([1.0]))[0] == 0.0


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(min_value=-800.0, max_value=800.0, allow_nan=False), min_size=1, max_size=40))
def test_exp_det_matches_math_exp(xs: list[float]) -> None:
    got = _exps(np.array(xs))
    for x, g in zip(xs, got, strict=True):
        try:
            ref = math.exp(x)
        except OverflowError:
            ref = math.inf
        if ref == math.inf or ref == 0.0:
            assert g == ref, (x, g)
        elif ref < MIN_NORMAL:  # subnormal: one rounding of the exact value
            assert abs(g - ref) <= TINY, (x, g, ref)
        else:
            assert abs(g / ref - 1.0) <= 4.5e-16, (x, g, ref)


def test_exp_det_of_codes_is_exact_at_zero_and_accurate_over_the_code_range() -> None:
    q = np.arange(QMIN, 1, 997, dtype=np.int64)
    x = q * DELTA
    ref = np.array([math.exp(v) for v in x])
    assert np.max(np.abs(_exps(x) / ref - 1.0)) <= 4.5e-16
    assert _exps(np.array([0.0]))[0] == 1.0


def _codes_by_definition(p: np.ndarray) -> np.ndarray:
    lmax = math.log(float(p.max()))
    return np.array([round((math.log(v) - lmax) / DELTA) if v > 0 else QMIN - 1 for v in p], dtype=np.int64)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.floats(min_value=0.0, max_value=1e3, allow_nan=False), min_size=1, max_size=60))
def test_quantise_gives_the_codes_of_its_definition(values: list[float]) -> None:
    p = np.array(values)
    q = np.empty(p.shape[0], np.int64)
    ok = quantise(p, QMIN, q)
    assert ok == bool(p.max() > 0.0)
    if ok:
        # the two logarithms differ by ~1e-15; a code may differ only for a value within
        # ~1e-7 quanta of a rounding boundary, which these draws do not hit in practice
        exact = _codes_by_definition(p)
        diff = q != exact
        for i in np.nonzero(diff)[0]:
            t = (math.log(p[i]) - math.log(float(p.max()))) / DELTA
            assert abs(abs(t - math.floor(t)) - 0.5) < 1e-6, (p[i], q[i], exact[i])


def test_quantise_refuses_what_encode_refuses_and_takes_negative_zero() -> None:
    q = np.empty(3, np.int64)
    bads = ([1.0, -1e-300, 0.5], [1.0, math.inf, 0.5], [math.nan, 1.0, 0.5], [0.0, 0.0, -0.0], [-math.inf, 1.0, 1.0])
    for bad in bads:
        assert not quantise(np.array(bad), QMIN, q), bad
    assert quantise(np.array([-0.0, 1.0, 0.25]), QMIN, q)
    assert q[0] == QMIN - 1 and q[1] == 0 and q[2] == round(math.log(0.25) / DELTA)
    # subnormal peaks and cells are quantised like any other value
    assert quantise(np.array([1e-310, 4e-310, TINY]), QMIN, q)
    assert list(q[:2]) == [round(math.log(0.25) / DELTA), 0]


@settings(max_examples=100, deadline=None)
@given(st.lists(st.integers(min_value=QMIN, max_value=0), min_size=1, max_size=50))
def test_dequantise_is_normalised_and_quantise_recovers_the_codes(codes: list[int]) -> None:
    q = np.array([*codes, 0], dtype=np.int64)  # a peak, as every window has
    out = np.empty(q.shape[0])
    dequantise(q, 0, q.shape[0], out)
    assert abs(math.fsum(out) - 1.0) <= 1e-15 * q.shape[0]
    back = np.empty_like(q)
    assert quantise(out, QMIN, back)
    assert np.array_equal(back, q)  # the fixed point the codec relies on
