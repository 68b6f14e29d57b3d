"""What the evaluation predicts for a team round, per system: the evaluation's team predictor.

``mmr eval`` scores a team round by a team's **strength** (higher = predicted better) and, for two
teams, the **probability that the first finishes ahead**, ``P(ahead) + P(tie)/2``. Both come from
the system's team model in ``stream.ratings.lobby``, the one the lobby predictions use, with the
event's ``weights`` as ω (docs/teams.md, "One team model"). Only systems that rate team rounds
have a predictor.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from stream.ratings import registry
from stream.ratings.base import Belief, FloatArray, RatingError, RatingSystem

# ``stream.ratings.lobby`` (scipy, Elo-MMR's kernels) is imported where a team is predicted: the engine
# imports this module for every replay and worker, and most never rate a team round.


class TeamPredictor(Protocol):
    """The two team predictions ``mmr eval`` scores (module docstring)."""

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float: ...

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray,
                        advantage: float = 0.0) -> float: ...


@dataclass(frozen=True)
class SystemTeams:
    """The predictions of ``system``'s own team model (module docstring)."""

    system: RatingSystem

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float:
        from stream.ratings.lobby import team

        return team(self.system, beliefs, weights).mean

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray,
                        advantage: float = 0.0) -> float:
        from stream.ratings.lobby import outcomes, team

        win, draw, _ = outcomes(self.system, team(self.system, a, wa), team(self.system, b, wb), advantage)
        return win + 0.5 * draw


def team_predictor(system: RatingSystem) -> TeamPredictor:
    """The evaluation's team predictions for ``system`` (module docstring)."""
    rates_teams = type(system).rate_team_round is not RatingSystem.rate_team_round
    if not rates_teams or system.name not in registry.names(team_model="sum") | registry.names(team_model="mean"):
        raise RatingError(f"{system.name} does not rate team rounds (a round with teams)")
    return SystemTeams(system)
