"""``mmr fit``: a pool's parameters searched on its own history, written as the pools file the
worker reads (``MMR_POOLS_FILE``) and ``mmr eval``/``mmr replay --pools`` read.

What is searched is what the system declares (``SystemSpec.search_space``: a few parameters
with their bounds), never a list kept here. The search is optuna's TPE sampler (multivariate,
so that parameters acting together, as Elo-MMR's ``sig_limit`` and ``weight_limit``, are
modelled together): a bounded, sample-efficient search whose every trial is a replay of the
training prefix, reproducible from its seed (one process, trials in order). The first trial is
the defaults, so the fitted parameters are never worse than them on the training prefix.

The protocol is ``mmr tune``'s (``stream.tools.holdout``); by default the prefix is the first
half of the history: the parameters are meant to run live, and should reflect as much of the
pool's history as can be spared while leaving an equal part held out to judge them.

Values are rounded to ``SIGNIFICANT`` digits when a trial proposes them, so that the written
file is readable and the parameters scored are exactly the ones written.
"""

from __future__ import annotations

import json
import math
import os
import sys
import tempfile
import time
import tomllib
import warnings
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import click
from tqdm import tqdm

from stream.events.inputs import InputError
from stream.params import parse_params
from stream.ratings import make_system
from stream.ratings.advantage import MATCH_SIDE, split_params
from stream.ratings.base import Params, RatingError
from stream.ratings.registry import spec
from stream.ratings.spec import SearchDim
from stream.tools.common import report_skipped, skipped_lines
from stream.tools.evaluate import csv_mapping, load_events
from stream.tools.holdout import HoldOut, metrics, one_pool, protocol_options

if TYPE_CHECKING:
    import optuna

#: what ``mmr fit`` says where optuna is missing (pyproject.toml, extra ``fit``)
FIT_EXTRA = "mmr fit searches with optuna, which is not installed: pip install 'mmr-stream[fit]'"
#: significant digits of a proposed value (module docstring)
SIGNIFICANT = 4


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
    other pools of an existing file kept; written beside and renamed, never left half written."""
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
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(text)
        os.chmod(tmp, 0o644)
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def search(split: HoldOut, system: str, fixed: Mapping[str, Any], dims: Sequence[SearchDim], trials: int,
           seed: int, progress: bool) -> tuple[dict[str, Any], float, float]:
    """The best point of ``trials`` (the first: the defaults) on the training prefix:
    (its parameters, its training value, the defaults' training value)."""
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

    def objective(trial: optuna.Trial) -> float:
        point = propose(trial, dims, kinds)
        trial.set_user_attr("point", point)
        try:
            value = split.value(split.train(make_system(system, {**fixed, **point})))
        except RatingError:  # a point the system refuses (a value it cannot rate with) is the worst
            value = math.inf
        bar.update(1)
        if math.isnan(value):
            if trial.number == 0:
                raise click.ClickException(f"the training prefix gives no {split.objective}: nothing to fit on "
                                           "(a larger --train, a lower --min-history or another --objective)")
            value = math.inf
        bar.set_postfix({split.objective: f"{min(value, bar_best[0]):.4f}"}, refresh=False)
        bar_best[0] = min(value, bar_best[0])
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
    return dict(best.user_attrs["point"]), best.value, default_value


def advantage_start(split: HoldOut, result: Mapping[str, Any], pool: str, params: tuple[str, ...]
                    ) -> dict[str, Any]:
    """The ``advantage*`` parameters the pools file carries: those given (``--param``) and, where the
    whole history taught the match side an advantage, its learned mean as ``advantage_init``, so the
    worker starts the pool from what the history says instead of from no advantage (team sides start
    at 0: their labels are the pool's own, learned from its first rounds)."""
    out = {k: v for k, v in split.advantage.as_dict().items()
           if any(p.split("=", 1)[0].strip() == k for p in params)}
    learned = result.get("advantage", {}).get(pool, {}).get(MATCH_SIDE)
    if split.advantage.advantage and learned is not None:
        out["advantage_init"] = float(learned["mean"])
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
@click.option("--progress/--no-progress", default=True, help="Progress bar on stderr.")
@protocol_options(train=0.5)
def fit(inputs: tuple[str, ...], out: str, trials: int, seed: int, progress: bool, system: str,
        params: tuple[str, ...], objective: str, train: float, warmup: float, min_history: int, pool: str | None,
        csv_columns: str, skip_invalid: bool, as_json: bool) -> None:
    """Fit --system's parameters for one pool on the first --train of its history in INPUT, score
    them and the defaults on the rest, and write the pools file that runs them (--out)."""
    t0 = time.perf_counter()
    given = parse_params(params)
    skipped = skipped_lines(skip_invalid)
    try:
        fixed, adv = split_params(given)  # the system's keys; the side advantage's (``advantage*``)
        dims = search_space(system, fixed)
        base = make_system(system, fixed)  # fail fast on a bad name or value
        name, events = one_pool(load_events(inputs, None, csv_mapping(csv_columns), on_invalid=skipped), pool)
        split = HoldOut.split(events, train, warmup, min_history, objective, adv)
        if not as_json:
            click.echo(f"fit {system} on pool {name!r}: {split.describe()}; {trials} trials (seed {seed})", err=True)
        point, fitted_train, default_train = search(split, system, fixed, dims, trials, seed, progress)
        fitted_sys = make_system(system, {**fixed, **point})
        with tqdm(total=2, unit=" replays", desc="held-out", file=sys.stderr, disable=not progress) as bar:
            test_default = split.test(base)
            bar.update(1)
            test_fitted = split.test(fitted_sys)
            bar.update(1)
    except (InputError, RatingError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)
    report_skipped(skipped)
    written = {k: getattr(fitted_sys.params, k) for k in (*fixed, *point)}
    written.update(advantage_start(split, test_fitted, name, params))
    write_pools_file(out, name, system, written)
    result = {
        "system": system, "pool": name, "objective": split.objective,
        "default": split.value(test_default), "fitted": split.value(test_fitted),
        "default_train": default_train, "fitted_train": fitted_train,
        "params": written, "default_params": defaults(system, dims),
        "held_out": {"default": metrics(test_default), "fitted": metrics(test_fitted)},
        "n_events": len(split.events), "n_train": split.n_train,
        "n_scored": test_fitted.get("n_scored_events", 0) + test_fitted.get("n_scored_team_rounds", 0),
        "trials": trials, "seed": seed, "out": out, "runtime_s": time.perf_counter() - t0,
    }
    if skipped is not None:
        result["skipped"] = skipped.as_dict()
    if as_json:
        click.echo(json.dumps(result, default=float))
        return
    dflt = result["default_params"]
    lines = _table([("parameter", "default", "fitted"),
                    *((k, f"{dflt[k]:g}" if k in dflt else "", f"{v:g}" if isinstance(v, float) else str(v))
                      for k, v in written.items())])
    scores = _table([(split.objective, "train", "held-out"),
                     ("default", f"{default_train:.4f}", f"{result['default']:.4f}"),
                     ("fitted", f"{fitted_train:.4f}", f"{result['fitted']:.4f}")])
    lines += ["", *scores, "", f"wrote pool {name!r} to {out}"]
    click.echo("\n".join(lines))
