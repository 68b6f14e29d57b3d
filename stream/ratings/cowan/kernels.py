"""numba kernels of Cowan's system on the uniform grid (the hot path of ``cowan.Cowan``).

A match works on two dense rows of ``n + 1`` cells, zero outside each player's window ``[lo, hi]``:
only the window's cells cost, so an established player (~300 cells) is far cheaper than the grid.

One side of a match needs ``W(i) = Σ_k ρ_opp(k) g(i − k)``, ``g(d) = Λ(x_i, x_k)`` (a function of
``d = i − k`` on a uniform grid). We split ``g = H + R`` (paper §4): ``H(d) = a0 + β·[d > 0] +
β/2·[d = 0]``, a running sum (Alg. 4.3), and ``R(d) = −β·sign(d)·φ(|d|)``, ``φ`` a short sum of
exponentials ``Re Σ_j c_j z_j^|d|`` (``model.fit_exp_sum``), so ``Σ_k ρ(k) R(i − k)`` is a forward
and a backward O(n) sweep. The paper's draw kernel ``D(d) = g(d)^θ g(−d)^(1−θ)`` has a branch point
near the real axis that defeats fixed rates but not free complex ones, so ``draw_lik`` sweeps too;
should its fit miss, a draw is a convolution (``_conv``: FFT for big windows, else a direct sum).
Wins take ``lanes.win_lik_pair``: both players' four sweeps as the lanes of one vector, same bits.

Loops run over a view of the window (``row[lo : hi + 1]`` from 0), not ``row[lo + t]``: numba's
check of every computed index for a negative value keeps LLVM from vectorising the loop.

A match with a side advantage (``h != 0``) takes no sweep: its luck is a new function of ``i − k``
for every ``h``, tabulated for the match (``shift``) and convolved (``shifted_lik``).

No kernel is ``fastmath``: with reassociation LLVM splits reductions by alignment, and a match run
on another thread came out different in the last bit. So every entry point (the arena's, parallel
or serial, and ``rate_pair``) runs ``update_pair_in`` with the bits of one match at a time, which
ends by quantising both beliefs with the codec's own functions (``quant``): the belief after every
match is what a store round trip gives back, wherever batch boundaries fall.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import numpy as np
from numba import njit

from stream.ratings.cowan.drift import DRIFT_EXP, DRIFT_TAPS, _drift_and_store_pair_in  # noqa: F401 (re-exported)
from stream.ratings.cowan.lanes import win_lik_pair
from stream.ratings.cowan.quant import _FALSE, _ONE, _TRUE, _ZERO, canonicalise_row
from stream.ratings.cowan.shift import shifted_draw, shifted_luck

# draw forms
FORM_PAPER = 0
FORM_BLATMMR = 1


@njit(cache=True, nogil=True, inline="always")
def _soe_step(
    st: np.ndarray,
    sr: np.ndarray,
    si: np.ndarray,
    rr: np.ndarray,
    rc: np.ndarray,
    zr: np.ndarray,
    zi: np.ndarray,
    cr: np.ndarray,
    ci: np.ndarray,
    r_i: float,
) -> float:
    """``Re Σ_j c_j s_j`` then ``s_j ← z_j (s_j + r_i)``, real terms (rates ``rr``, coefficients
    ``rc``, states ``st``) first, then complex ones as real pairs, in a fixed order (no
    ``fastmath``: the bits never depend on vectorisation or alignment)."""
    acc = 0.0
    for j in range(rr.shape[0]):
        acc += rc[j] * st[j]
        st[j] = rr[j] * (st[j] + r_i)
    for j in range(zr.shape[0]):
        a = sr[j]
        b = si[j]
        acc += cr[j] * a - ci[j] * b
        t = a + r_i
        sr[j] = zr[j] * t - zi[j] * b
        si[j] = zr[j] * b + zi[j] * t
    return acc


@njit(cache=True, nogil=True, inline="always")
def _soe_views(
    soe: np.ndarray, base: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The six parts of a packed sum of exponentials starting at ``soe[base]``:
    ``[R, C, rates (R), coefs (R), Re z (C), Im z (C), Re c (C), Im c (C)]``."""
    nr = int(soe[base])
    nc = int(soe[base + 1])
    o = base + 2
    rr = soe[o : o + nr]
    rc = soe[o + nr : o + 2 * nr]
    o += 2 * nr
    return rr, rc, soe[o : o + nc], soe[o + nc : o + 2 * nc], soe[o + 2 * nc : o + 3 * nc], soe[o + 3 * nc : o + 4 * nc]


