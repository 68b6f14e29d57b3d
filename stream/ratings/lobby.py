"""Lobby predictions for matchmakers: how a match of teams is expected to end, before it is played.

``predict(system, teams)`` gives each team's chance of finishing first, its expected rank, the
draw probability where the system models draws, and a match-quality score (the worker's ``POST
/pools/{pool}/predict``; formulas and why: docs/teams.md, "Lobby predictions").

Why each system's own team model rather than one generic formula: a prediction is only worth what
the model that rates the pool says, and for two single players it must be the system's own
``win_probability``. ``team`` and ``outcomes`` are also what ``stream.ratings.team_scores`` predicts
``mmr eval``'s team rounds with, so a lobby's number and the evaluation's are one number.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

import numpy as np
from scipy.special import log_expit, log_ndtr

from stream.ratings import registry
from stream.ratings.base import Belief, FloatArray, RatingError, RatingSystem
from stream.ratings.elo_mmr.system import performance_win_probability

#: quadrature of P(first) for more than two teams: points and half-width in sd of a team's density
GRID_POINTS = 641
GRID_HALF_WIDTH = 16.0  # a logistic's tail beyond 16 sd holds ~1e-13

#: systems whose team performs the sum of its members' performances (their own team model)
SUM_MODELS = registry.names(team_model="sum")
#: point-rating systems: a team plays as its members' mean
MEAN_MODELS = registry.names(team_model="mean")
#: systems that model draws (a two-team prediction has a draw probability)
DRAW_MODELS = registry.names(draws=True)
#: mean models whose belief's second value is a deviation (glicko's RD, topcoder's volatility): a
#: team's is the root mean square of its members'
DEVIATION_MODELS = frozenset(s.name for s in registry.SPECS.values() if s.team_deviation)


class LobbyRefused(RatingError):
    """A lobby the system cannot predict (fewer than two teams, an empty team, teams for a 1-v-1
    system): the request's fault, unlike a stored belief that gives a non-finite prediction."""


@dataclass(frozen=True, slots=True)
class LobbyPrediction:
    """See the module docstring. ``win`` and ``expected_rank`` are in the order of the teams."""

    win: tuple[float, ...]
    expected_rank: tuple[float, ...]
    draw: float | None
    expected_score: float | None  # two teams: the first team's expected score against the second
    quality: float


def predict(system: RatingSystem, teams: Sequence[Sequence[Belief]],
            advantages: Sequence[float] | None = None) -> LobbyPrediction:
    """The prediction of a match between ``teams`` (each a non-empty list of member beliefs, all at
    full weight); ``advantages[t]``: the side advantage team t plays with (None: a neutral match)."""
    n = len(teams)
    shift = [0.0] * n if advantages is None else [float(x) for x in advantages]
    if len(shift) != n:
        raise LobbyRefused(f"{len(shift)} advantages for {n} teams")
    if n < 2:
        raise LobbyRefused(f"a prediction needs at least two teams (got {n})")
    for t, members in enumerate(teams):
        if len(members) == 0:
            raise LobbyRefused(f"team {t} has no players")
    name = system.name
    if name not in SUM_MODELS | MEAN_MODELS and (n > 2 or any(len(m) > 1 for m in teams)):
        raise LobbyRefused(f"{name} predicts only two single players: its model compares two players and has "
                          "no team or multi-player form")
    virtual = [team(system, members) for members in teams]
    score = np.full((n, n), 0.5)  # score[t, u]: t's expected score against u (a draw counts one half)
    outcome: tuple[float, float, float] = (0.5, 0.0, 0.5)
    for t in range(n):
        for u in range(t + 1, n):
            outcome = outcomes(system, virtual[t], virtual[u], shift[t] - shift[u])
            win, draw, _ = outcome
            score[t, u] = win + 0.5 * draw
            score[u, t] = 1.0 - score[t, u]
    if not np.all(np.isfinite(score)):
        raise RatingError("a belief of these players gives a non-finite prediction")
    ranks = tuple(float(1.0 + np.sum(1.0 - np.delete(score[t], t))) for t in range(n))
    if n == 2:
        win, draw, loss = outcome
        expected = float(score[0, 1])
        return LobbyPrediction(win=(win, loss), expected_rank=ranks,
                               # 1 − win − loss rounds to −1e-18 when a side is certain: a probability stays ≥ 0
                               draw=max(draw, 0.0) if name in DRAW_MODELS else None, expected_score=expected,
                               quality=1.0 - abs(2.0 * expected - 1.0))
    if any(shift):
        virtual = [replace(v, mean=v.mean + h, belief=None if v.belief is None else _shifted(v.belief, h))
                   for v, h in zip(virtual, shift, strict=True)]
    first = _first(system, virtual)
    return LobbyPrediction(win=tuple(float(x) for x in first), expected_rank=ranks, draw=None, expected_score=None,
                           quality=float(n * first.min()))


