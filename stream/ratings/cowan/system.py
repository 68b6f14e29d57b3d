"""Cowan's paired-comparison system for games of chance (Models 2.1, 2.11, 2.16).

Each player's skill is a discrete distribution on the grid ``x_k = −M + 2Mk/n`` (k = 0..n). A
match multiplies each player's distribution by the likelihood of the result under the luck
function ``Λ(x, y) = (1−β)/2 + β/(1 + e^(y−x))`` averaged over the opponent's distribution, then
convolves it with a drift kernel (skill changes between games) and renormalises.

Belief layout (1-D float64, see ``stream.ratings.base``): ``[lo, rounds, p_lo, ..., p_hi]``, the
window ``[lo, hi]`` of grid indices outside which cells carry numerically no mass, and the number
of matches that changed the player. The prior is N(0, σ0²) on the grid, minus negligible tails;
every update drops ≤ ``TAIL`` of the mass from each tail, which keeps windows at about ±7.3 sd:
what makes established players cheaper than new ones.

Algorithms (``algorithm=``): ``fast`` (default) the sweeps of ``kernels``, the default grid's fit
frozen bit for bit so that every CPU rates alike, within ~1e-16 per cell of the naive algorithm;
``laplace`` a different model, Laplace luck of scale ``laplace_scale`` (default π/√6, the
logistic's variance) and a Laplace drift kernel, every step an exact O(n) sweep (paper Alg.
4.5/4.6); ``naive`` the general algorithm of §4.1 on the windows, O(n²), the test oracle.

Draws (0 < score < 1): ``draw_form=paper`` (default), eq. (1), ``ρ_A(x)·Σ_k ρ_B(x_k)
Λ(x,x_k)^θ Λ(x_k,x)^(1−θ)``, by sweeps of its own fit (or a convolution should the fit miss
``DRAW_SOE_MAX_ERR``); ``draw_form=blatmmr`` raises the two win/loss sums instead.

A side advantage h (docs/advantage.md, "Cowan") is ``Λ(x + h, y)``, the luck tabulated for the
match (``shift``); a match without one takes the sweeps, bit for bit as if advantages did not exist.

The quantised belief is the state: the prior and the belief after *every* match pass through the
codec's own functions (``quant``), so every belief returned satisfies ``decode(encode(b)) == b``
bit for bit and results do not depend on how matches are batched.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cached_property
from typing import Any, ClassVar

import numba
import numpy as np

from stream.ratings.base import (
    Belief,
    FloatArray,
    IntArray,
    Params,
    Rating,
    RatingError,
    RatingSystem,
    flat_of,
)
from stream.ratings.cowan import kernels as K
from stream.ratings.cowan.arena import CowanArena, arena_from_flat, gather, run_arena_serial, run_arena_waves
from stream.ratings.cowan.inputs import check_advantages, check_matches, stack_rows
from stream.ratings.cowan.model import (
    _FROZEN_DRAW_FITS,
    _FROZEN_DRAW_MAX_ERR,
    DRAW_SOE_MAX_ERR,
    Model,
    _residual_soe,
    exp_exact,
    fit_exp_sum,
    fit_soe,
    gauss_taps,
    pack_draw_soe,
    pack_soe,
    pow_exact,
    thaw,
    trim_bounds,
)
from stream.ratings.cowan.naive import drift_naive, posterior_naive
from stream.ratings.cowan.quant import QMIN, canonical
from stream.ratings.cowan.shift import luck_tables
from stream.ratings.cowan.windows import HEADER, moments
from stream.ratings.waves import schedule_waves

ELO_SCALE = 400.0 / math.log(10.0)

#: mass each update may drop from each tail (keeps windows short: ±7.3σ instead of the
#: grid; 1e-13 is far below the codec's 1e-12 window bound and its ~6e-8 quantisation)
TAIL = 1e-13


@dataclass(frozen=True)
class CowanParams(Params):
    """docs/interface.md defaults; ``algorithm``, ``draw_form``, ``residual`` and the Laplace and
    sum-of-exponentials knobs are ours (documented in the module docstring)."""

    n: int = 1000
    M: float = 7.0
    sigma0: float = 0.7
    sigma_kernel: float = 0.03
    beta: float = 0.8
    draw_form: str = "paper"
    algorithm: str = "fast"
    soe_terms: int = 16
    laplace_scale: float = 0.0  # 0 → π/√6 (the logistic's variance)

    def __post_init__(self) -> None:
        finite = all(math.isfinite(x) for x in (self.M, self.sigma0, self.sigma_kernel, self.laplace_scale))
        if self.n < 2 or not finite or self.M <= 0 or self.sigma0 <= 0 or self.sigma_kernel < 0:
            raise RatingError("cowan: need n >= 2, M > 0, sigma0 > 0, sigma_kernel >= 0, all finite")
        if not 0.0 <= self.beta <= 1.0:
            raise RatingError(f"cowan: beta must lie in [0, 1] (got {self.beta})")
        if self.draw_form not in ("paper", "blatmmr"):
            raise RatingError(f"cowan: draw_form must be paper or blatmmr (got {self.draw_form!r})")
        if self.algorithm not in ("fast", "laplace", "naive"):
            raise RatingError(f"cowan: algorithm must be fast, laplace or naive (got {self.algorithm!r})")
        if not 1 <= self.soe_terms <= 40:
            raise RatingError("cowan: soe_terms must lie in 1..40")
        if self.laplace_scale < 0:
            raise RatingError("cowan: laplace_scale must be >= 0")


class Cowan(RatingSystem):
    """Cowan's system; see the module docstring for the model, layout and algorithms."""

    name: ClassVar[str] = "cowan"
    params_type: ClassVar[type[Params]] = CowanParams
    native: ClassVar[frozenset[str]] = frozenset({"matches"})
    #: a side advantage shifts the luck function's argument (``stream.ratings.cowan.shift``)
    side_advantage: ClassVar[bool] = True

    def __init__(self, params: Params | Mapping[str, Any] | None = None) -> None:
        super().__init__(params)
        self.p: CowanParams = self.params  # type: ignore[assignment]
        self._dtabs: dict[float, np.ndarray] = {}
        self._dsoe_rows: dict[float, np.ndarray] = {}
        #: batches at least this long, with at least this many matches per wave on average,
        #: run their waves in parallel (a parallel launch per wave costs more than a few matches)
        self.parallel_min_batch = 256
        self.parallel_min_width = 8

    # ---- model -------------------------------------------------------------------
    @property
    def laplace(self) -> bool:
        return self.p.algorithm == "laplace"

    @property
    def laplace_scale(self) -> float:
        return self.p.laplace_scale or math.pi / math.sqrt(6.0)

    def advantage_unit(self) -> float:
        """u in skill units: the sd of the luck function's distribution of performance differences
        (the logistic's π/√3; the Laplace luck's √2·scale, the same by default)."""
        return math.sqrt(2.0) * self.laplace_scale if self.laplace else math.pi / math.sqrt(3.0)

    @cached_property
    def _shift_tables(self) -> tuple[np.ndarray, np.ndarray]:
        """``(ex, lpar)`` of ``shift.shifted_luck`` for this grid and luck (built on first use)."""
        p = self.p
        return luck_tables(p.n, 2.0 * p.M / p.n, self.laplace_scale if self.laplace else 1.0, self.laplace)

    def _shift_args(self, advs: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(advs, ex, lpar)`` for the kernels: no advantage, an empty array and tables never read."""
        if advs is None:
            return _NO_ADVS, _NO_EX, _NO_LPAR
        return (advs, *self._shift_tables)

    def _checked(self, a: IntArray, b: IntArray, scores: FloatArray, advantages: FloatArray | None,
                 nplayers: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray | None]:
        """A batch as the kernels take it, checked (``inputs``); advantages None when there are none."""
        a = np.ascontiguousarray(a, dtype=np.int64)
        b = np.ascontiguousarray(b, dtype=np.int64)
        scores = np.ascontiguousarray(scores, dtype=np.float64)
        check_matches(a, b, scores, nplayers)
        return a, b, scores, check_advantages(advantages, a.shape[0], 2.0 * self.p.M)

    def luck(self, x: Any, y: Any) -> Any:
        """Λ(x, y): probability that skill x beats skill y (vectorised)."""
        p = self.p
        a0 = (1.0 - p.beta) / 2.0
        d = np.asarray(x, dtype=float) - np.asarray(y, dtype=float)
        if self.laplace:
            s = self.laplace_scale
            cdf = np.where(d >= 0, 1.0 - 0.5 * np.exp(-np.abs(d) / s), 0.5 * np.exp(-np.abs(d) / s))
            return a0 + p.beta * cdf
        return a0 + p.beta / (1.0 + np.exp(-d))

    def _luck_table(self, d: np.ndarray) -> np.ndarray:
        """Λ(d, 0) as ``luck`` computes it, with ``exp_exact``: the same bits on every CPU."""
        p = self.p
        a0 = (1.0 - p.beta) / 2.0
        if self.laplace:
            e = exp_exact(-np.abs(d) / self.laplace_scale)
            return a0 + p.beta * np.where(d >= 0, 1.0 - 0.5 * e, 0.5 * e)
        return a0 + p.beta / (1.0 + exp_exact(-d))

    def _gtab(self) -> np.ndarray:
        """``Model.gtab``: Λ(d·h, 0) on every grid distance d = −n..n."""
        p = self.p
        d = np.arange(-p.n, p.n + 1, dtype=float) * (2.0 * p.M / p.n)
        return np.ascontiguousarray(self._luck_table(d), dtype=np.float64)

    @cached_property
    def model(self) -> Model:
        p = self.p
        h = 2.0 * p.M / p.n
        grid = -p.M + h * np.arange(p.n + 1, dtype=float)
        if self.laplace:
            s = self.laplace_scale
            soe = pack_soe(np.array([math.exp(-h / s)]), np.array([0.5]))
            soe_error = 0.0
            b = p.sigma_kernel / math.sqrt(2.0)
            r = math.exp(-h / b) if b > 0 else 0.0
            w0 = (1.0 - r) / (1.0 + r)
            taps = np.array([w0])
            full_taps = w0 * r ** np.abs(np.arange(-p.n, p.n + 1, dtype=float))
            drift_mode, drift_rate = K.DRIFT_EXP, r
        else:
            soe, soe_error = _residual_soe(p.n, h, p.soe_terms)
            soe = soe.copy()  # the cached row stays unshared
            taps = gauss_taps(p.sigma_kernel, h)
            full_taps = taps
            drift_mode, drift_rate = K.DRIFT_TAPS, 0.0
        return Model(
            grid=grid,
            a0=(1.0 - p.beta) / 2.0,
            beta=p.beta,
            soe=np.ascontiguousarray(soe, dtype=np.float64),
            luck_table=self._gtab,
            form=K.FORM_PAPER if p.draw_form == "paper" else K.FORM_BLATMMR,
            taps=np.ascontiguousarray(taps, dtype=np.float64),
            full_taps=np.ascontiguousarray(full_taps, dtype=np.float64),
            drift_mode=drift_mode,
            drift_rate=drift_rate,
            soe_error=soe_error,
        )

    def _dsoe(self, score: float) -> np.ndarray:
        """Paper-form draw kernel ``D = g(d)^s g(−d)^(1−s)`` as two one-sided sums of
        complex exponentials (``pack_draw_soe``; cached per score), or a row starting with
        0 (use the FFT/direct convolution) when the fit misses ``DRAW_SOE_MAX_ERR``."""
        row = self._dsoe_rows.get(score)
        if row is None:
            if len(self._dsoe_rows) >= 64:
                self._dsoe_rows.clear()
            n = self.p.n
            tab = self._dtab(score)
            # g(+∞) = a0 + β, g(−∞) = a0 (logistic and Laplace luck alike)
            hi, lo = self.model.a0 + self.model.beta, self.model.a0
            pw = pow_exact(np.array([hi, lo]), score)
            qw = pow_exact(np.array([hi, lo]), 1.0 - score)
            tp = float(pw[0] * qw[1])  # hi^s lo^(1−s)
            tm = float(pw[1] * qw[0])  # lo^s hi^(1−s)
            yp = tab[n + 1 :] - tp
            ym = tab[n - 1 :: -1] - tm
            frozen = self._frozen_draw_fit(score, yp, ym)
            if frozen is not None:
                row = np.concatenate(([1.0, tp, tm, float(tab[n]), 5.0 + frozen.shape[0]], frozen, frozen))
            else:
                zp, cp, ep = fit_exp_sum(yp)
                if np.array_equal(yp, ym):
                    zm, cm, em = zp, cp, ep
                else:
                    zm, cm, em = fit_exp_sum(ym)
                if max(ep, em) <= DRAW_SOE_MAX_ERR:
                    row = pack_draw_soe(tp, tm, float(tab[n]), (zp, cp), (zm, cm))
                else:
                    row = np.zeros(5)
            self._dsoe_rows[score] = row
        return row

    def _frozen_draw_fit(self, score: float, yp: np.ndarray, ym: np.ndarray) -> np.ndarray | None:
        """The ``pack_soe`` row of ``_FROZEN_DRAW_FITS`` for this model and score, if there is
        one, the kernel is symmetric (``yp == ym``) and the row fits this machine's ``yp``."""
        p = self.p
        if self.laplace or not np.array_equal(yp, ym):
            return None
        thawed = thaw(_FROZEN_DRAW_FITS.get((p.n, float(p.M), float(p.beta), float(score))), yp, _FROZEN_DRAW_MAX_ERR)
        return None if thawed is None else thawed[0]

    def _dtab(self, score: float) -> np.ndarray:
        """Paper-form draw kernel ``g(d)^s g(−d)^(1−s)`` on d = −n..n (cached per score)."""
        tab = self._dtabs.get(score)
        if tab is None:
            if len(self._dtabs) >= 64:  # arbitrary partial scores: keep the cache bounded
                self._dtabs.clear()
            g = self.model.gtab
            tab = np.ascontiguousarray(pow_exact(g, score) * pow_exact(g[::-1], 1.0 - score))
            self._dtabs[score] = tab
        return tab

    # ---- beliefs -----------------------------------------------------------------
    @cached_property
    def _prior(self) -> Belief:
        """N(0, σ0²) on the grid, tails trimmed, quantised (a codec fixed point)."""
        grid = self.model.grid
        p = exp_exact(-0.5 * (grid / self.p.sigma0) ** 2)
        p /= math.fsum(p)
        lo, hi = trim_bounds(p, TAIL)
        w = p[lo : hi + 1] / math.fsum(p[lo : hi + 1])
        return canonical(np.concatenate(([float(lo), 0.0], w)))

    def new_belief(self) -> Belief:
        return self._prior.copy()

    def window(self, belief: Belief) -> tuple[int, np.ndarray]:
        """``(lo, probabilities)`` of a belief, validated."""
        bel = self._belief_array(belief)
        return int(bel[0]), bel[HEADER:]

    def full(self, belief: Belief) -> np.ndarray:
        """The belief as a distribution on the whole grid (n + 1 cells)."""
        lo, probs = self.window(belief)
        out = np.zeros(self.p.n + 1)
        out[lo : lo + probs.shape[0]] = probs
        return out

    def summary(self, belief: Belief) -> Rating:
        lo, probs = self.window(belief)
        mean, sd = moments(probs, self.model.grid, lo)
        return Rating(rating=ELO_SCALE * mean + 1500.0, mu=mean, sigma=ELO_SCALE * sd, rounds=int(belief[1]))

    def ranking_score(self, belief: Belief) -> float:
        lo, probs = self.window(belief)
        return moments(probs, self.model.grid, lo)[0]

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """Σ_i Σ_k ρ_A(x_i) Λ(x_i + h, x_k) ρ_B(x_k), h = ``advantage`` (A's side advantage, skill
        units) — the model has no draws, so this is also A's expected score."""
        m = self.model
        fa, fb = self.full(a), self.full(b)
        la, pa = self.window(a)
        lb, pb = self.window(b)
        if advantage:
            h = check_advantages(np.array([advantage], dtype=np.float64), 1, 2.0 * self.p.M)
            assert h is not None
            ex, lpar = self._shift_tables
            return float(K.expected_score_shifted(fa, la, la + pa.shape[0] - 1, fb, lb, lb + pb.shape[0] - 1,
                                                  m.a0, m.beta, float(h[0]), ex, lpar))
        return float(
            K.expected_score(
                fa, la, la + pa.shape[0] - 1, fb, lb, lb + pb.shape[0] - 1,
                m.a0, m.beta, m.soe,
            )
        )

    # ---- updates -----------------------------------------------------------------
    # ``rate_round`` is the base's (a two-player round is one match). Its ``weight`` is ignored: the
    # paper's update has no weight (every match is one full update and one drift step), and a
    # tempered likelihood would need its own sum-of-exponentials tables per weight.
    def rate_matches(
        self,
        beliefs: Sequence[Belief],
        a: IntArray,
        b: IntArray,
        scores: FloatArray,
        times_ms: IntArray,
        advantages: FloatArray | None = None,
        *,
        quantise: bool = True,
    ) -> list[Belief]:
        """Exact sequential meaning; conflict-free waves run in parallel (``_run_arena``).
        ``advantages[m]``: A's side advantage h in match m (skill units, |h| ≤ 2M); None or zeros:
        none. ``times_ms`` is unused: as in the paper, skills drift by one kernel step per match,
        not per unit of time. ``quantise=False`` returns the raw model instead of codec fixed
        points (tests against the naive oracle, benchmarks; not what the pipeline stores)."""
        nplayers = len(beliefs)
        a, b, scores, advs = self._checked(a, b, scores, advantages, nplayers)
        if a.shape[0] == 0:
            return list(beliefs)
        if self.p.algorithm == "naive":
            return self._rate_naive(beliefs, a, b, scores, quantise, advs)
        if a.shape[0] == 1:  # the service's common case: no batch set-up
            return self._rate_one(beliefs, int(a[0]), int(b[0]), float(scores[0]), quantise,
                                  0.0 if advs is None else float(advs[0]))
        flat, start, cap, lohi, rounds = self._arena_of(beliefs)
        # the new windows go after the old ones
        slot = np.arange(nplayers, dtype=np.int64)
        vals, status, _ = self._run_arena(flat, start, cap, lohi, rounds, flat.shape[0], slot, a, b, scores,
                                          quantise, advs)
        if quantise:
            _check_status(status)
        played = np.bincount(a, minlength=nplayers) + np.bincount(b, minlength=nplayers)
        who = np.flatnonzero(played).astype(np.int64)
        new_flat, offs = gather(vals, start, lohi, rounds, who)
        out: list[Belief] = list(beliefs)
        bounds = offs.tolist()
        for i, s, e in zip(who.tolist(), bounds[:-1], bounds[1:], strict=True):
            out[i] = new_flat[s:e]  # views of one new buffer: beliefs are never written in place
        return out

    def _run_arena(self, vals: np.ndarray, start: np.ndarray, cap: np.ndarray, lohi: np.ndarray,
                   rounds: np.ndarray, end: int, slot: np.ndarray, a: np.ndarray, b: np.ndarray,
                   scores: np.ndarray, quantise: bool,
                   advs: np.ndarray | None) -> tuple[np.ndarray, np.ndarray, int]:
        """The matches ``(slot[a[m]], slot[b[m]])`` (A with advantage ``advs[m]``; None: none) on an
        arena, in place: ``(vals, status, end)``, the arena's values (a new array if it grew), the
        flags of local players whose belief came out non-finite, its new end. Large batches with
        wide waves run in parallel (``parallel_min_batch`` / ``parallel_min_width``)."""
        m = self.model
        # paper-form draw tables, one per distinct partial score
        partial: list[float] = []
        if m.form == K.FORM_PAPER:
            mid = scores[(scores > 0.0) & (scores < 1.0)]
            if mid.size:
                partial = [float(s) for s in np.unique(mid)]
        dtabs = np.stack([self._dtab(s) for s in partial]) if partial else _NO_DTABS
        dsoes = stack_rows([self._dsoe(s) for s in partial]) if partial else _NO_DSOES
        dtab_index = np.zeros(a.shape[0], dtype=np.int64)
        for t, s in enumerate(partial):
            dtab_index[scores == s] = t
        status = np.zeros(slot.shape[0], dtype=np.uint8)
        grow = self._grow
        wide = False
        if a.shape[0] >= self.parallel_min_batch:
            _, order, starts = schedule_waves(a, b, status.shape[0])
            wide = a.shape[0] >= self.parallel_min_width * (starts.shape[0] - 1)
        if wide:
            vals, end = run_arena_waves(
                vals, start, cap, lohi, rounds, end, slot, a, b, scores, order, starts, dtab_index, dtabs,
                dsoes, m.a0, m.beta, m.soe, self.p.n + 1, m.form, m.taps, m.drift_mode, m.drift_rate, TAIL,
                quantise, QMIN, grow, status, numba.get_num_threads(), *self._shift_args(advs),
            )
        else:
            vals, end = run_arena_serial(
                vals, start, cap, lohi, rounds, end, slot, a, b, scores, dtab_index, dtabs, dsoes, m.a0,
                m.beta, m.soe, self.p.n + 1, m.form, m.taps, m.drift_mode, m.drift_rate, TAIL, quantise,
                QMIN, grow, status, *self._shift_args(advs),
            )
        return vals, status, end

    def rate_arena(self, arena: CowanArena, slots: IntArray, a: IntArray, b: IntArray, scores: FloatArray,
                   advantages: FloatArray | None = None) -> None:
        """``rate_matches`` on beliefs held by ``arena`` (local player i at ``slots[i]``), in place,
        quantised, the same bits; on ``RatingError`` the batch's beliefs are left part-updated."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        a, b, scores, advs = self._checked(a, b, scores, advantages, slots.shape[0])
        if a.shape[0] == 0:
            return
        if self.p.algorithm == "naive":
            beliefs = arena.beliefs(slots)
            new = self._rate_naive(beliefs, a, b, scores, True, advs)
            for i in np.unique(np.concatenate((a, b))).tolist():
                arena.set(int(slots[i]), new[i])
            return
        # every match may move both windows to fresh cells: room for that now (free until
        # written), so that the kernel never grows the arena by copying it
        arena.reserve(2 * a.shape[0] * arena.cells)
        arena.vals, status, arena.end = self._run_arena(
            arena.vals, arena.start, arena.cap, arena.lohi, arena.rounds, arena.end, slots, a, b, scores, True, advs)
        _check_status(status)
        live = arena.live_cells()
        if arena.end > live + live // 4 + (1 << 20):  # windows that moved left their old cells behind
            arena.compact()

    @cached_property
    def _grow(self) -> int:
        """The most a window can grow on each side in one match: the drift kernel's half-width."""
        m = self.model
        return (m.taps.shape[0] - 1) // 2 if m.drift_mode == K.DRIFT_TAPS else self.p.n + 1

    def new_arena(self) -> CowanArena:
        """An empty ``CowanArena`` for this system's grid and drift kernel."""
        return CowanArena(self.p.n + 1, self._grow)

    def _arena_of(self, beliefs: Sequence[Belief]) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray,
                                                            np.ndarray]:
        """A temporary arena over the beliefs (``arena_from_flat``: a new buffer holding them
        back to back); a belief ``window`` would reject raises its error."""
        gathered = flat_of(beliefs)
        if gathered is None:  # (mixed or 0-d dimensions do not concatenate at all)
            gathered = flat_of([self._belief_array(x) for x in beliefs])
            assert gathered is not None
        flat, offsets = gathered
        start, cap, lohi, rounds, bad = arena_from_flat(flat, offsets, self.p.n + 1)
        if bad >= 0:
            self._belief_array(beliefs[bad])  # raises window's error
            raise RatingError(f"cowan: malformed belief {bad}")
        return flat, start, cap, lohi, rounds

    @cached_property
    def _pair_consts(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fpar, ipar with quant = 0, ipar with quant = 1)`` for ``K.rate_pair``."""
        m = self.model
        fpar = np.array([m.a0, m.beta, m.drift_rate, TAIL])
        ipar = [m.form, m.drift_mode, 0, QMIN, self.p.n + 1]
        raw = np.array(ipar, dtype=np.int64)
        ipar[2] = 1
        return fpar, raw, np.array(ipar, dtype=np.int64)

    def _belief_array(self, belief: Belief) -> np.ndarray:
        """A belief as a validated contiguous float64 array."""
        bel = np.ascontiguousarray(belief, dtype=np.float64)
        if bel.ndim != 1 or bel.shape[0] <= HEADER:
            raise RatingError("cowan: malformed belief (too short)")
        lo = int(bel[0])
        if lo < 0 or lo + bel.shape[0] - HEADER > self.p.n + 1:
            raise RatingError(f"cowan: belief window [{lo}, {lo + bel.shape[0] - HEADER - 1}] outside the grid")
        return bel

    def _rate_one(self, beliefs: Sequence[Belief], ia: int, ib: int, score: float, quantise: bool,
                  h: float) -> list[Belief]:
        """One match (validated; A with advantage ``h``) by ``K.rate_pair``: the same ``update_pair_in``
        as a batch, without the batch arena, wave schedule or per-batch tables."""
        m = self.model
        if m.form == K.FORM_PAPER and 0.0 < score < 1.0:
            dtab, dsoe = self._dtab(score), self._dsoe(score)
        else:  # read only for a draw of the paper's form
            dtab, dsoe = _NO_DTABS[0], _NO_DSOES[0]
        fpar, raw, quant = self._pair_consts
        new_a, new_b, status = K.rate_pair(
            self._belief_array(beliefs[ia]), self._belief_array(beliefs[ib]), score, dtab, dsoe,
            m.soe, m.taps, fpar, quant if quantise else raw, h,
            *(self._shift_tables if h else (_NO_EX, _NO_LPAR)),
        )
        if quantise and status:
            raise RatingError(f"cowan: non-finite belief for player {ia if status & 1 else ib}")
        out = list(beliefs)
        out[ia] = new_a
        out[ib] = new_b
        return out

    # ---- the naive oracle ----------------------------------------------------------
    def naive_update(self, a: Belief, b: Belief, score: float, advantage: float = 0.0) -> tuple[Belief, Belief]:
        """One match by the general algorithm (§4.1) on the windows, then the drift by ``np.convolve``:
        the kernels' oracle (same model and trimming rule, no shared code with the kernels). A side
        advantage h = ``advantage``: A's skills seen by the luck function as ``x_i + h``."""
        grid = self.model.grid
        la, pa = self.window(a)
        lb, pb = self.window(b)
        xa = grid[la : la + pa.shape[0]]
        xb = grid[lb : lb + pb.shape[0]]
        if advantage:
            xa = xa + advantage
        post_a, post_b = posterior_naive(xa, pa, xb, pb, self.luck, score, self.p.draw_form)
        return self._naive_drift(la, post_a, a[1] + 1), self._naive_drift(lb, post_b, b[1] + 1)

    def _naive_drift(self, lo: int, post: np.ndarray, rounds: float) -> Belief:
        taps = self.model.full_taps
        half = (taps.shape[0] - 1) // 2
        a = max(0, lo - half)
        z = min(self.p.n, lo + post.shape[0] - 1 + half)
        padded = np.zeros(z - a + 1)
        padded[lo - a : lo - a + post.shape[0]] = post
        buf = drift_naive(padded, taps)
        t0, t1 = trim_bounds(buf, TAIL)
        kept = buf[t0 : t1 + 1]
        return np.concatenate(([float(a + t0), rounds], kept / kept.sum()))

    def _rate_naive(
        self, beliefs: Sequence[Belief], a: IntArray, b: IntArray, scores: FloatArray, quantise: bool,
        advs: np.ndarray | None,
    ) -> list[Belief]:
        out = list(beliefs)
        for m in range(a.shape[0]):
            ia, ib = int(a[m]), int(b[m])
            na, nb = self.naive_update(out[ia], out[ib], float(scores[m]), 0.0 if advs is None else float(advs[m]))
            out[ia], out[ib] = (canonical(na), canonical(nb)) if quantise else (na, nb)
        return out