@njit(cache=True, nogil=True)
def _direct(rho: np.ndarray, lo_o: int, hi_o: int, lo: int, hi: int, tab: np.ndarray, out: np.ndarray) -> None:
    """``out[i − lo] = Σ_k rho[k] tab[i − k + n]`` by whole-row updates: the inner loop over i
    vectorises without reassociation (each ``out[i]`` still sums over ascending k)."""
    n = (tab.shape[0] - 1) // 2
    m = hi - lo + 1
    for t in range(m):
        out[t] = 0.0
    for k in range(lo_o, hi_o + 1):
        w = rho[k]
        if w == 0.0:
            continue
        base = lo - k + n
        for t in range(m):
            out[t] += w * tab[base + t]


FFT_MAX = 4096  # grids up to n = 2047 (windows add up to < FFT_MAX cells)
#: use the FFT instead of the direct sum above this many products |A|·|B|
FFT_MIN_WORK = 60_000
_TW_RE = np.cos(2.0 * np.pi * np.arange(FFT_MAX // 2) / FFT_MAX)
_TW_IM = np.sin(2.0 * np.pi * np.arange(FFT_MAX // 2) / FFT_MAX)


@njit(cache=True, nogil=True)
def _fft(re: np.ndarray, im: np.ndarray, size: int, inverse: bool) -> None:
    """In-place iterative radix-2 FFT of ``re + i·im`` (first ``size`` entries, a power of
    two ≤ FFT_MAX); twiddles from one table of e^(2πik/FFT_MAX) frozen into the kernel."""
    j = 0
    for i in range(1, size):
        bit = size >> 1
        while j & bit:
            j ^= bit
            bit >>= 1
        j |= bit
        if i < j:
            re[i], re[j] = re[j], re[i]
            im[i], im[j] = im[j], im[i]
    sign = 1.0 if inverse else -1.0
    length = 2
    while length <= size:
        half = length >> 1
        step = FFT_MAX // length
        for k in range(half):
            wr = _TW_RE[k * step]
            wi = sign * _TW_IM[k * step]
            for start in range(0, size, length):
                a = start + k
                b = a + half
                xr = re[b] * wr - im[b] * wi
                xi = re[b] * wi + im[b] * wr
                re[b] = re[a] - xr
                im[b] = im[a] - xi
                re[a] += xr
                im[a] += xi
        length <<= 1


@njit(cache=True, nogil=True)
def _fft_conv(rho: np.ndarray, lo_o: int, hi_o: int, lo: int, hi: int, tab: np.ndarray, out: np.ndarray) -> None:
    """``_direct`` by one complex FFT pair of x + i·y (x the rho window, y tab on the offsets
    needed), circular length ≥ |out| + |x| − 1; within ~1e-16 of the largest term."""
    n = (tab.shape[0] - 1) // 2
    m = hi - lo + 1
    mo = hi_o - lo_o + 1
    size = 1
    while size < m + mo - 1:
        size <<= 1
    re = np.zeros(size)
    im = np.zeros(size)
    for t in range(mo):
        re[t] = rho[lo_o + t]
    # y[u] = tab[d + n] for d = lo − hi_o + u, u = 0 .. m + mo − 2
    d0 = lo - hi_o
    for u in range(m + mo - 1):
        im[u] = tab[d0 + u + n]
    _fft(re, im, size, _FALSE())
    # X = (Z_k + conj Z_{−k}) / 2, Y = (Z_k − conj Z_{−k}) / 2i; product P = X·Y
    pr = np.empty(size)
    pi = np.empty(size)
    for k in range(size):
        q = (size - k) & (size - 1)
        ar = 0.5 * (re[k] + re[q])
        ai = 0.5 * (im[k] - im[q])
        br = 0.5 * (im[k] + im[q])
        bi = -0.5 * (re[k] - re[q])
        pr[k] = ar * br - ai * bi
        pi[k] = ar * bi + ai * br
    _fft(pr, pi, size, _TRUE())
    inv = 1.0 / size
    for t in range(m):
        out[t] = pr[t + mo - 1] * inv


#: the vector sweeps (``lanes.win_lik_pair``) take sums with at most this many real and complex
#: terms (the default logistic fit, frozen in ``model._FROZEN_RESIDUALS``, has exactly 3 and 4)
SWEEP_REAL = 3
SWEEP_CPLX = 4


@njit(cache=True, nogil=True, inline="always")
def _takes_r3c4(soe: np.ndarray) -> bool:
    """Whether ``win_lik_pair`` takes ``soe``: it fits, and is not so short that zero slots cost
    more than they save (the Laplace variant's single term stays on ``win_lik``)."""
    nr = int(soe[0])
    nc = int(soe[1])
    return nr <= SWEEP_REAL and nc <= SWEEP_CPLX and nr + nc >= SWEEP_REAL + SWEEP_CPLX - 2


@njit(cache=True, nogil=True)
def win_lik(
    rho: np.ndarray,
    lo_o: int,
    hi_o: int,
    lo: int,
    hi: int,
    a0: float,
    beta: float,
    soe: np.ndarray,
    out: np.ndarray,
) -> None:
    """``out[i − lo] = Σ_k rho[k] g(i − k)`` for ``i ∈ [lo, hi]``, ``k ∈ [lo_o, hi_o]``
    (``rho``: the opponent's full-grid row)."""
    total = 0.0
    for k in range(lo_o, hi_o + 1):
        total += rho[k]
    rr, rc, zr, zi, cr, ci = _soe_views(soe, 0)
    st = np.zeros(rr.shape[0])
    sr = np.zeros(zr.shape[0])
    si = np.zeros(zr.shape[0])
    # rho is zero outside [lo_o, hi_o], so the sweeps need no bounds checks.
    # forward sweep: s_j(i) = Σ_{k<i} rho(k) z_j^(i−k); also the running sum C(i) = Σ_{k<i} rho(k)
    start = min(lo, lo_o)
    res = np.empty(hi - start + 1)
    run = 0.0
    for i in range(start, hi + 1):
        r_i = rho[i]
        acc = _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, r_i)
        res[i - start] = a0 * total + beta * (run + 0.5 * r_i - acc)
        run += r_i
    # backward sweep: s_j(i) = Σ_{k>i} rho(k) z_j^(k−i)
    st[:] = 0.0
    sr[:] = 0.0
    si[:] = 0.0
    stop = max(hi, hi_o)
    for i in range(stop, hi, -1):
        _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, rho[i])
    off = lo - start
    for i in range(hi, lo - 1, -1):
        r_i = rho[i]
        acc = _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, r_i)
        out[i - lo] = res[i - lo + off] + beta * acc


@njit(cache=True, nogil=True)
def draw_lik(
    rho: np.ndarray, lo_o: int, hi_o: int, lo: int, hi: int, ds: np.ndarray, swap: bool, out: np.ndarray
) -> None:
    """``out[i − lo] = Σ_k rho[k] D(i − k)`` for the paper-form draw kernel by two O(n) sweeps of
    its one-sided sums (``model.pack_draw_soe``): ``D(±d) = t± + Re Σ_j c±ⱼ z±ⱼ^d`` for d ≥ 1,
    ``D(0) = t₀``; ``swap``: ``D(−d)`` instead (the other player's side)."""
    tp = ds[1]
    tm = ds[2]
    t0 = ds[3]
    bp = 5
    bm = int(ds[4])
    if swap:
        tp, tm = tm, tp
        bp, bm = bm, bp
    rr, rc, zr, zi, cr, ci = _soe_views(ds, bp)
    st = np.zeros(max(rr.shape[0], int(ds[bm])))
    sr = np.zeros(max(zr.shape[0], int(ds[bm + 1])))
    si = np.zeros(sr.shape[0])
    # forward sweep: s_j(i) = Σ_{k<i} rho(k) z_j^(i−k), run = Σ_{k<i} rho(k)
    start = min(lo, lo_o)
    res = np.empty(hi - start + 1)
    run = 0.0
    for i in range(start, hi + 1):
        r_i = rho[i]
        acc = _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, r_i)
        res[i - start] = tp * run + t0 * r_i + acc
        run += r_i
    # backward sweep: s_j(i) = Σ_{k>i} rho(k) z_j^(k−i), run = Σ_{k>i} rho(k)
    rr, rc, zr, zi, cr, ci = _soe_views(ds, bm)
    st[:] = 0.0
    sr[:] = 0.0
    si[:] = 0.0
    run = 0.0
    stop = max(hi, hi_o)
    for i in range(stop, hi, -1):
        r_i = rho[i]
        _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, r_i)
        run += r_i
    off = lo - start
    for i in range(hi, lo - 1, -1):
        r_i = rho[i]
        acc = _soe_step(st, sr, si, rr, rc, zr, zi, cr, ci, r_i)
        out[i - lo] = res[i - lo + off] + tm * run + acc
        run += r_i


