"""The protocol ``mmr tune`` and ``mmr fit`` share: choose on a prefix, score the held-out rest.

Why this protocol: it is the Elo-MMR paper's (§6: hyperparameters chosen on the first part of
a dataset, metrics reported on the rest), so chosen parameters never score the events they
were chosen on. A candidate replays only the training prefix (its own ``warmup`` fraction only
updates, as in ``mmr eval``); the chosen parameters, and the defaults beside them, then replay
the whole history and are scored on the events after the prefix (the prefix acts as their
warm-up). Every replay and score is ``mmr eval``'s (``evaluate.evaluate_events``).

``paired_difference`` says whether one setting beats another on the same predictions beyond
noise: ``mmr fit``'s decision rule on the prefix, and its report on the held-out part.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import numpy as np

from stream.events.model import MatchEvent
from stream.ratings.advantage import AdvantageParams
from stream.ratings.base import FloatArray, RatingSystem
from stream.scoring import brier, log_loss
from stream.tools.common import csv_columns_option, skip_invalid_option
from stream.tools.evaluate import Evaluator, Event, evaluate_events

#: what a search minimises; ``auto``: ``pick_objective``
OBJECTIVES = ("auto", "log_loss", "brier", "pair_inversion", "rank_deviation", "team_pair_inversion",
              "team_rank_deviation")
#: keys of a result that are not metrics of the predictions (``metrics``)
_NOT_METRICS = ("runtime_s", "update_s", "calibration")
#: the objectives that are a mean of one loss per scored two-sided prediction (``HoldOut.train_losses``)
PER_EVENT = {"log_loss": log_loss, "brier": brier}
#: batches of the paired comparison (``paired_difference``)
BATCHES = 20


def two_sided(ev: Event) -> bool:
    """An event whose prediction is one probability: a match, a round of two players or of two teams."""
    if isinstance(ev, MatchEvent):
        return True
    return len(ev.teams.ranks) == 2 if ev.teams is not None else len(ev.players) == 2


def pick_objective(objective: str, events: Sequence[Event]) -> str:
    """``auto``: the log loss for a history of mostly two-sided events (``two_sided``), else the
    pair inversion of its rounds (of their teams, for a history of mostly team rounds)."""
    if objective != "auto":
        return objective
    n = len(events)
    if sum(map(two_sided, events)) * 2 >= n:
        return "log_loss"
    teams = sum(1 for e in events if not isinstance(e, MatchEvent) and e.teams is not None)
    return "team_pair_inversion" if teams * 2 > n else "pair_inversion"


def metrics(result: Mapping[str, Any]) -> dict[str, float]:
    """The numeric prediction metrics of an ``evaluate_events`` result (no counts, no timings)."""
    return {k: float(v) for k, v in result.items()
            if isinstance(v, float) and not k.startswith("n_") and k not in _NOT_METRICS}


@dataclass(frozen=True)
class HoldOut:
    """A history split for the protocol (module docstring): the first ``n_train`` events train."""

    events: Sequence[Event]
    n_train: int
    warmup: float
    min_history: int
    objective: str
    #: the side advantage's settings every replay learns it with (``advantage*`` parameters)
    advantage: AdvantageParams = field(default_factory=AdvantageParams)

    @classmethod
    def split(cls, events: Sequence[Event], train: float, warmup: float, min_history: int,
              objective: str = "auto", advantage: AdvantageParams | None = None) -> HoldOut:
        """``train``: the fraction of the events in the prefix (at least one held out)."""
        if len(events) < 2:
            raise click.ClickException(f"{len(events)} event(s): too few to train on some and score the rest")
        n_train = min(math.ceil(train * len(events)), len(events) - 1)
        return cls(events, n_train, warmup, min_history, pick_objective(objective, events),
                   AdvantageParams() if advantage is None else advantage)

    def train(self, system: RatingSystem) -> tuple[dict[str, Any], FloatArray | None]:
        """``system``'s scores on the training prefix and, for an objective that is a mean over the
        scored predictions (``PER_EVENT``), each prediction's loss in event order (None for the others).
        The events scored depend on the history only (``min_history``), never on the parameters, so the
        losses of two systems on one prefix are paired prediction by prediction."""
        return self._losses(*evaluate_events(system, self.events[:self.n_train], self.warmup, self.min_history,
                                             advantage=self.advantage))

    def test(self, system: RatingSystem) -> tuple[dict[str, Any], FloatArray | None]:
        """The same on the held-out events, after replaying the prefix."""
        return self._losses(*evaluate_events(system, self.events, self.warmup, self.min_history,
                                             score_from=self.n_train, advantage=self.advantage))

    def _losses(self, res: dict[str, Any], ev: Evaluator) -> tuple[dict[str, Any], FloatArray | None]:
        loss = PER_EVENT.get(self.objective)
        if loss is None:
            return res, None
        return res, np.asarray(loss(np.asarray(ev.scores.p2 + ev.team.p2), np.asarray(ev.scores.s2 + ev.team.s2)),
                               dtype=np.float64)

    def value(self, result: Mapping[str, Any]) -> float:
        """The objective's value in a result (NaN when the events scored gave none)."""
        return float(result.get(self.objective, math.nan))

    def describe(self) -> str:
        n = len(self.events)
        return (f"{n} events: the first {self.n_train} train (the first {math.ceil(self.warmup * self.n_train)} of "
                f"them only update), the other {n - self.n_train} are held out; objective {self.objective}")


