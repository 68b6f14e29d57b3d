"""Options and helpers shared by the offline commands (``eval``, ``replay``, ``tune``, ``fit``).
Light on purpose (no rating system, no numba): ``mmr replay`` imports it without the evaluation harness.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator
from typing import Any

import click

from stream.config import SettingError
from stream.events.inputs import CsvMapping, InputError, SkippedLines
from stream.ratings.base import RatingError
from stream.service.config import PoolConfig, load_pools

#: ``--skip-invalid``: the same flag for every command that reads histories
skip_invalid_option = click.option(
    "--skip-invalid", is_flag=True,
    help="Skip invalid records (counted; the first reasons reported with file:line) instead of stopping at the first.")
#: ``--pools FILE``: a pools file as the worker reads it (``MMR_POOLS_FILE``)
pools_option = click.option(
    "--pools", "pools_file", type=click.Path(exists=True, dir_okay=False), default=None,
    help="Pools file (JSON or TOML, as the worker's MMR_POOLS_FILE): the system and parameters of each pool it "
         "names (other pools: --system, --param).")


@contextlib.contextmanager
def exit_on_bad_input() -> Iterator[None]:
    """A history or parameters the command cannot use (``InputError``, ``RatingError``) end it with the
    message on stderr and exit status 2, no traceback."""
    try:
        yield
    except (InputError, RatingError) as exc:
        click.echo(f"error: {exc}", err=True)
        sys.exit(2)


def skipped_lines(skip_invalid: bool) -> SkippedLines | None:
    """What collects the skipped records with ``--skip-invalid`` (None: stop at the first)."""
    return SkippedLines() if skip_invalid else None


def report_skipped(skipped: SkippedLines | None, out: dict[str, Any] | None = None) -> None:
    """The skipped records on stderr: their count and the first reasons (nothing when none were);
    with ``--skip-invalid`` also their summary in the command's result ``out`` (``"skipped"``)."""
    if skipped is None:
        return
    for line in skipped.report():
        click.echo(line, err=True)
    if out is not None:
        out["skipped"] = skipped.as_dict()


def load_pools_file(path: str | None) -> dict[str, PoolConfig]:
    """The pools of a pools file, read by the reader of the worker's ``MMR_POOLS_FILE``
    (``stream.service.config.load_pools``), so what a pool is evaluated or replayed with offline
    is exactly what runs live; a file that cannot be read or parsed is a usage error naming it.
    None: no file, no pool with its own system."""
    if path is None:
        return {}
    try:
        return load_pools(path)
    except (OSError, ValueError, SettingError) as exc:  # JSON and TOML syntax errors are ValueErrors
        raise click.BadParameter(f"{path}: {exc}", param_hint="--pools") from None


def csv_mapping(_ctx: click.Context, _param: click.Parameter, columns: str) -> CsvMapping:
    """``--csv-columns``: the five column names of a 1-v-1 CSV."""
    cols = [c.strip() for c in columns.split(",")]
    if len(cols) != 5:
        raise click.BadParameter("needs five column names", param_hint="--csv-columns")
    return CsvMapping(*cols)


#: ``--csv-columns``, given to the command as ``mapping`` (a ``CsvMapping``)
csv_columns_option = click.option(
    "--csv-columns", "mapping", default="home_team,away_team,home_score,away_score,date", show_default=True,
    help="CSV input: A,B,A score,B score,time columns.", callback=csv_mapping)