# --- the team model of each system: one definition for the lobby and the evaluation ---------
@dataclass(frozen=True, slots=True)
class Team:
    """A team as its system's team model sees it before a round (docs/teams.md, "One team model").

    ``mean``: its strength (sum models ``Σ ω_i μ_i``, mean models the ω-weighted mean rating).
    ``var``: sum models ``V_t − β²``, the σ² of one player performing as the team (negative with
    partial play); glicko and topcoder the square of ``belief``'s deviation; else 0. ``players``:
    members (TrueSkill's draw margin). ``belief``: the team in the system's layout (None: sum models).
    """

    mean: float
    var: float
    players: int
    belief: Belief | None


def team(system: RatingSystem, members: Sequence[Belief], weights: FloatArray | None = None) -> Team:
    """The team of ``members`` (ω: ``weights``, the part of the round each plays; 1 when None)."""
    n = len(members)
    w = np.ones(n) if weights is None else np.asarray(weights, dtype=np.float64)
    stack = np.array([np.asarray(m, dtype=np.float64)[:2] for m in members])
    name = system.name
    if name in SUM_MODELS:
        if name != "trueskill" and system.params.team_performance == "mean":  # type: ignore[attr-defined]
            # a = ω/Σω; V_t = Σ a² σ² + 1/Σ(a/β²) = Σ a² σ² + β² with the full-weight β (docs/teams.md, "Large teams")
            a = w / w.sum()
            if n == 1:  # a = 1 exactly: the member's own σ², whatever its ω
                return Team(float(stack[0, 0]), float(stack[0, 1]) ** 2, n, None)
            return Team(float(np.dot(a, stack[:, 0])), float(np.dot(a * a, np.square(stack[:, 1]))), n, None)
        w2 = w * w
        var = float(np.dot(w2, np.square(stack[:, 1])) + (w2.sum() - 1.0) * _perf_var(system))
        return Team(float(np.dot(w, stack[:, 0])), var, n, None)
    if n == 1 and float(w[0]) == 1.0:
        belief = np.asarray(members[0], dtype=np.float64)
    else:
        belief = np.asarray(members[0], dtype=np.float64).copy()
        belief[0] = float(np.dot(w, stack[:, 0]) / w.sum())
        if name in DEVIATION_MODELS:
            belief[1] = math.sqrt(float(np.dot(w, np.square(stack[:, 1])) / w.sum()))
    deviation = name in DEVIATION_MODELS
    return Team(float(belief[0]), float(belief[1]) ** 2 if deviation else 0.0, n, belief)


