"""``mmr eval``: score a rating system's predictions on a history (docs/interface.md).

Why the harness drives the systems directly (beliefs in a dict per pool) instead of the embedded
pipeline: a prediction must come from the state *before* each event, so every event is applied on
its own (no match batching), and encoding every belief for the store would only add time to the
runtime we report. The systems and the reader (``read_records``, ``RoundAssembler``) are the
pipeline's, so what we measure is what the service computes.

The protocol and the metrics: docs/evaluation.md ("Protocol and metric definitions", ``stream.scoring``);
pooled and per-round means are reported beside the per-participant aggregates.

Team rounds are scored at team level (``team_*``): a team qualifies when every member does; the
qualifying teams (at least two) are ordered by the system's team strength, and a round of exactly
two teams gives the probability that the first finishes ahead (a tie scores ½;
``stream.ratings.team_scores``). Those predictions also count in ``log_loss``, ``brier`` and
``accuracy`` beside the two-player ones (two-sided games score alike whether their sides are
players or teams). Pools may have systems of their own (``--pools FILE``, as ``MMR_POOLS_FILE``).
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import click
import numpy as np

from stream.events.inputs import CsvMapping, InputError, OnInvalid
from stream.events.model import MatchEvent, RoundEvent
from stream.events.rounds import RoundAssembler
from stream.events.validate import MATCH_LISTS
from stream.params import parse_params
from stream.ratings import make_system, sided
from stream.ratings.advantage import MATCH_SIDE, AdvantageParams, Advantages, split_params
from stream.ratings.base import Belief, FloatArray, RatingSystem
from stream.ratings.team_scores import TeamPredictor, team_predictor
from stream.scoring import brier, calibration_table, log_loss, pair_inversions, rank_deviations
from stream.tools.common import (
    csv_columns_option,
    exit_on_bad_input,
    load_pools_file,
    pools_option,
    report_skipped,
    skip_invalid_option,
    skipped_lines,
)

Event = RoundEvent | MatchEvent


def load_events(inputs: Iterable[str], pool: str | None = None, mapping: CsvMapping | None = None,
                progress: bool = False, on_invalid: OnInvalid | None = None) -> list[Event]:
    """All rounds and matches of the inputs, in file order (rounds assembled from results).
    ``on_invalid``: an invalid record is handed to it and skipped (``read_records``), else it raises."""
    from stream.files import iter_records

    assembler = RoundAssembler()
    out: list[Event] = []
    seen: set[tuple[str, str]] = set()  # (pool, event_id): duplicates are ignored, as the pipeline does

    def fresh(pool: str, event_id: str) -> bool:
        key = (pool, event_id)
        if key in seen:
            return False
        seen.add(key)
        return True

    for where, etype, value in iter_records(tuple(inputs), pool, mapping or CsvMapping(), progress,
                                            on_invalid=on_invalid):
        try:
            if etype == "match" or etype == "round":
                if fresh(value.pool, value.event_id):
                    out.append(value)
            elif etype in MATCH_LISTS:
                out.extend(m for m in value if fresh(m.pool, m.event_id))
            elif etype in ("round_result", "round_completed"):
                if (value["pool"], value["event_id"]) in seen:
                    continue
                add = assembler.add_result if etype == "round_result" else assembler.add_completed
                ev = add(value, now=int(value["time"]))
                seen.add((value["pool"], value["event_id"]))
                if ev is not None:
                    out.append(ev)
        except (ValueError, KeyError) as exc:
            if on_invalid is None:
                raise InputError(where, str(exc)) from None
            on_invalid(InputError(where, str(exc)))
    return out


@dataclass
class Trace:
    """Per-prediction data kept for ``mmr report`` (two-player events only)."""

    p: list[float] = field(default_factory=list)
    s: list[float] = field(default_factory=list)
    diff: list[float] = field(default_factory=list)  # A minus B on the Elo scale (Evaluator._elo_scale)
    trajectories: dict[str, list[tuple[int, float]]] = field(default_factory=dict)


@dataclass
class PairScores:
    """The pair metrics of the scored rounds (of players, or of teams) and the two-sided predictions."""

    rounds: int = 0
    wrong: float = 0.0
    pairs: float = 0.0
    round_pi: list[float] = field(default_factory=list)
    round_n: list[int] = field(default_factory=list)
    devs: list[FloatArray] = field(default_factory=list)
    p2: list[float] = field(default_factory=list)
    s2: list[float] = field(default_factory=list)

    def add(self, ranks: np.ndarray, strength: FloatArray) -> None:
        """One round's scored participants: their ranks and predicted strengths."""
        wrong, pairs = pair_inversions(ranks, strength)
        self.rounds += 1
        self.wrong += wrong
        self.pairs += pairs
        self.round_pi.append(wrong / pairs)
        self.round_n.append(len(ranks))
        self.devs.append(rank_deviations(ranks, strength))

    def pair_metrics(self, prefix: str) -> dict[str, Any]:
        """Pair inversion weighted per participant (module docstring), rank deviation, pooled inversion."""
        weights = np.asarray(self.round_n, dtype=np.float64)
        return {f"{prefix}pair_inversion": 100.0 * float(np.dot(weights, self.round_pi) / weights.sum()),
                f"{prefix}rank_deviation": 100.0 * float(np.concatenate(self.devs).mean()),
                f"{prefix}pair_inversion_pooled": 100.0 * self.wrong / self.pairs}