@njit(cache=True, nogil=True, inline="always")
def work_cells(n1: int, taps: np.ndarray) -> int:
    """Cells of the scratch ``update_pair_in`` takes (``work``) on a grid of ``n1`` cells."""
    return 12 * n1 + 6 + 2 * taps.shape[0]


@njit(cache=True, nogil=True)
def update_pair_in(
    dens: np.ndarray,
    lohi: np.ndarray,
    ia: int,
    ib: int,
    score: float,
    a0: float,
    beta: float,
    soe: np.ndarray,
    dtab: np.ndarray,
    dsoe: np.ndarray,
    form: int,
    taps: np.ndarray,
    drift_mode: int,
    drift_rate: float,
    tail: float,
    quant: bool,
    qmin: int,
    codes: np.ndarray,
    status: np.ndarray,
    h: float,
    ex: np.ndarray,
    lpar: np.ndarray,
    work: np.ndarray,
) -> None:
    """One match: both posteriors from the pre-match beliefs, then drift, in place; with ``quant``
    both new beliefs replaced by their codec round trip (``canonicalise_row``), ``status[i] = 1``
    flagging a player whose belief the codec would reject, ``codes`` the quantiser's scratch.

    ``h``: A's side advantage (0: none), ``ex``/``lpar`` the luck's tables for it (read only when
    ``h != 0``, the likelihoods then by ``shifted_lik``). ``dtab[d + n] = g(d)^s g(−d)^(1−s)``
    for the paper's draw form with this ``score`` (read only for such a draw)."""
    rho_a = dens[ia]
    rho_b = dens[ib]
    la, ha = lohi[ia, 0], lohi[ia, 1]
    lb, hb = lohi[ib, 0], lohi[ib, 1]
    ma = ha - la + 1
    mb = hb - lb + 1
    n1 = dens.shape[1]
    fa = work[:ma]
    fb = work[n1 : n1 + mb]
    paper_draw = 0.0 < score < 1.0 and form == FORM_PAPER
    if h != 0.0:
        shifted_lik(rho_a, la, ha, rho_b, lb, hb, h, score, paper_draw, a0, beta, ex, lpar, fa, fb,
                    work[2 * n1 : 6 * n1 - 2])
    elif paper_draw:
        # A: Σ_k ρ_B(k) D(i−k); B: Σ_i ρ_A(i) D(i−k) = Σ_i ρ_A(i) Dflip(k−i), Dflip = dtab reversed
        if dsoe[0] == 1.0:
            draw_lik(rho_b, lb, hb, la, ha, dsoe, _FALSE(), fa)
            draw_lik(rho_a, la, ha, lb, hb, dsoe, _TRUE(), fb)
        else:
            flip = dtab[::-1].copy()
            _conv(rho_b, lb, hb, la, ha, dtab, fa)
            _conv(rho_a, la, ha, lb, hb, flip, fb)
    else:
        # W_A(i) = P(A beats B | A at i); W_B(k) = P(B beats A | B at k)
        if _takes_r3c4(soe):
            # both sides' four sweeps as the lanes of one vector: the same bits as win_lik
            win_lik_pair(rho_a, la, ha, rho_b, lb, hb, a0, beta, soe, fa, fb,
                         work[2 * n1 : 2 * n1 + 6 * (max(ha, hb) - min(la, lb) + 2)])
        else:
            win_lik(rho_b, lb, hb, la, ha, a0, beta, soe, fa)
            win_lik(rho_a, la, ha, lb, hb, a0, beta, soe, fb)
    if not paper_draw:
        # fa, fb: W_A(i) = P(A beats B | A at i), W_B(k) = P(B beats A | B at k); the result's likelihood
        if score == 1.0:
            for t in range(mb):
                fb[t] = 1.0 - fb[t]
        elif score == 0.0:
            for t in range(ma):
                fa[t] = 1.0 - fa[t]
        else:
            for t in range(ma):
                w = fa[t]
                fa[t] = w**score * (1.0 - w) ** (1.0 - score)
            for t in range(mb):
                w = fb[t]
                fb[t] = w ** (1.0 - score) * (1.0 - w) ** score
    # both posteriors' masses in one loop: two independent chains of additions overlap
    # (each still adds its own cells in ascending order from 0.0)
    sa = 0.0
    sb = 0.0
    wa = rho_a[la : ha + 1]
    wb = rho_b[lb : hb + 1]
    both = min(ma, mb)
    for t in range(both):
        v = wa[t] * fa[t]
        fa[t] = v
        sa += v
        v = wb[t] * fb[t]
        fb[t] = v
        sb += v
    for t in range(both, ma):
        v = wa[t] * fa[t]
        fa[t] = v
        sa += v
    for t in range(both, mb):
        v = wb[t] * fb[t]
        fb[t] = v
        sb += v
    ia_ = 1.0 / sa
    for t in range(ma):
        fa[t] *= ia_
    ib_ = 1.0 / sb
    for t in range(mb):
        fb[t] *= ib_
    _drift_and_store_pair_in(fa, la, ha, rho_a, lohi[ia], fb, lb, hb, rho_b, lohi[ib], taps, drift_mode,
                             drift_rate, tail, work[8 * n1 + 6 :])
    if quant:
        if not canonicalise_row(rho_a, lohi[ia], qmin, codes[ia]):
            status[ia] = 1
        if not canonicalise_row(rho_b, lohi[ib], qmin, codes[ib]):
            status[ib] = 1


