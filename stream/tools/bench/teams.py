"""``mmr bench teams``: every team model on the same team rounds, in one run, one table
(docs/evaluation.md, "Teams"): ours with a team model and, when installed, the ``trueskill`` package
and openskill's models, on seeded synthetic scenarios with known skills or on a team history
(``--input``).

The packages are wrapped in the ``RatingSystem`` interface (team rounds only: ``_Peer``) so that the
same evaluation harness scores them on the same events. For comparison only: they are optional (the
``test`` extra installs them), never used by the engine, and each is imported only when its wrapper is
made. Every package runs on our scale: its defaults times 42 (μ 1500, σ 350, β 175, τ 3.5), as our
TrueSkill's.
"""

from __future__ import annotations

import importlib.util
import json
import math
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import click
import numpy as np
from scipy.stats import kendalltau, spearmanr

from stream.files import write_jsonl_atomic
from stream.params import ParamError, parse_param_list
from stream.ratings import make_system
from stream.ratings.base import Belief, FloatArray, IntArray, Params, Rating, RatingError, RatingSystem, team_round
from stream.ratings.baselines.trueskill import TrueSkill, TrueSkillParams
from stream.ratings.registry import SPECS
from stream.ratings.team_scores import TeamPredictor, team_predictor
from stream.tools.evaluate import Event, evaluate_events, load_events
from stream.tools.synth import synth_team_rounds


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




@dataclass(frozen=True)
class Scenario:
    players: int
    rounds: int
    team_size: int
    teams: int


SCENARIOS: dict[str, Scenario] = {
    "2v2": Scenario(300, 4000, 2, 2),
    "5v5": Scenario(500, 3000, 5, 2),
    "squads": Scenario(1000, 600, 4, 25),
}

#: label → (system, parameters): ours with a team model (``SystemSpec.team_rounds``), those with a
#: choice of σ update (the Elo-MMR pair) also with the individual system's (``team_exact_sigma=false``)
OURS: dict[str, tuple[str, dict[str, str]]] = {
    **{s.name: (s.name, {}) for s in SPECS.values() if s.team_rounds},
    **{f"{s.name} individual-σ": (s.name, {"team_exact_sigma": "false"}) for s in SPECS.values()
       if s.team_rounds and "team_exact_sigma" in {f.name for f in fields(s.params_type())}},
}
COLUMNS = ("spearman", "kendall", "team_log_loss", "team_brier", "team_accuracy", "team_pair_inversion",
           "team_rank_deviation", "seconds")


def systems(names: Sequence[str] | None) -> dict[str, Callable[[], RatingSystem]]:
    """Our systems and the installed peers, by label (all of them when ``names`` is None).

    A name ``SYSTEM:K=V,K=V`` is one of our systems with those parameters (e.g.
    ``elo-mmx:weight_limit=1``), labelled by the name itself."""
    out: dict[str, Callable[[], RatingSystem]] = {label: partial(make_system, n, p) for label, (n, p) in OURS.items()}
    out.update(available_peers())
    for name in names or ():
        system, sep, text = name.partition(":")
        if sep:
            try:
                params = parse_param_list(text, "--system")
                make_system(system, params)
            except (ParamError, RatingError) as exc:
                raise click.BadParameter(str(exc), param_hint="--system") from None
            out[name] = partial(make_system, system, params)
    if names:
        unknown = sorted(set(names) - set(out))
        if unknown:
            raise click.BadParameter(f"unknown or not installed: {', '.join(unknown)}; have {', '.join(out)}")
        out = {k: v for k, v in out.items() if k in names}
    return out


def _predictor(system: RatingSystem) -> Any:
    return system.team_predictor() if hasattr(system, "team_predictor") else None


