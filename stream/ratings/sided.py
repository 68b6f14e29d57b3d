"""An event rated with its pool's side advantage, then the advantage learned from it (docs/advantage.md).

The one implementation of that operation: ``mmr eval`` and the engine (the embedded replay and the
worker) call these, so a pool's advantage and its players' beliefs come out the same, bit for bit,
whichever of them rated the events. A *sided* event is a non-neutral match or a team round whose
teams carry ``side`` labels (a round of two teams also teaches the advantage); the advantage is
learned with the players' beliefs *before* the event (``Advantages.learn``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np

from stream.ratings.advantage import MATCH_SIDE, AdvantageParams, Advantages, split_params
from stream.ratings.base import Belief, FloatArray, IntArray, RatingSystem
from stream.ratings.team_scores import TeamPredictor

_A, _B = np.array([0]), np.array([1])


def takes_sides(system: RatingSystem, params: AdvantageParams) -> bool:
    """Whether a pool of ``system`` rates and learns with sides (otherwise sided events rate as neutral)."""
    return bool(system.side_advantage and params.advantage)


def new_advantages(system: RatingSystem, params: AdvantageParams) -> Advantages:
    """A pool's advantages before any event (every side at its prior)."""
    return Advantages(params, system.advantage_unit())


def make_pool_system(name: str, params: Mapping[str, Any] | None) -> tuple[RatingSystem, AdvantageParams]:
    """A pool's system from its own keys and the advantage's settings from the ``advantage*`` keys."""
    from stream.ratings import make_system

    own, adv = split_params(params)
    return make_system(name, own), adv


def rate_match(system: RatingSystem, adv: Advantages, a: Belief, b: Belief, score: float, time_ms: int,
               ) -> list[Belief]:
    """A non-neutral match, ``a`` on the match side, rated with its advantage, then the advantage
    learned (``adv`` changes): the new beliefs of ``a`` and ``b``."""
    shift = adv.shift(MATCH_SIDE)
    args = ([a, b], _A, _B, np.array([score]), np.array([time_ms], dtype=np.int64))
    new = system.rate_matches(*args, advantages=np.array([shift])) if shift else system.rate_matches(*args)
    adv.learn(MATCH_SIDE, None, lambda x: system.win_probability(a, b, x), score)
    return new


def team_shifts(adv: Advantages, sides: Sequence[str | None]) -> FloatArray | None:
    """The advantage each team plays with (None when every one is 0: the round rates as without sides)."""
    shifts = np.array([adv.shift(side) for side in sides])
    return shifts if shifts.any() else None


def rate_team_round(system: RatingSystem, adv: Advantages, beliefs: Sequence[Belief], team_of: IntArray,
                    ranks: IntArray, time_ms: int, weight: float, perf_ceiling: float, weights: FloatArray,
                    sides: Sequence[str | None], predictor: Callable[[], TeamPredictor]) -> list[Belief]:
    """A team round whose teams carry ``sides``, rated with each team's advantage; a round of two teams
    then teaches the two sides' advantages (``adv`` changes) by ``predictor()``'s probability."""
    shifts = team_shifts(adv, sides)
    if shifts is None:
        new = system.rate_team_round(beliefs, team_of, ranks, time_ms, weight, perf_ceiling, weights)
    else:
        new = system.rate_team_round(beliefs, team_of, ranks, time_ms, weight, perf_ceiling, weights,
                                     team_shift=shifts)
    if len(ranks) == 2:
        members = [np.flatnonzero(team_of == t) for t in range(2)]
        (ba, wa), (bb, wb) = (([beliefs[i] for i in m.tolist()], weights[m]) for m in members)
        pred = predictor()
        score = 1.0 if ranks[0] < ranks[1] else 0.0 if ranks[0] > ranks[1] else 0.5
        adv.learn(sides[0], sides[1], lambda x: pred.win_probability(ba, wa, bb, wb, x), score)
    return new
