"""Elo-MMR (logistic performances) and Elo-MMχ (Gaussian), Ebtekar & Liu, WWW'21.

Parametrised like the reference implementation (EbTech/Elo-MMR, pip ``Elo-MMR-Py``):
``w = weight_limit × round weight × noob_delay[rounds played]``, performance spread
``σ_perf² = (1 + 1/w)·sig_limit² + drift_per_day/w``, diffusion per round
``γ² = w·sig_limit² + drift_per_day·days since the player's last round`` (0 days for a newcomer
or a round dated before the player's last one), ties count as a win plus a loss (the player's
own entry included) unless ``split_ties``; displayed rating ``μ − 3(σ − 80)``.

Belief layout (one float64 array per player, lossless through ``Float64Codec``):

* [0] μ, the posterior mean (the robust average of the Gaussian and logistic terms); [1] σ;
* [2] centre and [3] weight (precision, 1/σ²) of the Gaussian (prior) term;
* [4] number of rated rounds; [5] time of the latest rated round (ms since epoch; an
  out-of-order round does not move it back, so drift is never counted twice);
* [6:] logistic terms, three floats each, oldest first: centre (a past performance),
  ``w_arg`` = π/(2√3·σ_perf), ``w_out`` (π/(√3·σ_perf) × accumulated diffusion decay); a term's
  precision is ``2·w_arg·w_out·3/π²``. Elo-MMχ's beliefs never carry logistic terms.

``history_limit`` (default 100, ``0`` = unlimited) bounds the logistic terms: the oldest is
folded into the Gaussian term preserving its weight, as the reference does; with ρ = 1 terms
older than 100 rounds weigh ~1e-16 of a new one, so the fold is invisible.

Intentional differences from the reference
------------------------------------------
* Performances are exact (no subsampling) and solved by the Chebyshev-panel method of
  ``kernels`` instead of Newton on O(N) sums; results agree to ~1e-9 points.
* ``perf_ceiling`` also caps Elo-MMχ performances (the reference caps only the logistic
  variant). ρ = ∞ collapses to the Gaussian term like the reference's special case.
* The reference keeps every logistic term in ``mmr`` (its history bound is the
  subsample size); compare with ``history_limit=0``.
* Performance roots are not clamped to the reference's Newton bounds [−6000, 9000].
* Tied players share one performance equation, solved once per tie group.
* Elo-MMχ terms use a stable inverse Mills ratio (the reference's pdf/cdf ratios turn
  into NaN once an opponent is ~38 σ away; so would a naive oracle written from them).
* A performance far outside the field (≳ 20 logistic scales beyond every opponent) is
  ill-conditioned in double precision for any solver; μ is still stable (~1e-5 points).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import math
from collections.abc import Sequence
from dataclasses import dataclass
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
    check_team_round,
    concat_f64,
    offsets_of,
    split,
)
from stream.ratings.elo_mmr import kernels as K
from stream.ratings.elo_mmr import teams as KT
from stream.runtime import parallel_min_players

HEADER = K.HEADER
#: rounds smaller than this run the kernels on one thread (None: the setting ``MMR_ELO_PARALLEL_MIN``):
#: on a shared machine a descheduled thread of numba's pool stalls every parallel loop
PARALLEL_MIN_PLAYERS: int | None = None
TANH_MULTIPLIER = K.TANH_MULTIPLIER
DISPLAY_SIG = 80.0


@dataclass(frozen=True)
class EloMMRParams(Params):
    """Parameters of Elo-MMR / Elo-MMχ (docs/interface.md names and defaults)."""

    weight_limit: float = 0.2
    sig_limit: float = 80.0
    rho: float = 1.0
    mu_init: float = 1500.0
    sig_init: float = 350.0
    split_ties: bool = False
    drift_per_day: float = 0.0
    history_limit: int = 100
    noob_delay: tuple[float, ...] = ()
    #: team rounds: a member's new σ² is the exact conditional variance ``σ² − ω²σ⁴/V_t`` (a team
    #: result says less about each member than an individual result); false: the individual
    #: system's σ update. The default by the evidence of docs/evaluation.md, "Teams"; docs/teams.md
    team_exact_sigma: bool = True
    #: team rounds: ``mean`` (default), a team performs the ω-weighted mean of its members' skills plus one
    #: performance noise, so a team of any size behaves like one player of the individual system (docs/teams.md,
    #: "Large teams"); ``sum``: a team performs the sum of its members' performances, each with its own noise
    team_performance: str = "mean"

    def __post_init__(self) -> None:
        self.require({
            "weight_limit": self.weight_limit > 0 and math.isfinite(self.weight_limit),
            "sig_limit": self.sig_limit > 0 and math.isfinite(self.sig_limit),
            "rho": self.rho >= 0 and not math.isnan(self.rho),
            "mu_init": math.isfinite(self.mu_init),
            "sig_init": self.sig_init > 0 and math.isfinite(self.sig_init),
            "drift_per_day": self.drift_per_day >= 0 and math.isfinite(self.drift_per_day),
            "history_limit": int(self.history_limit) == self.history_limit and self.history_limit >= 0,
            "noob_delay": all(float(x) > 0 and math.isfinite(float(x)) for x in self.noob_delay),
            "team_performance": self.team_performance in ("mean", "sum"),
        })
        object.__setattr__(self, "noob_delay", tuple(float(x) for x in self.noob_delay))


@dataclass(frozen=True, slots=True)
class RoundResult:
    """New beliefs of a round plus each player's performance (for tests and reports)."""

    beliefs: list[Belief]
    performances: FloatArray