def outcomes(system: RatingSystem, a: Team, b: Team, advantage: float = 0.0) -> tuple[float, float, float]:
    """(P(a wins), P(draw), P(b wins)) of two teams, ``a`` playing with the side advantage ``advantage``
    over ``b``; for two single players at full weight the very arithmetic of ``win_probability``."""
    name = system.name
    diff = a.mean - b.mean
    if advantage:
        diff += advantage
    if name == "trueskill":
        return system.outcomes(diff, a.var, b.var, a.players + b.players)  # type: ignore[attr-defined,no-any-return]
    if name in SUM_MODELS:  # Elo-MMR's and Elo-MMχ's performances
        spread = math.sqrt(a.var + b.var + 2 * system._perf_spread() ** 2)  # type: ignore[attr-defined]
        e = performance_win_probability(diff, spread, bool(system.gaussian))  # type: ignore[attr-defined]
    else:
        assert a.belief is not None and b.belief is not None
        e = float(system.win_probability(a.belief, b.belief, advantage) if advantage else
                  system.win_probability(a.belief, b.belief))
    return e, 0.0, 1.0 - e


def _shifted(belief: Belief, h: float) -> Belief:
    """A point-rating belief whose rating is ``h`` higher (a team's side advantage)."""
    out = np.array(belief, dtype=np.float64)
    out[0] += h
    return out


def _perf_var(system: RatingSystem) -> float:
    """β² of the sum models: the variance a performance adds to the skill's."""
    if system.name == "trueskill":
        p = system.params
        return float(p.beta**2 + p.tau**2)  # type: ignore[attr-defined]
    spread: float = system._perf_spread()  # type: ignore[attr-defined]
    return spread**2


# --- more than two teams: the chance of finishing first ------------------------------------
def _first(system: RatingSystem, teams: Sequence[Team]) -> FloatArray:
    mean = np.array([t.mean for t in teams])
    name = system.name
    if name == "topcoder":  # a Gaussian performance of the team's own deviation
        sd = np.array([float(t.belief[1]) for t in teams if t.belief is not None])
        return _integrate(mean, sd, gaussian=True)
    if name in MEAN_MODELS:  # the logistic point ratings
        scale = float(getattr(system.params, "scale", 400.0))
        slope = math.log(10.0) / scale
        if name == "glicko":  # the attenuation of the mean pair: exact for two teams, the same for all
            rd2 = float(np.mean([t.var for t in teams]))
            slope *= 1.0 / math.sqrt(1.0 + 3.0 * slope**2 * 2.0 * rd2 / math.pi**2)
        z = slope * (mean - mean.max())
        w = np.exp(z)
        return np.asarray(w / w.sum(), dtype=np.float64)
    beta2 = _perf_var(system)
    sd = np.sqrt(np.array([t.var for t in teams]) + beta2)
    return _integrate(mean, sd, gaussian=name != "elo-mmr")


def _integrate(mean: FloatArray, sd: FloatArray, gaussian: bool) -> FloatArray:
    """P(performance t is the highest) for independent Gaussian or logistic performances."""
    zs = np.linspace(-GRID_HALF_WIDTH, GRID_HALF_WIDTH, GRID_POINTS)
    if gaussian:
        pdf = np.exp(-0.5 * zs * zs) / math.sqrt(2.0 * math.pi)
        logcdf: Callable[[FloatArray], FloatArray] = log_ndtr
    else:  # logistic of sd 1: scale √3/π
        unit = math.sqrt(3.0) / math.pi
        pdf = np.exp(log_expit(zs / unit) + log_expit(-zs / unit)) / unit

        def logcdf(z: FloatArray) -> FloatArray:
            return np.asarray(log_expit(z / unit))
    n = len(mean)
    out = np.empty(n)
    for t in range(n):
        x = mean[t] + sd[t] * zs
        others = np.delete(np.arange(n), t)
        log_rest = logcdf((x[None, :] - mean[others, None]) / sd[others, None]).sum(axis=0)
        out[t] = np.trapezoid(pdf * np.exp(log_rest), zs)
    if not np.all(np.isfinite(out)) or out.sum() <= 0:
        raise RatingError("a belief of these players gives a non-finite prediction")
    return np.asarray(np.clip(out / out.sum(), 0.0, 1.0), dtype=np.float64)


__all__ = ["DEVIATION_MODELS", "DRAW_MODELS", "MEAN_MODELS", "SUM_MODELS", "LobbyPrediction", "LobbyRefused", "Team",
           "outcomes", "predict", "team"]