@njit(cache=True, nogil=True)
def rate_pair(
    bel_a: np.ndarray,
    bel_b: np.ndarray,
    score: float,
    dtab: np.ndarray,
    dsoe: np.ndarray,
    soe: np.ndarray,
    taps: np.ndarray,
    fpar: np.ndarray,
    ipar: np.ndarray,
    h: float,
    ex: np.ndarray,
    lpar: np.ndarray,
) -> tuple[np.ndarray, np.ndarray, int]:
    """One match on two validated belief arrays ``[lo, rounds, p...]``: ``update_pair_in`` on a
    two-row scratch matrix, without the batch set-up (the service's common case). ``fpar = [a0,
    beta, drift_rate, tail]``, ``ipar = [form, drift_mode, quant, qmin, n + 1]``; bit 0 /
    bit 1 of the int returned: A's / B's belief came out non-finite (quantised runs only)."""
    n1 = ipar[4]
    dens = np.zeros((2, n1))
    codes = np.empty((2, n1), dtype=np.int64)
    lohi = np.empty((2, 2), dtype=np.int64)
    la = int(bel_a[0])
    lb = int(bel_b[0])
    ma = bel_a.shape[0] - 2
    mb = bel_b.shape[0] - 2
    for t in range(ma):
        dens[0, la + t] = bel_a[2 + t]
    for t in range(mb):
        dens[1, lb + t] = bel_b[2 + t]
    lohi[0, 0] = la
    lohi[0, 1] = la + ma - 1
    lohi[1, 0] = lb
    lohi[1, 1] = lb + mb - 1
    status = np.zeros(2, dtype=np.uint8)
    update_pair_in(
        dens, lohi, _ZERO(), _ONE(), score, fpar[0], fpar[1], soe, dtab, dsoe, ipar[0], taps, ipar[1], fpar[2],
        fpar[3], ipar[2] != 0, ipar[3], codes, status, h, ex, lpar, np.empty(work_cells(n1, taps)),
    )
    new_a = _belief_of(dens[0], lohi[0], bel_a[1])
    return new_a, _belief_of(dens[1], lohi[1], bel_b[1]), int(status[0]) + 2 * int(status[1])