def run_system(factory: Callable[[], RatingSystem], events: Sequence[Event], truth: dict[str, float] | None,
               min_history: int) -> dict[str, Any]:
    """``mmr eval``'s protocol on ``events`` plus, with ``truth``, the rank correlations of final μ.

    A throw-away replay of the first events first, so that ``seconds`` leaves out compiling."""
    warm = factory()
    evaluate_events(warm, events[:20], warmup=0.0, min_history=0, teams=_predictor(warm))
    system = factory()
    teams = _predictor(system)
    t0 = time.perf_counter()
    res, ev = evaluate_events(system, events, warmup=0.1, min_history=min_history, teams=teams)
    out = {k: res.get(k) for k in COLUMNS}
    out["seconds"] = time.perf_counter() - t0
    if truth is not None:
        names = [p for pool in ev.history.values() for p, n in pool.items() if n >= min_history]
        got = [system.ranking_score(ev.beliefs[pool][p]) for pool in ev.beliefs for p in ev.beliefs[pool]
               if ev.history[pool][p] >= min_history]
        want = [truth[p] for p in names]
        out["spearman"] = float(spearmanr(got, want).statistic)
        out["kendall"] = float(kendalltau(got, want).statistic)
        out["n_players"] = len(names)
    return out


def _fmt(v: Any) -> str:
    if v is None:
        return "–"
    return f"{v:.4f}" if isinstance(v, float) else str(v)


@click.command("teams")
@click.option("--scenario", "scenarios", multiple=True, type=click.Choice(sorted(SCENARIOS)),
              help="Synthetic scenario (repeatable; default all).")
@click.option("--noise", "noises", multiple=True, type=click.Choice(["gaussian", "logistic"]),
              help="Performance noise of the synthetic data (repeatable; default both).")
@click.option("--system", "names", multiple=True,
              help="System label, or SYSTEM:K=V,K=V for ours with parameters (repeatable; default all installed).")
@click.option("--seed", type=int, default=0, show_default=True)
@click.option("--scale", type=click.FloatRange(0.0, 1.0, min_open=True), default=1.0, show_default=True,
              help="Fraction of each scenario's rounds (quick runs).")
@click.option("--min-history", type=click.IntRange(0), default=5, show_default=True)
@click.option("--input", "inputs", multiple=True, type=click.Path(exists=True, dir_okay=False),
              help="Score this team history (event JSONL) instead of the synthetic scenarios.")
@click.option("--json", "as_json", is_flag=True, help="One JSON object per row.")
def bench_teams(scenarios: tuple[str, ...], noises: tuple[str, ...], names: tuple[str, ...], seed: int, scale: float,
                min_history: int, inputs: tuple[str, ...], as_json: bool) -> None:
    """Team models on synthetic team rounds (known skills) or a team history: one table."""
    chosen = systems(names)
    datasets: list[tuple[str, str, list[Event], dict[str, float] | None]] = []
    if inputs:
        datasets.append(("input", "–", load_events(inputs), None))
    else:
        with tempfile.TemporaryDirectory() as tmp:
            for sc in scenarios or tuple(SCENARIOS):
                s = SCENARIOS[sc]
                for noise in noises or ("gaussian", "logistic"):
                    rows, skills = synth_team_rounds(s.players, max(1, round(s.rounds * scale)), s.team_size,
                                                     s.teams, seed, noise)
                    path = Path(tmp) / f"{sc}-{noise}.jsonl"
                    write_jsonl_atomic(str(path), iter(rows))
                    datasets.append((sc, noise, load_events([str(path)]), skills))
    if not as_json:
        click.echo("| data | noise | system | " + " | ".join(COLUMNS) + " |")
        click.echo("|" + "---|" * (len(COLUMNS) + 3))
    for label, noise, events, truth_of in datasets:
        for name, factory in chosen.items():
            row = run_system(factory, events, truth_of, min_history)
            if as_json:
                click.echo(json.dumps({"data": label, "noise": noise, "system": name, "n_rounds": len(events), **row}))
            else:
                click.echo(f"| {label} | {noise} | {name} | " + " | ".join(_fmt(row[c]) for c in COLUMNS) + " |")
