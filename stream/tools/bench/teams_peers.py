"""Team rating packages run beside our systems by ``mmr bench teams``: the ``trueskill`` package
and openskill's models, wrapped in the ``RatingSystem`` interface (team rounds only) so that the
same evaluation harness scores them on the same events.

For comparison only: the packages are optional (the ``test`` extra installs them), never used
by the engine, and each wrapper is imported only when its package is. Every package runs on our
scale: its defaults times 42 (μ 1500, σ 350, β 175, τ 3.5), as our TrueSkill's.
"""

from __future__ import annotations

import importlib.util
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingError, RatingSystem, team_round
from stream.ratings.baselines.trueskill import TrueSkill, TrueSkillParams
from stream.ratings.team_scores import TeamPredictor, team_predictor


class _Peer(RatingSystem):
    """Belief ``[mu, sigma, rounds]``; only team rounds; the parameters of our TrueSkill (the packages'
    defaults ×42; ``draw_probability`` is the trueskill package's)."""

    params_type = TrueSkillParams
    params: TrueSkillParams

    def new_belief(self) -> Belief:
        return np.array([self.params.mu, self.params.sigma, 0.0])

    def summary(self, belief: Belief) -> Rating:
        return Rating(float(belief[0] - 3.0 * belief[1]), float(belief[0]), float(belief[1]), int(belief[2]))

    def ranking_score(self, belief: Belief) -> float:
        return float(belief[0])

    def _rate_groups(self, groups: list[list[tuple[float, float]]], ranks: list[int],
                     weights: list[list[float]]) -> list[list[tuple[float, float]]]:
        raise NotImplementedError

    def rate_team_round(self, beliefs: Sequence[Belief], team_of: IntArray, team_ranks: IntArray, time_ms: int,
                        weight: float = 1.0, perf_ceiling: float = math.inf,
                        player_weights: FloatArray | None = None,
                        team_shift: FloatArray | None = None) -> list[Belief]:
        if team_shift is not None and np.any(np.asarray(team_shift) != 0.0):
            raise RatingError(f"{self.name} takes no side advantage")
        checked = team_round(beliefs, team_of, team_ranks, player_weights)
        if checked is None:
            return list(beliefs)
        team_index, ranks, pw = checked
        members: list[list[int]] = [[] for _ in range(len(ranks))]
        for i, t in enumerate(team_index.tolist()):
            members[t].append(i)
        groups = [[(float(beliefs[i][0]), float(beliefs[i][1])) for i in m] for m in members]
        weights = [[float(pw[i]) for i in m] for m in members]
        new = self._rate_groups(groups, [int(r) for r in ranks], weights)
        out = list(beliefs)
        for m, g in zip(members, new, strict=True):
            for i, (mu, sigma) in zip(m, g, strict=True):
                out[i] = np.array([mu, sigma, beliefs[i][2] + 1.0])
        return out

    def team_predictor(self) -> TeamPredictor:
        raise NotImplementedError


class TrueSkillPackage(_Peer):
    """The ``trueskill`` package (Python factor graph, its own erfc)."""

    name = "trueskill (package)"

    def __init__(self, params: Params | Any = None) -> None:
        super().__init__(params)
        import trueskill

        p = self.params
        self._ts = trueskill
        self._env = trueskill.TrueSkill(mu=p.mu, sigma=p.sigma, beta=p.beta, tau=p.tau,
                                        draw_probability=p.draw_probability)

    def _rate_groups(self, groups: list[list[tuple[float, float]]], ranks: list[int],
                     weights: list[list[float]]) -> list[list[tuple[float, float]]]:
        rating = self._ts.Rating
        new = self._env.rate([tuple(rating(mu, s) for mu, s in g) for g in groups], ranks=ranks,
                             weights=[tuple(w) for w in weights])
        return [[(r.mu, r.sigma) for r in g] for g in new]

    def team_predictor(self) -> TeamPredictor:
        """The same model as ours, so our TrueSkill's team predictions with the same parameters."""
        return team_predictor(TrueSkill(self.params))


@dataclass(frozen=True)
class OpenSkillTeams:
    """openskill's own ``predict_win`` (no draws); strength ``Σ ω_i μ_i``."""

    peer: OpenSkillPeer

    def strength(self, beliefs: Sequence[Belief], weights: FloatArray) -> float:
        return float(sum(w * float(b[0]) for b, w in zip(beliefs, weights.tolist(), strict=True)))

    def win_probability(self, a: Sequence[Belief], wa: FloatArray, b: Sequence[Belief], wb: FloatArray,
                        advantage: float = 0.0) -> float:
        if advantage:
            raise RatingError("the peers' models take no side advantage")
        model = self.peer.model
        teams = [[model.rating(mu=float(x[0]), sigma=float(x[1])) for x in side] for side in (a, b)]
        return float(model.predict_win(teams)[0])


class OpenSkillPeer(_Peer):
    """One of openskill's models (``model_name``: a class of ``openskill.models``)."""

    model_name = "PlackettLuce"

    def __init__(self, params: Params | Any = None) -> None:
        super().__init__(params)
        import openskill.models

        p = self.params
        self.model = getattr(openskill.models, self.model_name)(mu=p.mu, sigma=p.sigma, beta=p.beta, tau=p.tau)

    def _rate_groups(self, groups: list[list[tuple[float, float]]], ranks: list[int],
                     weights: list[list[float]]) -> list[list[tuple[float, float]]]:
        teams = [[self.model.rating(mu=mu, sigma=s) for mu, s in g] for g in groups]
        new = self.model.rate(teams, ranks=ranks, weights=weights)
        return [[(r.mu, r.sigma) for r in g] for g in new]

    def team_predictor(self) -> TeamPredictor:
        return OpenSkillTeams(self)


def _openskill(model: str, label: str) -> type[OpenSkillPeer]:
    return type(f"OpenSkill{model}", (OpenSkillPeer,), {"name": label, "model_name": model})


#: label → (package it needs, factory)
PEERS: dict[str, tuple[str, Callable[[], _Peer]]] = {
    "trueskill (package)": ("trueskill", TrueSkillPackage),
    "openskill PL": ("openskill", _openskill("PlackettLuce", "openskill PL")),
    "openskill BT-full": ("openskill", _openskill("BradleyTerryFull", "openskill BT-full")),
    "openskill TM-full": ("openskill", _openskill("ThurstoneMostellerFull", "openskill TM-full")),
}


def available_peers() -> dict[str, Callable[[], _Peer]]:
    """The peers whose package is installed."""
    return {k: f for k, (pkg, f) in PEERS.items() if importlib.util.find_spec(pkg) is not None}