class Evaluator:
    """Applies events in order, scoring each from the state before it; ``pool_systems``: the
    systems of pools that have their own (the others: ``system``)."""

    def __init__(self, system: RatingSystem, score_from: int, min_history: int = 5, trace: bool = False,
                 trajectories: bool = False, teams: TeamPredictor | None = None,
                 advantage: AdvantageParams | None = None,
                 pool_systems: Mapping[str, RatingSystem] | None = None,
                 pool_advantage: Mapping[str, AdvantageParams] | None = None) -> None:
        #: the system of the event being applied (``add``)
        self.system = system
        self._default = system
        self._pool_systems = dict(pool_systems or {})
        # the side advantage: learned per pool where the system's model takes one (stream.ratings.advantage)
        self.advantage = AdvantageParams() if advantage is None else advantage
        self.advantages: dict[str, Advantages] = {}
        #: the advantage's settings of pools with their own (a pools file's ``advantage*`` parameters)
        self._pool_advantage = dict(pool_advantage or {})
        #: the team predictor of each system (by id): ``teams`` is the default system's
        self._predictors: dict[int, TeamPredictor] = {} if teams is None else {id(system): teams}
        self.scores = PairScores()
        self.team = PairScores()
        self.score_from = score_from
        self.min_history = min_history
        self.beliefs: dict[str, dict[str, Belief]] = {}
        self.history: dict[str, dict[str, int]] = {}
        self.trace = Trace() if trace else None
        self.trajectories = trajectories
        self.n_events = self.n_rounds = self.n_matches = 0
        self.update_s = 0.0

    def _get(self, pool: str, player: str) -> Belief:
        b = self.beliefs.setdefault(pool, {}).get(player)
        return b if b is not None else self.system.new_belief()

    def pool_advantages(self, pool: str) -> Advantages | None:
        """The pool's learned advantages (None where the system takes none or they are off)."""
        params = self._pool_advantage.get(pool, self.advantage)
        if not sided.takes_sides(self.system, params):
            return None
        got = self.advantages.get(pool)
        if got is None:
            got = self.advantages[pool] = sided.new_advantages(self.system, params)
        return got

    def _elo_scale(self, belief: Belief) -> float:
        """The belief's location on the Elo scale, for "log loss by rating difference": μ, but Cowan's
        displayed rating (its μ is in natural units); conservative displays (μ − kσ) would mix in σ."""
        r = self.system.summary(belief)
        return r.rating if self.system.name == "cowan" else r.mu

    def _record(self, pool: str, players: list[str], new: list[Belief]) -> None:
        store = self.beliefs.setdefault(pool, {})
        hist = self.history.setdefault(pool, {})
        for p, b in zip(players, new, strict=True):
            store[p] = b
            hist[p] = hist.get(p, 0) + 1
            if self.trajectories and self.trace is not None:
                self.trace.trajectories.setdefault(p, []).append((self.n_events, self.system.summary(b).rating))

    def _qualified(self, pool: str, players: Sequence[str]) -> list[bool]:
        hist = self.history.get(pool, {})
        return [hist.get(p, 0) >= self.min_history for p in players]

    def add(self, ev: Event) -> None:
        self.system = self._pool_systems.get(ev.pool, self._default)
        scoring = self.n_events >= self.score_from
        if isinstance(ev, MatchEvent):
            self.n_matches += 1
            players = [ev.a, ev.b]
            a, b = self._get(ev.pool, ev.a), self._get(ev.pool, ev.b)
            adv = None if ev.neutral else self.pool_advantages(ev.pool)
            shift = 0.0 if adv is None else adv.shift(MATCH_SIDE)
            if scoring and all(self._qualified(ev.pool, players)):
                # ranks for the pair metrics: a fractional score counts for whoever got more
                rank_b = 2 if ev.score > 0.5 else 1 if ev.score == 0.5 else 0
                self._score_round(np.array([1, rank_b]), [a, b], two_player_score=ev.score, shift=shift)
            t0 = time.perf_counter()
            if adv is None:
                new = self.system.rate_matches([a, b], np.array([0]), np.array([1]), np.array([ev.score]),
                                               np.array([ev.time], dtype=np.int64))
            else:
                new = sided.rate_match(self.system, adv, a, b, ev.score, ev.time)
        elif ev.teams is not None:
            self.n_rounds += 1
            players, teams = ev.players, ev.teams
            beliefs = [self._get(ev.pool, p) for p in players]
            adv = None if teams.sides is None else self.pool_advantages(ev.pool)
            if scoring:
                self._score_team_round(ev, beliefs, None if adv is None else sided.team_shifts(adv, teams.sides or ()))
            t0 = time.perf_counter()
            if adv is None or teams.sides is None:
                new = self.system.rate_team_round(beliefs, teams.team_of, teams.ranks, ev.time, ev.weight,
                                                  ev.perf_ceiling, teams.weights)
            else:
                new = sided.rate_team_round(self.system, adv, beliefs, teams.team_of, teams.ranks, ev.time,
                                            ev.weight, ev.perf_ceiling, teams.weights, teams.sides,
                                            self.team_predictor)
        else:
            self.n_rounds += 1
            players = ev.players
            beliefs = [self._get(ev.pool, p) for p in players]
            if scoring:
                mask = np.array(self._qualified(ev.pool, players), dtype=bool)
                if mask.sum() >= 2:
                    ranks = np.asarray(ev.ranks)[mask]
                    s2 = None
                    if len(players) == 2:
                        s2 = 1.0 if ranks[0] < ranks[1] else 0.0 if ranks[0] > ranks[1] else 0.5
                    self._score_round(ranks, [b for b, m in zip(beliefs, mask.tolist(), strict=True) if m], s2)
            t0 = time.perf_counter()
            new = self.system.rate_round(beliefs, ev.ranks, ev.time, ev.weight, ev.perf_ceiling)
        self.update_s += time.perf_counter() - t0
        self._record(ev.pool, players, new)
        self.n_events += 1

    def team_predictor(self) -> TeamPredictor:
        got = self._predictors.get(id(self.system))
        if got is None:
            got = self._predictors[id(self.system)] = team_predictor(self.system)
        return got

    def _score_team_round(self, ev: RoundEvent, beliefs: list[Belief], shifts: FloatArray | None = None) -> None:
        """Team-level pair inversion and rank deviation (and the two-team scores): module docstring.
        ``shifts[t]``: team t's side advantage (None: none)."""
        assert ev.teams is not None
        pred = self.team_predictor()
        team_of, ranks, weights = ev.teams.team_of, np.asarray(ev.teams.ranks), ev.teams.weights
        members: list[list[int]] = [[] for _ in range(len(ranks))]
        for i, t in enumerate(team_of.tolist()):
            members[t].append(i)
        teams = [t for t in range(len(ranks)) if all(self._qualified(ev.pool, [ev.players[i] for i in members[t]]))]
        if len(teams) < 2:
            return
        sides = [([beliefs[i] for i in members[t]], weights[members[t]]) for t in teams]
        strength = np.array([pred.strength(b, w) for b, w in sides])
        if shifts is not None:
            strength = strength + shifts[teams]
        self.team.add(ranks[teams], strength)
        if len(ranks) == 2:
            (ba, wa), (bb, wb) = sides
            self.team.p2.append(pred.win_probability(ba, wa, bb, wb) if shifts is None else
                                pred.win_probability(ba, wa, bb, wb, float(shifts[0] - shifts[1])))
            self.team.s2.append(1.0 if ranks[0] < ranks[1] else 0.0 if ranks[0] > ranks[1] else 0.5)

    def _score_round(self, ranks: np.ndarray, beliefs: list[Belief], two_player_score: float | None,
                     shift: float = 0.0) -> None:
        """Pair inversion and rank deviation of one scored event (plus the two-player scores);
        ``shift``: the side advantage of the first of two players."""
        score = np.fromiter((self.system.ranking_score(b) for b in beliefs), dtype=np.float64, count=len(beliefs))
        if shift:
            score[0] += shift
        self.scores.add(ranks, score)
        if two_player_score is None:
            return
        a, b = beliefs
        p = self.system.win_probability(a, b, shift) if shift else self.system.win_probability(a, b)
        self.scores.p2.append(p)
        self.scores.s2.append(two_player_score)
        if self.trace is not None:
            self.trace.p.append(p)
            self.trace.s.append(two_player_score)
            self.trace.diff.append(self._elo_scale(a) - self._elo_scale(b))

    def result(self, bins: int = 10) -> dict[str, Any]:
        sc, team = self.scores, self.team
        out: dict[str, Any] = {"n_events": self.n_events, "n_rounds": self.n_rounds, "n_matches": self.n_matches,
                               "n_scored_events": sc.rounds}
        if team.rounds:
            out.update(n_scored_team_rounds=team.rounds, n_scored_teams=sum(team.round_n), **team.pair_metrics("team_"))
            if team.p2:
                out.update(_probability_scores(np.asarray(team.p2), np.asarray(team.s2), "n_team_two", "team_"))
        if sc.p2:
            out["n_two_player"] = len(sc.p2)
        if sc.p2 or team.p2:
            # every two-sided prediction, players' and teams' (module docstring)
            p, s = np.asarray(sc.p2 + team.p2), np.asarray(sc.s2 + team.s2)
            out.update(_probability_scores(p, s, "n_two_sided", ""))
            out["calibration"] = [
                {"lo": c.lo, "hi": c.hi, "n": c.n, "mean_p": _nan_none(c.mean_p), "mean_s": _nan_none(c.mean_s)}
                for c in calibration_table(p, s, bins)
            ]
        if sc.pairs > 0:
            metrics = sc.pair_metrics("")
            out["pair_inversion"] = metrics["pair_inversion"]
            out["pair_correct"] = 100.0 - out["pair_inversion"]
            out["rank_deviation"] = metrics["rank_deviation"]
            out["pair_inversion_pooled"] = metrics["pair_inversion_pooled"]
            out["pair_inversion_round_mean"] = 100.0 * float(np.mean(sc.round_pi))
            out["rank_deviation_round_mean"] = 100.0 * float(np.mean([d.mean() for d in sc.devs]))
            out["n_scored_players"] = sum(map(len, sc.devs))
        return out