@dataclass(frozen=True, slots=True)
class TeamRoundResult:
    """New beliefs of a team round, each member's performance and each team's."""

    beliefs: list[Belief]
    performances: FloatArray
    team_performances: FloatArray


def _gather(beliefs: Sequence[Belief]) -> tuple[FloatArray, IntArray]:
    """Beliefs concatenated into one flat array + offsets (the only per-player Python). Non-finite
    values are found by the kernel, which reads every value anyway."""
    offsets = offsets_of(beliefs)
    lengths = np.diff(offsets)
    bad = invalid_length(lengths)
    if bad >= 0:
        raise RatingError(f"belief of player #{bad} has an invalid length {int(lengths[bad])}")
    return concat_f64(beliefs), offsets


def invalid_length(lengths: IntArray) -> int:
    """The first player whose belief is not a header and whole logistic terms long, or −1."""
    if len(lengths) and (lengths.min() < HEADER or np.any((lengths - HEADER) % 3)):
        return int(np.flatnonzero((lengths < HEADER) | ((lengths - HEADER) % 3 != 0))[0])
    return -1


def _shifts(shift: FloatArray | Sequence[float] | None, n: int) -> FloatArray:
    """The per-team (or per-player) side advantage as the kernels take it: zeros when None."""
    if shift is None:
        return np.zeros(n)
    out = np.asarray(shift, dtype=np.float64)
    if out.shape != (n,) or not np.all(np.isfinite(out)):
        raise RatingError(f"a side advantage must be {n} finite numbers")
    return out


def _scatter(flat: FloatArray, offsets: IntArray) -> list[Belief]:
    """The kernel output as per-player copies: a view would keep the whole round's buffer alive
    while any one of its players is not rated again (the evaluation would retain nearly every one)."""
    return [v.copy() for v in split(flat, offsets)]