def _check_status(status: np.ndarray) -> None:
    """``RatingError`` naming the first local player whose belief came out non-finite."""
    if status.any():
        raise RatingError(f"cowan: non-finite belief for player {int(np.flatnonzero(status)[0])}")


#: the draw tables and fits of a batch without partial scores (never read)
_NO_DTABS = np.zeros((1, 1))
_NO_DSOES = np.zeros((1, 5))
#: the kernels' advantage arguments of a batch without one (an empty array; tables never read)
_NO_ADVS = np.zeros(0)
_NO_EX = np.ones(1)
_NO_LPAR = np.zeros(3)


def warmup() -> None:
    """Compile (or load from the numba cache) every kernel on a small grid, so that the
    first real event does not pay for compilation.

    Both the serial kernel (3 matches) and the parallel one (one wave of
    ``parallel_min_batch`` disjoint matches): without the latter, a new worker compiles it
    inside its first large take batch, and that batch's matches wait for the compiler."""
    for algo in ("fast", "laplace"):
        sys_ = Cowan({"algorithm": algo, "n": 40})
        bel = [sys_.new_belief() for _ in range(3)]
        out = sys_.rate_matches(
            bel, np.array([0, 1, 2]), np.array([1, 2, 0]), np.array([1.0, 0.5, 0.0]), np.zeros(3, np.int64)
        )
        sys_.rate_matches(bel[:2], np.array([0]), np.array([1]), np.array([1.0]), np.zeros(1, np.int64))  # rate_pair
        sys_.win_probability(out[0], out[1])
        sys_.win_probability(out[0], out[1], 0.1)  # with a side advantage (``shift``)
        wide = sys_.parallel_min_batch
        players = [sys_.new_belief() for _ in range(2 * wide)]
        scores = np.resize(np.array([1.0, 0.5, 0.0]), wide)
        sys_.rate_matches(players, np.arange(0, 2 * wide, 2), np.arange(1, 2 * wide, 2), scores,
                          np.zeros(wide, np.int64))
        # the embedded replay's pool arena and its summaries read in place (``--out``, ``--history``)
        arena = sys_.new_arena()
        slots = arena.add_copies(sys_.new_belief(), 2)
        sys_.rate_arena(arena, slots, np.array([0]), np.array([1]), np.array([1.0]))
        arena.moments(slots, sys_.model.grid)


__all__ = ["Cowan", "CowanParams", "drift_naive", "fit_exp_sum", "fit_soe", "pack_soe", "posterior_naive", "warmup"]

