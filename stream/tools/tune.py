"""``mmr tune``: grid search on the first part of a history, then a held-out evaluation.

Why this protocol: it is the Elo-MMR paper's (§6: hyperparameters chosen on the first
10% of a dataset, metrics reported on the remaining 90%), so tuned numbers never score
the events they were tuned on. Each grid point replays only the training prefix (its
own ``--warmup`` fraction only updates); the best point then replays the whole history
and is scored on the events after the prefix (the prefix acts as the warm-up).
"""

from __future__ import annotations

import itertools
import json
import math
import sys
import time
from typing import Any

import click

from stream.events.inputs import InputError
from stream.params import parse_params
from stream.ratings import make_system
from stream.ratings.base import RatingError
from stream.tools.evaluate import csv_mapping, evaluate_events, load_events

OBJECTIVES = ("auto", "pair_inversion", "rank_deviation", "log_loss", "brier")


def parse_grid(pairs: tuple[str, ...]) -> dict[str, list[str]]:
    """``KEY=v1,v2,...`` → {KEY: [v1, v2, ...]} (values stay strings; systems parse them)."""
    grid: dict[str, list[str]] = {}
    for pair in pairs:
        key, sep, values = pair.partition("=")
        vals = [v.strip() for v in values.split(",") if v.strip()]
        if not sep or not key.strip() or not vals:
            raise click.BadParameter(f"expected KEY=v1,v2,..., got {pair!r}", param_hint="--grid")
        grid[key.strip()] = vals
    return grid


def pick_objective(objective: str, result: dict[str, Any]) -> str:
    """``auto``: log loss for a history of matches, pair inversion for one of rounds."""
    if objective != "auto":
        return objective
    return "log_loss" if result.get("n_matches", 0) >= result.get("n_rounds", 0) else "pair_inversion"


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--system", default="elo-mmr", show_default=True, help="Rating system name.")
@click.option("--grid", "grid_specs", multiple=True, metavar="KEY=v1,v2,...", help="Values to try (repeatable).")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="Fixed parameter (repeatable).")
@click.option("--objective", type=click.Choice(OBJECTIVES), default="auto", show_default=True,
              help="Metric to minimise on the training prefix (auto: pair_inversion for rounds, else log_loss).")
@click.option("--train", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=0.1,
              show_default=True, help="Fraction of the events the grid search sees.")
@click.option("--warmup", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1, show_default=True,
              help="Fraction of the training prefix that only updates.")
@click.option("--min-history", type=click.IntRange(0), default=5, show_default=True)
@click.option("--pool", default=None, help="Pool for contest/CSV input.")
@click.option("--csv-columns", default="home_team,away_team,home_score,away_score,date", show_default=True)
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
def tune(inputs: tuple[str, ...], system: str, grid_specs: tuple[str, ...], params: tuple[str, ...], objective: str,
         train: float, warmup: float, min_history: int, pool: str | None, csv_columns: str, as_json: bool) -> None:
    """Grid-search --system's parameters on the first --train of INPUT, evaluate the best on the rest."""
    t0 = time.perf_counter()
    grid = parse_grid(grid_specs)
    fixed = parse_params(params)
    try:
        make_system(system, {**fixed, **{k: v[0] for k, v in grid.items()}})  # fail fast on names/values
        events = load_events(inputs, pool, csv_mapping(csv_columns))
        n_train = math.ceil(train * len(events))
        rows: list[dict[str, Any]] = []
        keys = list(grid)
        best: tuple[float, dict[str, str]] | None = None
        used = objective
        for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
            point = dict(zip(keys, combo, strict=True))
            res, _ = evaluate_events(make_system(system, {**fixed, **point}), events[:n_train], warmup, min_history)
            used = pick_objective(objective, res)
            value = res.get(used, math.nan)
            rows.append({"params": point, used: value, "runtime_s": res["runtime_s"]})
            if not click.get_current_context().resilient_parsing and not as_json:
                click.echo(f"{point}: {used}={value:.4f}", err=True)
            if not math.isnan(value) and (best is None or value < best[0]):
                best = (value, point)
        if best is None:
            raise click.ClickException(f"no grid point produced {used} on the training prefix")
        chosen = {**fixed, **best[1]}
        test, _ = evaluate_events(make_system(system, chosen), events, warmup, min_history, score_from=n_train)
    except (InputError, RatingError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    out = {"system": system, "objective": used, "n_events": len(events), "n_train": n_train, "grid": rows,
           "best_params": chosen, "best_train": best[0], "test": test, "runtime_s": time.perf_counter() - t0}
    if as_json:
        click.echo(json.dumps(out, default=float))
    else:
        click.echo(f"best {chosen} ({used} on the first {n_train} events: {best[0]:.4f})")
        for k, v in test.items():
            if k != "calibration":
                click.echo(f"{k:>28}: {v:.4f}" if isinstance(v, float) else f"{k:>28}: {v}")