@njit(cache=True, nogil=True, inline="always")
def _belief_of(row: np.ndarray, bounds: np.ndarray, rounds: float) -> np.ndarray:
    """The window ``bounds`` of ``row`` as a new belief array, one more match played."""
    lo = bounds[0]
    out = np.empty(bounds[1] - lo + 3)
    out[0] = lo
    out[1] = rounds + 1.0
    out[2:] = row[lo : bounds[1] + 1]
    return out


@njit(cache=True, nogil=True)
def expected_score(
    rho_a: np.ndarray,
    la: int,
    ha: int,
    rho_b: np.ndarray,
    lb: int,
    hb: int,
    a0: float,
    beta: float,
    soe: np.ndarray,
) -> float:
    """``Σ_i Σ_k ρ_A(i) g(i−k) ρ_B(k)`` (rows are full-grid, windows inclusive); A's likelihood
    by the match's own path (``update_pair_in``), the vector sweeps when they take the sum."""
    fa = np.empty(ha - la + 1)
    if _takes_r3c4(soe):
        win_lik_pair(rho_a, la, ha, rho_b, lb, hb, a0, beta, soe, fa, np.empty(hb - lb + 1),
                     np.empty(6 * (max(ha, hb) - min(la, lb) + 2)))
    else:
        win_lik(rho_b, lb, hb, la, ha, a0, beta, soe, fa)
    acc = 0.0
    for t in range(ha - la + 1):
        acc += rho_a[la + t] * fa[t]
    return acc