def _probability_scores(p: FloatArray, s: FloatArray, count: str, prefix: str) -> dict[str, Any]:
    """The count, log loss, Brier score and accuracy (decided outcomes only) of predictions ``p``
    of outcome scores ``s`` (1 / ½ / 0): players' pairs and two-team rounds alike."""
    out: dict[str, Any] = {count: len(p), f"{prefix}log_loss": float(log_loss(p, s).mean()),
                           f"{prefix}brier": float(brier(p, s).mean())}
    decided = s != 0.5
    if decided.any():
        out[f"{prefix}accuracy"] = float(np.mean((p[decided] > 0.5) == (s[decided] == 1.0)))
    return out


def _nan_none(x: float) -> float | None:
    return None if math.isnan(x) else x


def evaluate_events(system: RatingSystem, events: Sequence[Event], warmup: float = 0.1, min_history: int = 5,
                    score_from: int | None = None, trace: bool = False, trajectories: bool = False,
                    bins: int = 10, teams: TeamPredictor | None = None,
                    advantage: AdvantageParams | None = None,
                    pool_systems: Mapping[str, RatingSystem] | None = None,
                    pool_advantage: Mapping[str, AdvantageParams] | None = None) -> tuple[dict[str, Any], Evaluator]:
    """Run ``events`` through ``system``; score from ``score_from`` (default ⌈warmup·n⌉). ``teams``:
    the team predictions (default ``team_scores.team_predictor(system)``); ``advantage``: the side
    advantage's settings; ``pool_systems``, ``pool_advantage``: those of pools with their own."""
    start = math.ceil(warmup * len(events)) if score_from is None else score_from
    ev = Evaluator(system, start, min_history, trace=trace, trajectories=trajectories, teams=teams,
                   advantage=advantage, pool_systems=pool_systems, pool_advantage=pool_advantage)
    t0 = time.perf_counter()
    for e in events:
        ev.add(e)
    res = ev.result(bins)
    res["runtime_s"] = time.perf_counter() - t0
    res["update_s"] = ev.update_s
    learned = {pool: a.as_dict() for pool, a in sorted(ev.advantages.items()) if a.sides}
    if learned:
        res["advantage"] = learned
    return res, ev


