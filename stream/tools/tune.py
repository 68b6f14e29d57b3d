"""``mmr tune``: grid search on the first part of a history, then a held-out evaluation.

The protocol is ``stream.tools.holdout``'s (the Elo-MMR paper's, §6: the first 10 % by
default), shared with ``mmr fit``: tune tries every point of the grid it is given, fit searches
the space a system declares. The best grid point then replays the whole history and is scored
on the events after the prefix.
"""

from __future__ import annotations

import itertools
import json
import math
import time
from typing import Any

import click

from stream.events.inputs import CsvMapping
from stream.params import parse_params
from stream.ratings import make_system
from stream.ratings.advantage import split_params
from stream.tools.common import exit_on_bad_input, report_skipped, skipped_lines
from stream.tools.evaluate import human_lines, load_events
from stream.tools.holdout import OBJECTIVES, HoldOut, protocol_options

__all__ = ["OBJECTIVES", "parse_grid", "tune"]


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


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--grid", "grid_specs", multiple=True, metavar="KEY=v1,v2,...", help="Values to try (repeatable).")
@protocol_options(train=0.1)
def tune(inputs: tuple[str, ...], system: str, grid_specs: tuple[str, ...], params: tuple[str, ...], objective: str,
         train: float, warmup: float, min_history: int, pool: str | None, mapping: CsvMapping, skip_invalid: bool,
         as_json: bool) -> None:
    """Grid-search --system's parameters on the first --train of INPUT, evaluate the best on the rest."""
    t0 = time.perf_counter()
    grid = parse_grid(grid_specs)
    given = parse_params(params)
    skipped = skipped_lines(skip_invalid)
    with exit_on_bad_input():
        fixed, adv = split_params(given)  # the system's keys; the side advantage's (``advantage*``)
        make_system(system, {**fixed, **{k: v[0] for k, v in grid.items()}})  # fail fast on names/values
        split = HoldOut.split(load_events(inputs, pool, mapping, on_invalid=skipped), train,
                              warmup, min_history, objective, adv)
        used = split.objective
        rows: list[dict[str, Any]] = []
        keys = list(grid)
        best: tuple[float, dict[str, str]] | None = None
        for combo in itertools.product(*(grid[k] for k in keys)) if keys else [()]:
            point = dict(zip(keys, combo, strict=True))
            res, _ = split.train(make_system(system, {**fixed, **point}))
            value = split.value(res)
            rows.append({"params": point, used: value, "runtime_s": res["runtime_s"]})
            if not as_json:
                click.echo(f"{point}: {used}={value:.4f}", err=True)
            if not math.isnan(value) and (best is None or value < best[0]):
                best = (value, point)
        if best is None:
            raise click.ClickException(f"no grid point produced {used} on the training prefix")
        chosen = {**fixed, **best[1]}
        test, _ = split.test(make_system(system, chosen))
    out = {"system": system, "objective": used, "n_events": len(split.events), "n_train": split.n_train,
           "grid": rows, "best_params": chosen, "best_train": best[0], "test": test,
           "runtime_s": time.perf_counter() - t0}
    report_skipped(skipped, out)
    if as_json:
        click.echo(json.dumps(out, default=float))
    else:
        click.echo(f"best {chosen} ({used} on the first {split.n_train} events: {best[0]:.4f})")
        for line in human_lines({k: v for k, v in test.items() if k != "calibration"}):
            click.echo(line)
