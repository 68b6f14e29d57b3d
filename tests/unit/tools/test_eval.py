"""``mmr eval``: deterministic per system on seeded synthetic data; protocol details."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from click.testing import CliRunner

from stream.events.model import MatchEvent, RoundEvent
from stream.ratings import make_system
from stream.tools.evaluate import evaluate, evaluate_events
from stream.tools.synth import synth

TIMING = {"runtime_s", "update_s", "read_s"}


@pytest.fixture(scope="module")
def data(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("eval")
    runner = CliRunner()
    rounds, matches = d / "rounds.jsonl", d / "matches.jsonl"
    assert runner.invoke(synth, ["--players", "120", "--rounds", "30", "--participation", "0.4", "--seed", "11",
                                 "--out", str(rounds)]).exit_code == 0
    assert runner.invoke(synth, ["--kind", "matches", "--players", "40", "--rounds", "20", "--matches", "800",
                                 "--seed", "11", "--draw-margin", "30", "--out", str(matches)]).exit_code == 0
    return {"rounds": rounds, "matches": matches}


def _eval(path: Path, system: str, *extra: str) -> dict[str, object]:
    res = CliRunner().invoke(evaluate, [str(path), "--system", system, "--json", *extra])
    assert res.exit_code == 0, res.output
    out: dict[str, object] = json.loads(res.stdout)
    return out


@pytest.mark.parametrize("system", ["elo", "glicko", "trueskill", "codeforces", "topcoder"])
def test_eval_rounds_deterministic(data: dict[str, Path], system: str) -> None:
    one = _eval(data["rounds"], system)
    two = _eval(data["rounds"], system)
    assert {k: v for k, v in one.items() if k not in TIMING} == {k: v for k, v in two.items() if k not in TIMING}
    assert one["n_events"] == 30
    pi, rd = one["pair_inversion"], one["rank_deviation"]
    assert isinstance(pi, float) and isinstance(rd, float)
    # far better than chance (50 % inversions) on data drawn from the model
    assert 5.0 < pi < 35.0
    assert 0.0 < rd < 30.0
    assert isinstance(one["runtime_s"], float)


@pytest.mark.parametrize("system", ["elo", "glicko", "trueskill"])
def test_eval_matches_deterministic(data: dict[str, Path], system: str) -> None:
    one = _eval(data["matches"], system)
    assert one == {**_eval(data["matches"], system), **{k: one[k] for k in TIMING}}
    assert one["n_events"] == 800
    ll, br = one["log_loss"], one["brier"]
    assert isinstance(ll, float) and isinstance(br, float)
    assert ll < 0.69 and br < 0.25  # better than a coin
    cal = one["calibration"]
    assert isinstance(cal, list) and sum(c["n"] for c in cal) == one["n_two_player"]


def test_prediction_comes_before_update() -> None:
    """A single scored match: the probability must be the prior 1/2, not the posterior."""
    events = [MatchEvent(event_id=f"m{i}", pool="p", time=i, a="a", b="b", score=1.0) for i in range(3)]
    res, ev = evaluate_events(make_system("elo"), events, warmup=0.0, min_history=0)
    assert ev.scores.p2[0] == 0.5
    assert ev.scores.p2[1] < ev.scores.p2[2] < 1.0  # grows as A keeps winning
    assert res["n_two_player"] == 3


def test_warmup_and_min_history() -> None:
    ranks = np.array([1, 2, 3])
    events = [RoundEvent(event_id=f"r{i}", pool="p", round_id=str(i), time=i, players=["a", "b", "c"],
                         ranks=ranks) for i in range(10)]
    res, _ = evaluate_events(make_system("elo"), events, warmup=0.1, min_history=5)
    # round 0 is warm-up; rounds 1..4 have players with < 5 earlier events
    assert res["n_scored_events"] == 5
    assert res["pair_inversion"] == 0.0  # the same order every time: learnt after one round
    res, _ = evaluate_events(make_system("elo"), events, warmup=0.0, min_history=0)
    # round 0 is predicted from equal ratings: 3 half-wrong pairs of 3
    assert res["n_scored_events"] == 10
    assert res["pair_inversion"] == pytest.approx(100.0 * 1.5 / 30.0)


def test_tune_picks_best_on_prefix_and_scores_the_rest(data: dict[str, Path]) -> None:
    from stream.tools.tune import tune

    res = CliRunner().invoke(tune, [str(data["matches"]), "--system", "elo", "--grid", "k=1,32", "--json",
                                    "--min-history", "2"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["objective"] == "log_loss" and out["n_train"] == 80
    assert [r["params"] for r in out["grid"]] == [{"k": "1"}, {"k": "32"}]
    assert out["best_params"] == {"k": "32"}  # k=1 barely moves from 1500: near-coin predictions
    assert out["test"]["n_scored_events"] <= 800 - 80


def test_aggregation_is_per_participant() -> None:
    """Paper §6.2: Σ_t Σ_i metric(i, t) / Σ_t |P_t| — not pooled over pairs, not a mean of rounds."""
    events = [RoundEvent(event_id="r1", pool="p", round_id="1", time=0, players=["a", "b"], ranks=np.array([1, 2])),
              RoundEvent(event_id="r2", pool="p", round_id="2", time=1, players=["b", "a", "c", "d"],
                         ranks=np.array([1, 2, 3, 4]))]
    res, _ = evaluate_events(make_system("elo"), events, warmup=0.0, min_history=0)
    # round 1: equal ratings, 1 pair half wrong (0.5). Round 2: a > c = d > b predicted, b won:
    # (b,a), (b,c), (b,d) wrong, (c,d) half → 3.5 of 6 pairs.
    assert res["pair_inversion"] == pytest.approx(100.0 * (2 * 0.5 + 4 * 3.5 / 6) / 6)
    assert res["pair_inversion_pooled"] == pytest.approx(100.0 * 4.0 / 7.0)
    assert res["pair_inversion_round_mean"] == pytest.approx(100.0 * (0.5 + 3.5 / 6) / 2)


def test_eval_event_jsonl_assembles_rounds_and_reports_bad_lines(tmp_path: Path) -> None:
    rows = []
    for r in range(3):
        for k, p in enumerate(["a", "b", "c"]):
            rows.append({"type": "round_result", "event_id": f"r{r}{p}", "pool": "x", "round_id": f"R{r}",
                         "time": 10 * r + k, "player": p, "rank": k + 1})
        rows.append({"type": "round_completed", "event_id": f"c{r}", "pool": "x", "round_id": f"R{r}",
                     "time": 10 * r + 5, "participants": 3})
    good = tmp_path / "ev.jsonl"
    good.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = _eval(good, "elo", "--warmup", "0", "--min-history", "1")
    assert out["n_events"] == 3 and out["n_scored_events"] == 2
    assert out["pair_inversion"] == 0.0  # same order every round: right after the first
    bad = tmp_path / "bad.jsonl"
    bad.write_text(json.dumps(rows[0]) + "\n{oops\n")
    res = CliRunner().invoke(evaluate, [str(bad), "--system", "elo", "--json"])
    assert res.exit_code == 2
    assert f"{bad}:2" in res.output


def test_report_writes_markdown_and_plots(data: dict[str, Path], tmp_path: Path) -> None:
    from stream.tools.report import report

    out = tmp_path / "rep"
    res = CliRunner().invoke(report, [str(data["matches"]), "--system", "elo", "--system", "glicko",
                                      "--param", "elo:k=20", "--out", str(out), "--top", "3"])
    assert res.exit_code == 0, res.output
    md = (out / "report.md").read_text()
    assert "| elo |" in md and "| glicko |" in md
    for png in ("calibration.png", "logloss_by_diff.png", "trajectories.png", "runtime.png"):
        assert (out / png).stat().st_size > 1000
        assert f"({png})" in md
    results = json.loads((out / "results.json").read_text())
    assert results["elo"]["params"]["k"] == 20.0


@pytest.mark.parametrize(("kind", "system"), [("matches", "elo"), ("rounds", "elo-mmr")])
def test_eval_ignores_duplicate_events_like_the_pipeline(data: dict[str, Path], kind: str, system: str) -> None:
    """Events delivered twice (same pool and event_id) were rated and scored twice by eval,
    while replay and the service ignore them."""
    res = CliRunner().invoke(evaluate, [str(data[kind]), str(data[kind]), "--system", system, "--json"])
    assert res.exit_code == 0, res.output
    twice = json.loads(res.stdout)
    once = _eval(data[kind], system)
    assert {k: v for k, v in twice.items() if k not in (*TIMING, "inputs")} == \
        {k: v for k, v in once.items() if k not in (*TIMING, "inputs")}
