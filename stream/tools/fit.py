"""``mmr fit``: a pool's parameters searched on its own history, written as the pools file the
worker reads (``MMR_POOLS_FILE``) and ``mmr eval``/``mmr replay --pools`` read.

What is searched is what the system declares (``SystemSpec.search_space``: a few parameters
with their bounds), never a list kept here. The search is optuna's TPE sampler (multivariate,
so that parameters acting together, as Elo-MMR's ``sig_limit`` and ``weight_limit``, are
modelled together): a bounded, sample-efficient search whose every trial is a replay of the
training prefix, reproducible from its seed (one process, trials in order). The first trial is
the defaults, so the fitted parameters are never worse than them on the training prefix, and the
best trial is written only if it beats them there by more than noise (``choose``: ``--z`` standard
errors of the paired difference of their losses); else the defaults are written, and fit says so.

The protocol is ``mmr tune``'s (``stream.tools.holdout``); by default the prefix is the first
half of the history: the parameters are meant to run live, and should reflect as much of the
pool's history as can be spared while leaving an equal part held out to judge them.
Every prediction after the warm-up is scored by default (``--min-history 0``, where ``mmr tune``
and ``mmr eval`` keep 5): the parameters run live on every event, newcomers' included, and they
set how fast a newcomer's rating moves, which predictions of experienced players only cannot
judge; and a team round is scored only when every member of both teams qualifies, which on large
teams leaves few rounds (on AFL, 18 to 26 a side, about one in twenty), a sample of the seasons
without debutants rather than of the game.

Values are rounded to ``SIGNIFICANT`` digits when a trial proposes them, so that the written
file is readable and the parameters scored are exactly the ones written.

The held-out part is scored continuing from the state the replay of the training prefix leaves
(players and side advantages alike), so what a fit carries into that score is its parameters only.
The pools file also carries what the whole history taught each side (``advantage_start``), for the
worker, which starts a pool from no state: there the learned advantage is the one thing a new pool
can take from its history.
"""

from __future__ import annotations

import dataclasses
import json
import math
import sys
import time
import tomllib
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm import tqdm

from stream.events.inputs import CsvMapping
from stream.files import JsonlWriter
from stream.params import parse_params
from stream.ratings import make_system
from stream.ratings.advantage import MATCH_SIDE, PREFIX, SIDE_INIT, SIDE_SD, split_params
from stream.ratings.base import Params, RatingError
from stream.ratings.registry import spec
from stream.ratings.spec import SearchDim
from stream.tools.common import exit_on_bad_input, report_skipped, skipped_lines
from stream.tools.evaluate import load_events
from stream.tools.holdout import BATCHES, Difference, HoldOut, metrics, one_pool, paired_difference, protocol_options

if TYPE_CHECKING:
    import optuna

#: what ``mmr fit`` says where optuna is missing (pyproject.toml, extra ``fit``)
FIT_EXTRA = "mmr fit searches with optuna, which is not installed: pip install 'mmr-stream[fit]'"
#: significant digits of a proposed value (module docstring)
SIGNIFICANT = 4
#: standard errors by which the best trial must beat the defaults on the training prefix to be written
#: (``--z``; module docstring)
Z = 2.0


def search_space(system: str, fixed: Mapping[str, Any]) -> tuple[SearchDim, ...]:
    """The dimensions the system declares, less those fixed by ``--param``."""
    dims = tuple(d for d in spec(system).search_space if d.name not in fixed)
    if not dims:
        declared = ", ".join(d.name for d in spec(system).search_space) or "none"
        raise click.UsageError(f"nothing to fit for {system}: it declares {declared}, and --param fixes the rest")
    return dims


def defaults(system: str, dims: Sequence[SearchDim]) -> dict[str, Any]:
    """The system's default of each searched parameter."""
    params: Params = spec(system).params_type()()
    return {d.name: getattr(params, d.name) for d in dims}


def rounded(x: float) -> float:
    return float(f"{x:.{SIGNIFICANT}g}")