def _call_kernel(n: int, kernel: Any, *args: Any) -> Any:
    """``kernel(*args)`` on one thread below ``PARALLEL_MIN_PLAYERS`` players (``n``), a zero σ
    or weight in a belief reported as a RatingError."""
    threads = numba.get_num_threads()
    if n < (parallel_min_players() if PARALLEL_MIN_PLAYERS is None else PARALLEL_MIN_PLAYERS) and threads > 1:
        numba.set_num_threads(1)
    try:
        return kernel(*args)
    except (ZeroDivisionError, SystemError) as exc:
        # a zero σ or weight: numba re-raises the kernel's ZeroDivisionError from a cached kernel as a
        # SystemError (a worker would crash on it; a RatingError dead-letters the event instead)
        cause: BaseException | None = exc
        while cause is not None and not isinstance(cause, ZeroDivisionError):
            cause = cause.__cause__
        if cause is None:
            raise
        raise RatingError("a belief holds a zero σ or weight (division by zero in the round kernel)") from exc
    finally:
        if threads > 1:
            numba.set_num_threads(threads)


def performance_win_probability(diff: float, spread: float, gaussian: bool) -> float:
    """P(a performance beats another) when their difference has mean ``diff`` and sd ``spread``:
    the Gaussian tail (Elo-MMχ) or, for Elo-MMR, the difference of two logistics approximated by
    a logistic of the same variance. Players and teams (``lobby.outcomes``) share it."""
    if gaussian:
        return 0.5 * math.erfc(-diff / (spread * math.sqrt(2.0)))
    return 1.0 / (1.0 + math.exp(-diff * TANH_MULTIPLIER / spread))


def _check_output(out: FloatArray, bad: int, weight: float) -> None:
    """Refuse a round whose kernel found a non-finite belief or produced non-finite ratings."""
    if bad >= 0:
        raise RatingError(f"belief of player #{bad} holds a non-finite number")
    # an extreme round weight (e.g. 1e308 or 1e-320) overflows the update: reject the round
    # rather than store beliefs that would make every later round of these players fail
    if not math.isfinite(float(np.sum(out))):  # one pass, no temporary (NaN/inf propagate)
        raise RatingError(f"round weight {weight} gives non-finite ratings")


