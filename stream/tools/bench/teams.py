"""``mmr bench teams``: every team model on the same team rounds, in one run, one table
(docs/evaluation.md, "Teams"): ours with a team model and, when installed, the ``trueskill`` package
and openskill's models (``teams_peers``), on seeded synthetic scenarios with known skills or on a
team history (``--input``).
"""

from __future__ import annotations

import json
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, fields
from functools import partial
from pathlib import Path
from typing import Any

import click
from scipy.stats import kendalltau, spearmanr

from stream.files import write_jsonl_atomic
from stream.params import ParamError, parse_param_list
from stream.ratings import make_system
from stream.ratings.base import RatingError, RatingSystem
from stream.ratings.registry import SPECS
from stream.tools.bench.teams_peers import available_peers
from stream.tools.evaluate import Event, evaluate_events, load_events
from stream.tools.synth import synth_team_rounds


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