def propose(trial: optuna.Trial, dims: Sequence[SearchDim], kinds: Mapping[str, type]) -> dict[str, Any]:
    """A trial's point: each dimension within its bounds, of its parameter's type."""
    point: dict[str, Any] = {}
    for d in dims:
        if kinds[d.name] is int:
            point[d.name] = trial.suggest_int(d.name, int(d.low), int(d.high), log=d.log)
        else:
            point[d.name] = rounded(trial.suggest_float(d.name, d.low, d.high, log=d.log))
    return point


def write_pools_file(path: str, pool: str, system: str, params: Mapping[str, Any]) -> None:
    """``{"pools": {pool: {"system", "params"}}}`` as TOML (a ``.toml`` suffix) or JSON, the
    other pools of an existing file kept; never left half written."""
    target = Path(path)
    toml = target.suffix == ".toml"
    data: dict[str, Any] = {"pools": {}}
    if target.exists():
        try:
            data = tomllib.loads(target.read_text()) if toml else json.loads(target.read_text())
        except ValueError as exc:
            raise click.BadParameter(f"{path} exists and is not a pools file: {exc}", param_hint="--out") from None
        if not isinstance(data.get("pools"), dict):
            raise click.BadParameter(f"{path} exists and has no 'pools' table", param_hint="--out")
    data["pools"][pool] = {"system": system, "params": dict(params)}
    if toml:
        try:
            import tomli_w
        except ImportError:
            raise click.ClickException(FIT_EXTRA.replace("optuna", "tomli-w")) from None
        text = tomli_w.dumps(data)
    else:
        text = json.dumps(data, indent=2) + "\n"
    with JsonlWriter(path) as out:  # written beside and renamed (``stream.files``)
        out.write_lines(text.encode(), 0)


@dataclass
class Search:
    """What the search found on the training prefix: the best trial's point and value, the defaults'
    value, and (for an objective that is a mean over predictions) the best minus the defaults,
    prediction by prediction (None when the best is the defaults or the objective is no such mean)."""

    point: dict[str, Any]
    value: float
    default_value: float
    best_is_default: bool
    difference: Difference | None


