"""The vector kernels of Cowan's system (``_cowan_lanes``) give the scalar kernels' bits:
both players' sweeps as four lanes against two ``win_lik`` calls, the drift's convolution
thirty-two outputs at a time against the plain accumulation, and a whole ``update_pair_in``
against the same match through the scalar sweeps; random windows, beliefs and taps, win
and draw scores, the logistic and the Laplace luck."""

from __future__ import annotations

import re
from typing import Any

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from numba import njit, types

from stream.ratings.cowan import kernels as kern
from stream.ratings.cowan import lanes
from stream.ratings.cowan import system as cowan_system
from stream.ratings.cowan.drift import _drift_and_store_pair_in
from stream.ratings.cowan.quant import QMIN
from stream.ratings.cowan.system import TAIL, Cowan, pack_soe

SYSTEMS = {"logistic": Cowan(), "laplace": Cowan({"algorithm": "laplace"}),
           "blatmmr": Cowan({"draw_form": "blatmmr"})}
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _generic(soe: np.ndarray) -> np.ndarray:
    """The same sum of exponentials with one more (zero) real term: too long for the vector
    sweeps, so a match takes ``win_lik``'s generic loop."""
    nr, nc = int(soe[0]), int(soe[1])
    o = 2 + 2 * nr
    z = np.concatenate([soe[2 : 2 + nr], [0.0], soe[o : o + nc] + 1j * soe[o + nc : o + 2 * nc]])
    c = np.concatenate([soe[2 + nr : o], [0.0], soe[o + 2 * nc : o + 3 * nc] + 1j * soe[o + 3 * nc : o + 4 * nc]])
    return pack_soe(z, c)


@st.composite
def windows(draw: st.DrawFn, n1: int) -> tuple[np.ndarray, int, int]:
    """A full-grid row, zero outside ``[lo, hi]``: positive values, of similar size (like a
    belief) or over up to 300 orders of magnitude, some zeros inside, normalised to sum 1."""
    lo = draw(st.integers(0, n1 - 1))
    hi = draw(st.integers(lo, min(n1 - 1, lo + draw(st.sampled_from([0, 3, 40, 300, 750, 1000])))))
    seed = draw(st.integers(0, 2**32 - 1))
    rng = np.random.default_rng(seed)
    spread = draw(st.sampled_from([0, 0, 3, 300]))  # orders of magnitude between cells
    vals = rng.random(hi - lo + 1) * 10.0 ** rng.integers(-spread, 1, hi - lo + 1)
    vals[rng.random(hi - lo + 1) < draw(st.sampled_from([0.0, 0.2]))] = 0.0
    if vals.sum() == 0.0:
        vals[0] = 1.0
    row = np.zeros(n1)
    row[lo : hi + 1] = vals / vals.sum()
    return row, lo, hi


@SETTINGS
@given(data=st.data(), which=st.sampled_from(["logistic", "laplace"]))
def test_win_lik_pair_equals_two_win_lik_bit_for_bit(data: st.DataObject, which: str) -> None:
    m = SYSTEMS[which].model
    n1 = m.grid.shape[0]
    rho_a, la, ha = data.draw(windows(n1))
    rho_b, lb, hb = data.draw(windows(n1))
    fa, fb = np.empty(ha - la + 1), np.empty(hb - lb + 1)
    kern.win_lik(rho_b, lb, hb, la, ha, m.a0, m.beta, m.soe, fa)
    kern.win_lik(rho_a, la, ha, lb, hb, m.a0, m.beta, m.soe, fb)
    ga, gb = np.full(ha - la + 1, np.nan), np.full(hb - lb + 1, np.nan)
    lanes.win_lik_pair(rho_a, la, ha, rho_b, lb, hb, m.a0, m.beta, m.soe, ga, gb,
                       np.full(6 * (max(ha, hb) - min(la, lb) + 2), np.nan))
    assert fa.tobytes() == ga.tobytes()
    assert fb.tobytes() == gb.tobytes()


@SETTINGS
@given(nt=st.integers(1, 40), width=st.integers(1, 1100), seed=st.integers(0, 2**32 - 1))
def test_convolve_taps_equals_the_plain_accumulation_bit_for_bit(nt: int, width: int, seed: int) -> None:
    rng = np.random.default_rng(seed)
    taps = rng.random(nt) * 10.0 ** rng.integers(-20, 1, nt)
    pad = rng.random(width + nt) * 10.0 ** rng.integers(-300, 1, width + nt)
    pad[rng.random(width + nt) < 0.2] = 0.0
    want = np.zeros(width)
    for t in range(nt):  # numpy: one rounded product, then one rounded sum, per element
        want += taps[t] * pad[t : t + width]
    got = np.full(width, np.nan)
    total = lanes.convolve_taps(pad, taps, width, got)
    assert want.tobytes() == got.tobytes()
    mass = 0.0
    for v in want.tolist():  # the drift's mass: one running sum, ascending, from 0.0
        mass += v
    assert np.float64(total).tobytes() == np.float64(mass).tobytes()


@SETTINGS
@given(data=st.data(), which=st.sampled_from(sorted(SYSTEMS)), score=st.sampled_from([1.0, 0.0, 0.5, 0.25]),
       quant=st.booleans())