def load_pool_systems(path: str | None) -> tuple[dict[str, RatingSystem], dict[str, AdvantageParams]]:
    """The system and the advantage's settings of each pool of a pools file (``--pools``;
    ``common.load_pools_file``; ``sided.make_pool_system``)."""
    built = {name: sided.make_pool_system(cfg.system, cfg.params) for name, cfg in load_pools_file(path).items()}
    return {k: v[0] for k, v in built.items()}, {k: v[1] for k, v in built.items()}


def human_lines(res: dict[str, Any]) -> Iterator[str]:
    for k, v in res.items():
        if k == "calibration":
            yield "calibration (bin: n, mean predicted, mean observed):"
            for c in v:
                if c["n"]:
                    yield f"  [{c['lo']:.1f}, {c['hi']:.1f}): {c['n']:>7}  {c['mean_p']:.3f}  {c['mean_s']:.3f}"
        elif isinstance(v, float):
            yield f"{k:>28}: {v:.4f}"
        else:
            yield f"{k:>28}: {v}"


@click.command()
@click.argument("inputs", nargs=-1, required=True, type=click.Path(exists=True, dir_okay=False))
@click.option("--system", default="elo-mmr", show_default=True, help="Rating system name.")
@click.option("--param", "params", multiple=True, metavar="KEY=VALUE", help="System parameter (repeatable).")
@click.option("--warmup", type=click.FloatRange(0.0, 1.0, max_open=True), default=0.1, show_default=True,
              help="Fraction of the events that only update (not scored).")