def search(split: HoldOut, system: str, fixed: Mapping[str, Any], dims: Sequence[SearchDim], trials: int,
           seed: int, progress: bool) -> Search:
    """The best point of ``trials`` (the first: the defaults) on the training prefix."""
    try:
        import optuna
    except ImportError:
        raise click.ClickException(FIT_EXTRA) from None
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    base: Params = spec(system).params_type()()
    kinds = {d.name: type(getattr(base, d.name)) for d in dims}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # multivariate TPE
        sampler = optuna.samplers.TPESampler(seed=seed, multivariate=True, n_startup_trials=min(10, trials // 3))
    study = optuna.create_study(direction="minimize", sampler=sampler)
    study.enqueue_trial(defaults(system, dims))
    bar = tqdm(total=trials, unit=" trials", desc="fit", file=sys.stderr, disable=not progress)
    #: the losses of the defaults (trial 0) and of the best trial so far, prediction by prediction
    losses: dict[str, Any] = {}

    def objective(trial: optuna.Trial) -> float:
        point = propose(trial, dims, kinds)
        trial.set_user_attr("point", point)
        try:
            res, per_event = split.train(make_system(system, {**fixed, **point}))
            value = split.value(res)
        except RatingError:  # a point the system refuses (a value it cannot rate with) is the worst
            value, per_event = math.inf, None
        bar.update(1)
        if math.isnan(value):
            if trial.number == 0:
                raise click.ClickException(f"the training prefix gives no {split.objective}: nothing to fit on "
                                           "(a larger --train, a lower --min-history or another --objective)")
            value = math.inf
        if trial.number == 0:
            losses["default"] = per_event
        if value < bar_best[0]:
            bar_best[0] = value
            losses["best"] = per_event
        bar.set_postfix({split.objective: f"{bar_best[0]:.4f}"}, refresh=False)
        return value

    bar_best = [math.inf]
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            study.optimize(objective, n_trials=trials)
    finally:
        bar.close()
    best = study.best_trial
    default_value = study.trials[0].value
    assert best.value is not None and default_value is not None
    at_default = best.number == 0 or best.value >= default_value
    diff = None
    best_losses, default_losses = losses.get("best"), losses.get("default")
    if not at_default and best_losses is not None and default_losses is not None and best_losses.size >= 2 * BATCHES:
        diff = paired_difference(best_losses, default_losses)  # (fewer predictions: no error to judge by)
    return Search(dict(best.user_attrs["point"]), best.value, default_value, at_default, diff)


def choose(found: Search, z: float) -> tuple[bool, str]:
    """Whether to write the best trial rather than the defaults, and why (the decision rule).

    The best of many trials on one prefix is better than the defaults there by chance alone: a search
    on a flat objective returns a point a hair better on the prefix that is as likely worse on what
    follows. So the best is written only if it beats the defaults by more than ``z`` standard errors
    of the paired difference of their losses on the prefix (``holdout.paired_difference``); otherwise
    the defaults are written and the reason said. An objective that is not a mean over predictions
    (the pair inversions) has no such error here: its best is written when strictly better."""
    if found.best_is_default:
        return False, f"no trial beat the defaults on the training prefix ({found.default_value:.5f})"
    d = found.difference
    if d is None:
        return True, f"the best trial beat the defaults on the training prefix ({found.value:.5f})"
    shown = f"{d.mean:+.5f} ± {d.se:.5f} (se)"
    if d.below(z):
        return True, f"the best trial beat the defaults on the training prefix by {shown}, beyond {z:g} se"
    return False, f"the best trial differs from the defaults on the training prefix by {shown}, within {z:g} se: noise"


def advantage_start(split: HoldOut, result: Mapping[str, Any], pool: str, params: tuple[str, ...],
                    unit: float) -> dict[str, Any]:
    """The ``advantage*`` parameters the pools file carries: those given (``--param``) and, for every
    side the whole history taught an advantage (the match side, each side label of team rounds), its
    learned belief as the side's prior (``advantage_init`` for the match side, ``advantage_init_<side>``
    for a label: the mean; ``advantage_sd_<side>``: the sd, in the system's unit ``unit``). So the
    worker starts the pool from what the history says of each side, as sure of it as the history made
    the replay, instead of from no advantage at the default prior's width (which the first events of a
    new pool would throw about). The values are rounded to ``SIGNIFICANT`` digits, like the searched."""
    out = {k: v for k, v in split.advantage.as_dict().items()
           if any(p.split("=", 1)[0].strip() == k for p in params)}
    if not split.advantage.advantage:
        return out
    for side, belief in sorted(result.get("advantage", {}).get(pool, {}).items()):
        out[f"{PREFIX}_init" if side == MATCH_SIDE else SIDE_INIT + side] = rounded(float(belief["mean"]))
        out[SIDE_SD + side] = rounded(float(belief["sd"]) / unit)
    return out


def _table(rows: list[tuple[str, str, str]]) -> list[str]:
    widths = [max(len(r[i]) for r in rows) for i in range(3)]
    return [f"{a:<{widths[0]}}  {b:>{widths[1]}}  {c:>{widths[2]}}" for a, b, c in rows]


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--out", required=True, type=click.Path(dir_okay=False),
              help="Pools file to write (TOML with a .toml suffix, else JSON); its other pools are kept.")
@click.option("--trials", type=click.IntRange(1), default=40, show_default=True,
              help="Replays of the training prefix the search may make (the first: the defaults).")
@click.option("--seed", type=int, default=0, show_default=True, help="Seed of the search (the same fit again).")
@click.option("--z", "z", type=click.FloatRange(0.0), default=Z, show_default=True,
              help="Standard errors by which the best trial must beat the defaults on the training prefix to be "
                   "written (log loss, Brier: paired per prediction; 0: whenever better); else the defaults are.")
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@protocol_options(train=0.5, min_history=0)
def fit(inputs: tuple[str, ...], out: str, trials: int, seed: int, z: float, progress: bool, system: str,
        params: tuple[str, ...], objective: str, train: float, warmup: float, min_history: int, pool: str | None,
        mapping: CsvMapping, skip_invalid: bool, as_json: bool) -> None:
    """Fit --system's parameters for one pool on the first --train of its history in INPUT, score
    them and the defaults on the rest, and write the pools file that runs them (--out)."""
    t0 = time.perf_counter()
    given = parse_params(params)
    skipped = skipped_lines(skip_invalid)
    with exit_on_bad_input():
        fixed, adv = split_params(given)  # the system's keys; the side advantage's (``advantage*``)
        dims = search_space(system, fixed)
        base = make_system(system, fixed)  # fail fast on a bad name or value
        name, events = one_pool(load_events(inputs, None, mapping, on_invalid=skipped), pool)
        split = HoldOut.split(events, train, warmup, min_history, objective, adv)
        if not as_json:
            click.echo(f"fit {system} on pool {name!r}: {split.describe()}; {trials} trials (seed {seed})", err=True)
        found = search(split, system, fixed, dims, trials, seed, progress)
        improved, why = choose(found, z)
        point = found.point if improved else defaults(system, dims)
        fitted_train = found.value if improved else found.default_value
        fitted_sys = make_system(system, {**fixed, **point})
        with tqdm(total=2, unit=" replays", desc="held-out", file=sys.stderr, disable=not progress) as bar:
            test_default, loss_default = split.test(base)
            bar.update(1)
            test_fitted, loss_fitted = split.test(fitted_sys)
            bar.update(1)
        held_out_diff = None
        if improved and loss_default is not None and loss_fitted is not None and loss_default.size >= 2 * BATCHES:
            held_out_diff = paired_difference(loss_fitted, loss_default)
    written = {k: getattr(fitted_sys.params, k) for k in (*fixed, *point)}
    written.update(advantage_start(split, test_fitted, name, params, fitted_sys.advantage_unit()))
    write_pools_file(out, name, system, written)
    result = {
        "system": system, "pool": name, "objective": split.objective,
        "default": split.value(test_default), "fitted": split.value(test_fitted),
        "default_train": found.default_value, "fitted_train": fitted_train,
        "improved": improved, "decision": why, "best_train": found.value, "best_params": found.point,
        "train_difference": None if found.difference is None else dataclasses.asdict(found.difference),
        "held_out_difference": None if held_out_diff is None else dataclasses.asdict(held_out_diff),
        "params": written, "default_params": defaults(system, dims),
        "held_out": {"default": metrics(test_default), "fitted": metrics(test_fitted)},
        "n_events": len(split.events), "n_train": split.n_train,
        "n_scored": test_fitted.get("n_scored_events", 0) + test_fitted.get("n_scored_team_rounds", 0),
        "trials": trials, "seed": seed, "out": out, "runtime_s": time.perf_counter() - t0,
    }
    report_skipped(skipped, result)
    if as_json:
        click.echo(json.dumps(result, default=float))
        return
    dflt = result["default_params"]
    lines = _table([("parameter", "default", "fitted"),
                    *((k, f"{dflt[k]:g}" if k in dflt else "", f"{v:g}" if isinstance(v, float) else str(v))
                      for k, v in written.items())])
    scores = _table([(split.objective, "train", "held-out"),
                     ("default", f"{found.default_value:.4f}", f"{result['default']:.4f}"),
                     ("fitted", f"{fitted_train:.4f}", f"{result['fitted']:.4f}")])
    held = [] if held_out_diff is None else \
        [f"held out, fitted − default: {held_out_diff.mean:+.5f} ± {held_out_diff.se:.5f} (se)"]
    lines += ["", *scores, "", why + ("" if improved else ": the defaults are written"), *held,
              f"wrote pool {name!r} to {out}"]
    click.echo("\n".join(lines))