@dataclass(frozen=True)
class Difference:
    """A mean paired difference of losses (candidate − reference) and its standard error."""

    mean: float
    se: float

    def below(self, z: float) -> bool:
        """Whether the candidate is better beyond ``z`` standard errors (mean + z·se < 0)."""
        return bool(self.mean + z * self.se < 0.0)


def paired_difference(candidate: FloatArray, reference: FloatArray, batches: int = BATCHES) -> Difference:
    """The mean of ``candidate − reference`` (losses of the same predictions) and its standard error
    by batch means: the differences cut into ``batches`` consecutive batches, the se that of the
    batches' means. Why batches: two parameter settings differ in ratings that persist from one
    event to the next, so their per-event differences are correlated in time and the plain
    ``sd/√n`` would call a difference significant that is not; the means of long consecutive
    batches are close to independent (the batch-means method of simulation output analysis)."""
    d = np.asarray(candidate, dtype=float) - np.asarray(reference, dtype=float)
    if d.shape != np.shape(reference) or d.size < 2 * batches:
        raise ValueError(f"{d.size} paired losses: too few to compare in {batches} batches")
    means = np.array([b.mean() for b in np.array_split(d, batches)])
    return Difference(float(d.mean()), float(means.std(ddof=1) / math.sqrt(batches)))


def one_pool(events: Sequence[Event], pool: str | None) -> tuple[str, list[Event]]:
    """The history of one pool: ``pool``'s events, or, when the input holds no event of it but
    those of a single pool (a CSV or contest file, whose rows have no pool of their own, or an
    event file of one pool), all of them as ``pool``'s. Without ``pool`` the input must hold one."""
    pools = sorted({e.pool for e in events})
    if pool is None:
        if len(pools) != 1:
            raise click.UsageError(f"the input holds the pools {', '.join(pools) or '(none)'}: choose one with --pool")
        return pools[0], list(events)
    if pool in pools:
        return pool, [e for e in events if e.pool == pool]
    if len(pools) == 1:
        return pool, [dataclasses.replace(e, pool=pool) for e in events]
    raise click.UsageError(f"no event of pool {pool!r}; the input holds {', '.join(pools)}")


def protocol_options(train: float, min_history: int = 5) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """The options of the protocol, shared by ``tune`` and ``fit``; ``train``: the default fraction,
    ``min_history``: the default ``--min-history``."""

    def add(f: Callable[..., Any]) -> Callable[..., Any]:
        for opt in reversed((
            click.option("--system", default="elo-mmr", show_default=True, help="Rating system name."),
            click.option("--param", "params", multiple=True, metavar="KEY=VALUE",
                         help="Fixed parameter, not searched (repeatable)."),
            click.option("--objective", type=click.Choice(OBJECTIVES), default="auto", show_default=True,
                         help="Metric minimised on the training prefix (auto: log_loss for a history of two-sided "
                              "events, else the pair inversion)."),
            click.option("--train", type=click.FloatRange(0.0, 1.0, min_open=True, max_open=True), default=train,
                         show_default=True, help="Fraction of the events the search sees (the rest is held out)."),
            click.option("--warmup", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1,
                         show_default=True, help="Fraction of the training prefix that only updates."),
            click.option("--min-history", type=click.IntRange(0), default=min_history, show_default=True,
                         help="Score only players with at least this many earlier events."),
            click.option("--pool", default=None, help="Pool for contest/CSV input."),
            csv_columns_option,
            skip_invalid_option,
            click.option("--json", "as_json", is_flag=True, help="Print one JSON object."),
        )):
            f = opt(f)
        return f

    return add