@click.option("--min-history", type=click.IntRange(0), default=5, show_default=True,
              help="Score only players with at least this many earlier events.")
@click.option("--bins", type=click.IntRange(1), default=10, show_default=True, help="Calibration bins.")
@click.option("--pool", default=None, help="Pool for contest/CSV input (default 'default').")
@csv_columns_option
@click.option("--json", "as_json", is_flag=True, help="Print one JSON object.")
@click.option("--progress/--no-progress", default=False, help="Progress bar while reading (stderr).")
@pools_option
@skip_invalid_option
def evaluate(inputs: tuple[str, ...], system: str, params: tuple[str, ...], warmup: float, min_history: int,
             bins: int, pool: str | None, mapping: CsvMapping, as_json: bool, progress: bool, pools_file: str | None,
             skip_invalid: bool) -> None:
    """Score --system's predictions on INPUT files (each from the state before the event)."""
    t0 = time.perf_counter()
    skipped = skipped_lines(skip_invalid)
    with exit_on_bad_input():
        p, adv = split_params(parse_params(params))
        sys_obj = make_system(system, p)
        pool_systems, pool_advantage = load_pool_systems(pools_file)
        events = load_events(inputs, pool, mapping, progress, skipped)
        from stream.runtime.compile_notice import compile_notice

        with compile_notice():
            res, _ = evaluate_events(sys_obj, events, warmup, min_history, bins=bins, advantage=adv,
                                     pool_systems=pool_systems, pool_advantage=pool_advantage)
    replay_s = float(res["runtime_s"])
    res["runtime_s"] = time.perf_counter() - t0  # the whole command: reading + replay + scoring
    res["read_s"] = res["runtime_s"] - replay_s
    out = {"system": system, "params": {**sys_obj.params.as_dict(), **adv.as_dict()}, "inputs": list(inputs),
           "warmup": warmup, "min_history": min_history, **res}
    if pool_systems:
        out["pools"] = {name: {"system": s.name, "params": {**s.params.as_dict(), **pool_advantage[name].as_dict()}}
                        for name, s in pool_systems.items()}
    report_skipped(skipped, out)
    if as_json:
        click.echo(json.dumps(out, default=float))
    else:
        for line in human_lines(out):
            click.echo(line)