@njit(cache=True, nogil=True, inline="always")
def _conv(rho: np.ndarray, lo_o: int, hi_o: int, lo: int, hi: int, tab: np.ndarray, out: np.ndarray) -> None:
    """``out[i − lo] = Σ_k rho[k] tab[i − k + n]``: an FFT for wide windows, else the direct sum."""
    if (hi - lo + 1) * (hi_o - lo_o + 1) >= FFT_MIN_WORK and (hi - lo + 1) + (hi_o - lo_o + 1) < FFT_MAX:
        _fft_conv(rho, lo_o, hi_o, lo, hi, tab, out)
    else:
        _direct(rho, lo_o, hi_o, lo, hi, tab, out)


@njit(cache=True, nogil=True)
def shifted_lik(rho_a: np.ndarray, la: int, ha: int, rho_b: np.ndarray, lb: int, hb: int, h: float, score: float,
                paper_draw: bool, a0: float, beta: float, ex: np.ndarray, lpar: np.ndarray, fa: np.ndarray,
                fb: np.ndarray, tabs: np.ndarray) -> None:
    """The likelihood rows of a match in which A plays with advantage ``h`` (``stream.ratings.cowan.shift``):
    ``fa[i − la] = Σ_k ρ_B(k) Λ(x_i + h, x_k)`` and ``fb[k − lb] = Σ_i ρ_A(i) Λ(x_k, x_i + h)`` (what
    ``win_lik`` gives with ``h = 0``), or with ``paper_draw`` the paper's draw likelihoods with
    ``Λ(x_i + h, x_k)^s Λ(x_k, x_i + h)^(1−s)``. ``tabs``: scratch of ``2·(2n + 1)`` cells for the
    two sides' tables, ``Λ(x_k, x_i + h) = Λ(x_k − h, x_i)`` being B's."""
    size = tabs.shape[0] // 2
    gp = tabs[:size]
    gm = tabs[size : 2 * size]
    shifted_luck(ex, lpar, a0, beta, h, la - hb, ha - lb, gp)
    shifted_luck(ex, lpar, a0, beta, -h, lb - ha, hb - la, gm)
    if paper_draw:
        shifted_draw(gp, gm, score, la - hb, ha - lb)
    _conv(rho_b, lb, hb, la, ha, gp, fa)
    _conv(rho_a, la, ha, lb, hb, gm, fb)


@njit(cache=True, nogil=True)
def expected_score_shifted(rho_a: np.ndarray, la: int, ha: int, rho_b: np.ndarray, lb: int, hb: int, a0: float,
                           beta: float, h: float, ex: np.ndarray, lpar: np.ndarray) -> float:
    """``Σ_i Σ_k ρ_A(i) Λ(x_i + h, x_k) ρ_B(k)`` (``expected_score`` with A's advantage ``h``), by
    the direct sum whatever the windows: a prediction is also what the advantage is learned from,
    by a difference quotient in ``h`` (``stream.ratings.advantage``), which the FFT's rounding
    (~1e-13 of the sum) would blur more than the sum's."""
    tab = np.empty(rho_a.shape[0] * 2 - 1)
    shifted_luck(ex, lpar, a0, beta, h, la - hb, ha - lb, tab)
    fa = np.empty(ha - la + 1)
    _direct(rho_b, lb, hb, la, ha, tab, fa)
    acc = 0.0
    for t in range(ha - la + 1):
        acc += rho_a[la + t] * fa[t]
    return acc
