"""Glicko (Glickman 1999): a rating plus a rating deviation (RD) that grows between periods.

Why Glicko as a baseline: the simplest system that carries uncertainty, it shows what
uncertainty alone buys over Elo. Faithful to Glickman's description: the RD grows with the
periods elapsed since the player last played (``_inflated``), and a period's update is
``update_period`` (tested on Glickman's worked example). A multiplayer round is one period in
which every participant played every other; each 1-v-1 match is its own period, in order.

Belief layout: ``[r, rd, rounds, last_time_ms]`` (``last_time_ms`` = NaN before the first event).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingSystem
from stream.ratings.baselines.kernels import glicko_row_sums

Q = math.log(10.0) / 400.0
DAY_MS = 86_400_000


@dataclass(frozen=True)
class GlickoParams(Params):
    """``c``: RD growth per period (34.6 takes RD from 50 back to 350 in 100 periods, Glickman's
    example); ``rd_init``: a new player's RD and the RD cap; ``rd_min``: floor on RD so ratings
    never freeze; ``normalize``: a multiplayer round counts as ONE game's evidence (both sums
    divided by N − 1): otherwise a 3,000-player round collapses every RD to ``rd_min`` at once."""

    init: float = 1500.0
    rd_init: float = 350.0
    c: float = 34.6
    period_days: float = 7.0
    rd_min: float = 30.0
    normalize: bool = False

    def __post_init__(self) -> None:
        fin = math.isfinite
        self.require({"init": fin(self.init), "rd_init": fin(self.rd_init) and self.rd_init > 0,
                      "c": fin(self.c) and self.c >= 0, "period_days": fin(self.period_days) and self.period_days > 0,
                      "rd_min": fin(self.rd_min) and 0 < self.rd_min <= self.rd_init})


def g(rd: float | FloatArray) -> float | FloatArray:
    """Glicko's attenuation of an opponent's rating difference by the opponent's RD."""
    return 1.0 / np.sqrt(1.0 + 3.0 * Q * Q * np.square(rd) / math.pi**2)


def update_period(r: float, rd: float, opp_r: FloatArray, opp_rd: FloatArray, scores: FloatArray) -> tuple[
        float, float]:
    """One player's Glicko update for a rating period (RD already inflated for elapsed time)."""
    gj = g(np.asarray(opp_rd, dtype=np.float64))
    e = 1.0 / (1.0 + 10.0 ** (-gj * (r - np.asarray(opp_r)) / 400.0))
    inv_d2 = Q * Q * float(np.sum(gj * gj * e * (1.0 - e)))
    denom = 1.0 / (rd * rd) + inv_d2
    new_r = r + Q / denom * float(np.sum(gj * (np.asarray(scores) - e)))
    return new_r, math.sqrt(1.0 / denom)


class Glicko(RatingSystem):
    name = "glicko"
    side_advantage = True
    params_type = GlickoParams
    params: GlickoParams

    def new_belief(self) -> Belief:
        return np.array([self.params.init, self.params.rd_init, 0.0, np.nan])

    def summary(self, belief: Belief) -> Rating:
        # displayed: the conservative r − 2RD (Glickman's 95% lower bound)
        return Rating(float(belief[0] - 2.0 * belief[1]), float(belief[0]), float(belief[1]), int(belief[2]))

    def _inflated(self, rd: float, last: float, now: int) -> float:
        """RD after the periods elapsed since the player's last event (none for a new player)."""
        p = self.params
        if math.isnan(last):
            return rd
        t = max(0.0, (now - last) / (p.period_days * DAY_MS))
        return min(math.sqrt(rd * rd + p.c * p.c * t), p.rd_init)

    def rate_round(self, beliefs: Sequence[Belief], ranks: IntArray, time_ms: int, weight: float = 1.0,
                   perf_ceiling: float = math.inf) -> list[Belief]:
        n = len(beliefs)
        if n < 2 or np.all(ranks == ranks[0]):
            return list(beliefs)
        p = self.params
        r = np.fromiter((b[0] for b in beliefs), dtype=np.float64, count=n)
        rd = np.fromiter((self._inflated(float(b[1]), float(b[3]), time_ms) for b in beliefs), dtype=np.float64,
                         count=n)
        dsum, vsum = glicko_row_sums(r, rd, np.asarray(ranks, dtype=np.int64))
        if p.normalize:
            dsum, vsum = dsum / (n - 1), vsum / (n - 1)
        denom = 1.0 / (rd * rd) + Q * Q * dsum
        new_r = r + weight * Q / denom * vsum
        new_rd = np.maximum(np.sqrt(1.0 / denom), p.rd_min)
        return [np.array([new_r[i], new_rd[i], beliefs[i][2] + 1.0, float(time_ms)]) for i in range(n)]

    def rate_matches(self, beliefs: Sequence[Belief], a: IntArray, b: IntArray, scores: FloatArray,
                     times_ms: IntArray, advantages: FloatArray | None = None) -> list[Belief]:
        """Each match one rating period of each player; with a side advantage B sees A's rating that
        much higher, A sees B's that much lower."""
        out = [x.copy() for x in beliefs]
        touched: set[int] = set()
        p = self.params
        shifts = [0.0] * len(a) if advantages is None else np.asarray(advantages, dtype=np.float64).tolist()
        for ia, ib, s, t, h in zip(a.tolist(), b.tolist(), scores.tolist(), times_ms.tolist(), shifts, strict=True):
            A, B = out[ia], out[ib]
            rda = self._inflated(float(A[1]), float(A[3]), t)
            rdb = self._inflated(float(B[1]), float(B[3]), t)
            ra, rb = float(A[0]), float(B[0])
            na, nrda = update_period(ra, rda, np.array([rb - h if h else rb]), np.array([rdb]), np.array([s]))
            nb, nrdb = update_period(rb, rdb, np.array([ra + h if h else ra]), np.array([rda]), np.array([1.0 - s]))
            out[ia] = np.array([na, max(nrda, p.rd_min), A[2] + 1.0, float(t)])
            out[ib] = np.array([nb, max(nrdb, p.rd_min), B[2] + 1.0, float(t)])
            touched.update((ia, ib))
        return [out[i] if i in touched else beliefs[i] for i in range(len(beliefs))]

    def win_probability(self, a: Belief, b: Belief, advantage: float = 0.0) -> float:
        """E(s) with the combined deviation √(RD_a² + RD_b²) (Glickman 1999, eq. for predictions)."""
        gg = float(g(math.sqrt(float(a[1]) ** 2 + float(b[1]) ** 2)))
        diff = float(a[0]) - float(b[0])
        return 1.0 / (1.0 + 10.0 ** (-gg * (diff + advantage if advantage else diff) / 400.0))

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])