class EloMMR(RatingSystem):
    """Elo-MMR with logistic performances and transfer speed ρ (the reference's ``mmr``)."""

    name: ClassVar[str] = "elo-mmr"
    params_type: ClassVar[type[Params]] = EloMMRParams
    native: ClassVar[frozenset[str]] = frozenset({"rounds"})
    gaussian: ClassVar[bool] = False
    side_advantage: ClassVar[bool] = True

    params: EloMMRParams

    def __init__(self, params: Params | Any = None) -> None:
        super().__init__(params)
        if not isinstance(self.params, EloMMRParams):
            raise RatingError(f"{self.name} needs EloMMRParams, got {type(self.params).__name__}")
        self._noob = np.asarray(self.params.noob_delay, dtype=np.float64)

    def new_belief(self) -> Belief:
        p = self.params
        return np.array([p.mu_init, p.sig_init, p.mu_init, p.sig_init**-2, 0.0, 0.0])

    def summary(self, belief: Belief) -> Rating:
        mu, sig = float(belief[0]), float(belief[1])
        return Rating(rating=mu - 3.0 * (sig - DISPLAY_SIG), mu=mu, sigma=sig, rounds=int(belief[4]))

    def rate_round(
        self,
        beliefs: Sequence[Belief],
        ranks: IntArray,
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
    ) -> list[Belief]:
        return self.rate_round_detailed(beliefs, ranks, time_ms, weight, perf_ceiling).beliefs

    def rate_round_detailed(
        self,
        beliefs: Sequence[Belief],
        ranks: IntArray | Sequence[int],
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
    ) -> RoundResult:
        """Like ``rate_round`` but also returns the performances (NaN when skipped)."""
        rk = self._check_round(len(beliefs), ranks, time_ms, weight, perf_ceiling)
        if rk is None:
            return RoundResult(list(beliefs), np.full(len(beliefs), np.nan))
        flat, offsets = _gather(beliefs)
        out, out_offsets, perfs = self._rate_flat(flat, offsets, rk, time_ms, weight, perf_ceiling)
        return RoundResult(_scatter(out, out_offsets), perfs)

    def _check_round(
        self, n: int, ranks: IntArray | Sequence[int], time_ms: int, weight: float, perf_ceiling: float,
    ) -> IntArray | None:
        """Validated ranks, or None when the round changes nothing (< 2 players, all tied)."""
        rk = np.asarray(ranks)
        if rk.shape != (n,):
            raise RatingError(f"{n} beliefs but {rk.size} ranks")
        if not (math.isfinite(weight) and weight > 0):
            raise RatingError(f"round weight must be finite and positive (got {weight})")
        p = self.params
        lim2 = p.sig_limit**2
        for factor in (min(p.noob_delay, default=1.0), max(p.noob_delay, default=1.0), 1.0):
            w = p.weight_limit * weight * factor
            if not (w > 0 and math.isfinite(w * lim2 + p.drift_per_day) and math.isfinite((1 + 1 / w) * lim2)):
                raise RatingError(f"round weight {weight} is out of range (the update would overflow)")
        if math.isnan(perf_ceiling) or perf_ceiling == -math.inf:
            raise RatingError(f"perf_ceiling must be a number or +inf (got {perf_ceiling})")
        if not math.isfinite(float(time_ms)):
            raise RatingError(f"time is not finite ({time_ms})")
        if rk.dtype.kind == "f" and not np.isfinite(rk).all():
            raise RatingError("ranks contain a non-finite number")
        if n < 2 or rk.min() == rk.max():
            return None
        if rk.dtype.kind in "iu" and max(abs(int(rk.min())), abs(int(rk.max()))) <= 2**52:
            return rk
        # dense ranks keep ties exact when the values do not fit a float64 mantissa
        return np.unique(rk, return_inverse=True)[1].reshape(n)

    def _rate_flat(
        self, flat: FloatArray, offsets: IntArray, rk: IntArray, time_ms: int, weight: float,
        perf_ceiling: float,
    ) -> tuple[FloatArray, IntArray, FloatArray]:
        """Run the round kernel on gathered beliefs (thread policy, non-finite check)."""
        p = self.params
        out, out_offsets, perfs, bad = _call_kernel(
            len(rk), K.rate_round_flat,
            flat, offsets, rk.astype(np.float64), float(time_ms), float(weight), float(perf_ceiling),
            p.weight_limit, self._noob, p.sig_limit, p.drift_per_day, p.rho, p.split_ties,
            self.gaussian, int(p.history_limit),
        )
        _check_output(out, bad, weight)
        return out, out_offsets, perfs

    def rate_team_round(
        self,
        beliefs: Sequence[Belief],
        team_of: IntArray,
        team_ranks: IntArray,
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
        player_weights: FloatArray | None = None,
        team_shift: FloatArray | None = None,
    ) -> list[Belief]:
        """A round ranked by teams: the team model of ``teams`` (docs/teams.md; exact for Elo-MMχ,
        moment-matched for Elo-MMR)."""
        return self.rate_team_round_detailed(beliefs, team_of, team_ranks, time_ms, weight, perf_ceiling,
                                             player_weights, team_shift).beliefs

    def rate_team_round_detailed(
        self,
        beliefs: Sequence[Belief],
        team_of: IntArray | Sequence[int],
        team_ranks: IntArray | Sequence[int],
        time_ms: int,
        weight: float = 1.0,
        perf_ceiling: float = math.inf,
        player_weights: FloatArray | Sequence[float] | None = None,
        team_shift: FloatArray | Sequence[float] | None = None,
    ) -> TeamRoundResult:
        """Like ``rate_team_round`` but also returns the members' and teams' performances
        (NaN when the round changes nothing: fewer than two teams, or all teams tied)."""
        n = len(beliefs)
        nteams = len(team_ranks)
        # the ranks as given: ``_check_round`` refuses non-finite ones and keeps ties of huge values exact
        team_index, _, pw = check_team_round(n, team_of, team_ranks, player_weights)
        rk = self._check_round(nteams, team_ranks, time_ms, weight, perf_ceiling)
        if n and float(pw.min()) < 1.0:  # the smallest weight a player gets must not overflow either
            self._check_round(nteams, team_ranks, time_ms, weight * float(pw.min()), perf_ceiling)
        if rk is None:
            return TeamRoundResult(list(beliefs), np.full(n, np.nan), np.full(nteams, np.nan))
        flat, offsets = _gather(beliefs)
        p = self.params
        out, out_offsets, perfs, team_perfs, bad = _call_kernel(
            n, KT.rate_team_round_flat,
            flat, offsets, team_index, rk.astype(np.float64), pw, float(time_ms), float(weight),
            float(perf_ceiling), p.weight_limit, self._noob, p.sig_limit, p.drift_per_day, p.rho, p.split_ties,
            self.gaussian, int(p.history_limit), bool(p.team_exact_sigma), p.team_performance == "mean",
            _shifts(team_shift, nteams),
        )
        _check_output(out, bad, weight)
        return TeamRoundResult(_scatter(out, out_offsets), perfs, team_perfs)

    def diffuse(self, belief: Belief, variance: float) -> Belief:
        """The belief after a pseudodiffusion adding ``variance`` to σ² (μ unchanged): the kernel
        ``rate_round`` applies before every round, with variance ``w·sig_limit² + drift_per_day·days``."""
        if not (math.isfinite(variance) and variance >= 0):
            raise RatingError(f"diffusion variance must be finite and >= 0 (got {variance})")
        collapse = self.gaussian or math.isinf(self.params.rho)
        out: Belief = K.diffuse_belief(np.asarray(belief, dtype=np.float64), float(variance),
                                       float(self.params.rho), collapse)
        return out

    def _perf_spread(self) -> float:
        """σ_perf of an established player in a weight-1 round."""
        p = self.params
        w = p.weight_limit
        return math.sqrt((1 + 1 / w) * p.sig_limit**2 + p.drift_per_day / w)

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """P(A's performance beats B's): both ~ the model around μ with σ² + σ_perf², A's
        shifted by the side advantage."""
        spread = math.sqrt(float(a[1]) ** 2 + float(b[1]) ** 2 + 2 * self._perf_spread() ** 2)
        diff = float(a[0]) - float(b[0])
        return performance_win_probability(diff + advantage if advantage else diff, spread, self.gaussian)

    def advantage_unit(self) -> float:
        """σ_perf: a side advantage is a shift of a performance."""
        return self._perf_spread()

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])


class EloMMX(EloMMR):
    """Elo-MMχ: Gaussian performance model (the reference's ``mmx``). Beliefs collapse to their
    Gaussian term at every diffusion (``rho`` and ``history_limit`` have no effect)."""

    name: ClassVar[str] = "elo-mmx"
    gaussian: ClassVar[bool] = True


def warmup() -> None:
    """Compile (or load from cache) every kernel on a tiny round of both variants."""
    for cls in (EloMMR, EloMMX):
        system = cls({"history_limit": 2, "split_ties": False})
        beliefs = [system.new_belief() for _ in range(4)]
        for _ in range(3):
            beliefs = system.rate_round(beliefs, np.array([1, 2, 2, 3]), 0)
        system_split = cls({"split_ties": True})
        system_split.rate_round(beliefs, np.array([1, 1, 2, 3]), 86_400_000)
        system.diffuse(beliefs[0], 100.0)
        system.rate_team_round(beliefs, np.array([0, 0, 1, 1]), np.array([1, 2]), 0,
                               player_weights=np.array([1.0, 0.5, 1.0, 1.0]))


__all__ = ["EloMMR", "EloMMRParams", "EloMMX", "RoundResult", "TeamRoundResult", "warmup"]