def test_update_pair_with_lanes_equals_the_scalar_sweeps_bit_for_bit(
        data: st.DataObject, which: str, score: float, quant: bool) -> None:
    """A whole match (likelihoods, posterior, drift, quantisation) with the default sum,
    which takes the vector sweeps, and with the same sum made too long for them."""
    s = SYSTEMS[which]
    m = s.model
    n1 = m.grid.shape[0]
    rows = []
    for _ in range(2):
        row, lo, hi = data.draw(windows(n1))
        rows.append((row, lo, hi))
    dtab, dsoe = (s._dtab(score), s._dsoe(score)) if 0.0 < score < 1.0 else (m.gtab, cowan_system._NO_DSOES[0])
    results = []
    no_shift = s._shift_args(None)[1:]  # no side advantage: tables never read
    for soe in (m.soe, _generic(m.soe)):
        dens = np.stack([r[0] for r in rows])
        lohi = np.array([[r[1], r[2]] for r in rows], dtype=np.int64)
        codes = np.zeros((2, n1), dtype=np.int64)
        status = np.zeros(2, dtype=np.uint8)
        kern.update_pair_in(dens, lohi, 0, 1, score, m.a0, m.beta, soe, dtab, dsoe, m.form,
                            m.taps, m.drift_mode, m.drift_rate, TAIL, quant, QMIN, codes, status, 0.0, *no_shift,
                            np.empty(kern.work_cells(n1, m.taps)))
        results.append((dens, lohi, codes, status))
    for x, y in zip(*results, strict=True):
        assert x.tobytes() == y.tobytes()


def test_vector_kernels_have_no_fused_multiply_add() -> None:
    """An FMA rounds once where the scalar code rounds twice: the vector kernels' machine
    code must have none (``_simd`` emits plain ``fmul``/``fadd`` without fast-math flags)."""
    sigs: dict[Any, tuple[Any, ...]] = {  # numba dispatchers
        lanes._sweep8_r3c4: (types.float64[::1], types.float64[::1], types.float64[::1], types.int64, types.int64,
                             types.int64, types.float64[::1]),
        lanes.convolve_taps: (types.float64[::1], types.float64[::1], types.int64, types.float64[::1]),
    }
    for fn, sig in sigs.items():
        fresh = njit(nogil=True)(fn.py_func)  # not from numba's cache, which keeps no assembly
        fresh.compile(sig)
        asm = fresh.inspect_asm(sig)
        assert re.search(r"\bvmulpd\b", asm), "not vectorised"
        assert not re.search(r"vfn?m(add|sub)", asm)


def _drift_one(post: list[float], lo: int, hi: int, taps: list[float], tail: float, n1: int) -> tuple[list[float], int]:
    """The taps drift of one window in plain Python floats, one player at a time, sums
    in ascending order from 0.0: ``(new window, new lo)``."""
    half = (len(taps) - 1) // 2
    nlo, nhi = max(0, lo - half), min(n1 - 1, hi + half)
    cell = dict(zip(range(lo, hi + 1), post, strict=True))
    buf = []
    for x in range(nlo, nhi + 1):
        acc = 0.0
        for t, w in enumerate(taps):
            acc += w * cell.get(x - half + t, 0.0)
        buf.append(acc)
    total = 0.0
    for v in buf:
        total += v
    lim = tail * total
    a, cum = 0, 0.0
    while a < len(buf) - 1 and cum + buf[a] <= lim:
        cum += buf[a]
        a += 1
    b, cum = len(buf) - 1, 0.0
    while b > a and cum + buf[b] <= lim:
        cum += buf[b]
        b -= 1
    kept = 0.0
    for v in buf[a : b + 1]:
        kept += v
    inv = 1.0 / kept
    return [v * inv for v in buf[a : b + 1]], nlo + a


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data())
def test_drift_of_both_players_equals_one_at_a_time_bit_for_bit(data: st.DataObject) -> None:
    """``_drift_and_store_pair_in`` (both players' sums in one loop) against each player's
    drift on its own, in plain Python floats."""
    s = SYSTEMS["logistic"]
    m = s.model
    n1 = m.grid.shape[0]
    rows, posts, bounds, want = [], [], [], []
    for _ in range(2):
        row, lo, hi = data.draw(windows(n1))
        post = row[lo : hi + 1].copy()
        rows.append(row)
        posts.append(post)
        bounds.append(np.array([lo, hi], dtype=np.int64))
        want.append(_drift_one(post.tolist(), lo, hi, m.taps.tolist(), TAIL, n1))
    # twice: in zeroed scratch, and in scratch holding NaN (what a previous match leaves there:
    # the padding around each window must be written, not assumed zero)
    for fill in (0.0, np.nan):
        scratch = np.full(2 * (2 * n1 + m.taps.shape[0]), fill)
        rows_now = [r.copy() for r in rows]
        bounds_now = [bd.copy() for bd in bounds]
        args = (posts[0], int(bounds[0][0]), int(bounds[0][1]), rows_now[0], bounds_now[0],
                posts[1], int(bounds[1][0]), int(bounds[1][1]), rows_now[1], bounds_now[1],
                m.taps, m.drift_mode, m.drift_rate, TAIL)
        _drift_and_store_pair_in(*args, scratch)
        for row, bd, (vals, lo) in zip(rows_now, bounds_now, want, strict=True):
            assert bd.tolist() == [lo, lo + len(vals) - 1]
            assert row[lo : lo + len(vals)].tobytes() == np.array(vals).tobytes()
            assert not row[:lo].any() and not row[lo + len(vals):].any()
