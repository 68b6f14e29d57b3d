"""``mmr fit``: the search spaces the systems declare, the pools file it writes and what reads it
(``mmr eval``/``mmr replay --pools``: exactly the parameters written), the hold-out protocol it
shares with ``mmr tune``, and the skipping of invalid records."""

from __future__ import annotations

import dataclasses
import json
import math
import tomllib
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from click.testing import CliRunner
from home_matches import sided_round_lines

from stream.events.model import MatchEvent
from stream.ratings.registry import SPECS
from stream.tools.evaluate import evaluate
from stream.tools.fit import Search, choose, fit
from stream.tools.holdout import Difference, one_pool, paired_difference, pick_objective
from stream.tools.replay import replay
from stream.tools.synth import synth


@pytest.fixture(scope="module")
def history(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    d = tmp_path_factory.mktemp("fit")
    runner = CliRunner()
    matches, teams = d / "matches.jsonl", d / "teams.jsonl"
    res = runner.invoke(synth, ["--kind", "matches", "--players", "60", "--rounds", "30", "--matches", "1500",
                                "--seed", "5", "--pool", "chess", "--out", str(matches)])
    assert res.exit_code == 0, res.output
    res = runner.invoke(synth, ["--kind", "teams", "--players", "60", "--rounds", "300", "--team-size", "3",
                                "--seed", "5", "--pool", "arena", "--out", str(teams)])
    assert res.exit_code == 0, res.output
    return {"matches": matches, "teams": teams}


def _run(command: Any, *args: str) -> dict[str, Any]:
    res = CliRunner().invoke(command, [*args, "--json"])
    assert res.exit_code == 0, res.output
    out: dict[str, Any] = json.loads(res.stdout)
    return out


def _fit(path: Path, out: Path, system: str, *extra: str) -> dict[str, Any]:
    return _run(fit, str(path), "--system", system, "--out", str(out), "--no-progress", "--min-history", "2", *extra)


@pytest.mark.parametrize("name", sorted(SPECS))
def test_each_search_space_names_parameters_of_its_system_with_the_default_inside(name: str) -> None:
    spec = SPECS[name]
    params = spec.params_type()()
    assert spec.search_space, f"{name} declares nothing to fit"
    for dim in spec.search_space:
        default = getattr(params, dim.name)  # a parameter of the system
        assert isinstance(default, int | float) and not isinstance(default, bool), dim
        assert dim.low < dim.high and (dim.low > 0 or not dim.log), dim
        assert dim.low <= default <= dim.high, (dim, default)
        for bound in (dim.low, dim.high):  # every point of the space is one the system accepts
            spec.build({dim.name: bound})


def test_fit_writes_the_pools_file_that_eval_and_replay_read_with_those_parameters(history: dict[str, Path],
                                                                                   tmp_path: Path) -> None:
    pools = tmp_path / "pools.json"
    out = _fit(history["matches"], pools, "elo", "--trials", "8")
    written = json.loads(pools.read_text())
    assert written == {"pools": {"chess": {"system": "elo", "params": out["params"]}}}
    assert set(out["params"]) == {"k"} and out["default_params"] == {"k": 32.0}
    assert out["objective"] == "log_loss" and out["n_train"] == 750 and out["pool"] == "chess"
    # the first trial is the defaults: never worse on the prefix; and here better on the held-out part
    assert out["fitted_train"] <= out["default_train"]
    assert out["fitted"] <= out["default"] and out["held_out"]["fitted"]["log_loss"] == out["fitted"]
    # ... beyond the noise of the training prefix, and the held-out difference comes with its error
    assert out["improved"] and "beyond 2 se" in out["decision"]
    assert out["train_difference"]["mean"] == pytest.approx(out["fitted_train"] - out["default_train"])
    assert out["held_out_difference"]["mean"] == pytest.approx(out["fitted"] - out["default"])
    assert out["held_out_difference"]["se"] > 0
    # what eval reads from the file is what --param of the same values gives
    k = out["params"]["k"]
    common = (str(history["matches"]), "--min-history", "2")
    by_file = _run(evaluate, *common, "--system", "glicko", "--pools", str(pools))  # the file's pool wins
    by_param = _run(evaluate, *common, "--system", "elo", "--param", f"k={k!r}")
    assert by_file["pools"]["chess"]["params"]["k"] == k
    for key in ("log_loss", "brier", "pair_inversion", "n_two_sided"):
        assert by_file[key] == by_param[key], key
    default = _run(evaluate, *common, "--system", "elo")
    assert default["log_loss"] != by_param["log_loss"]  # the parameters make a difference
    # ... and so does replay --embedded: the same final ratings, byte for byte
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    runner = CliRunner()
    res = runner.invoke(replay, [str(history["matches"]), "--embedded", "--pools", str(pools), "--out", str(a),
                                 "--no-progress"])
    assert res.exit_code == 0, res.output
    res = runner.invoke(replay, [str(history["matches"]), "--embedded", "--system", "elo", "--param", f"k={k!r}",
                                 "--out", str(b), "--no-progress"])
    assert res.exit_code == 0, res.output
    assert a.read_bytes() == b.read_bytes()


def test_fit_is_reproducible_and_writes_toml_keeping_other_pools(history: dict[str, Path], tmp_path: Path) -> None:
    pools = tmp_path / "pools.toml"
    pools.write_text('[pools.other]\nsystem = "cowan"\n\n[pools.other.params]\nbeta = 0.7\n')
    first = _fit(history["matches"], pools, "glicko", "--trials", "5", "--seed", "3", "--param", "period_days=1")
    again = _fit(history["matches"], tmp_path / "again.json", "glicko", "--trials", "5", "--seed", "3",
                 "--param", "period_days=1")
    assert first["params"] == again["params"] and first["fitted"] == again["fitted"]
    assert set(first["params"]) == {"period_days", "c", "rd_init"} and first["params"]["period_days"] == 1.0
    data = tomllib.loads(pools.read_text())
    assert data["pools"]["other"] == {"system": "cowan", "params": {"beta": 0.7}}
    assert data["pools"]["chess"] == {"system": "glicko", "params": first["params"]}
    # every written value lies in the declared bounds
    for dim in SPECS["glicko"].search_space:
        assert dim.low <= first["params"][dim.name] <= dim.high


def test_fit_refuses_what_it_cannot_fit(history: dict[str, Path], tmp_path: Path) -> None:
    runner = CliRunner()
    res = runner.invoke(fit, [str(history["matches"]), "--system", "elo", "--param", "k=20", "--out",
                              str(tmp_path / "p.json")])
    assert res.exit_code == 2 and "nothing to fit for elo" in res.output
    res = runner.invoke(fit, [str(history["matches"]), "--system", "elo", "--pool", "nowhere", "--out",
                              str(tmp_path / "p.json"), "--no-progress", "--trials", "2"])
    assert res.exit_code == 0, res.output  # a file of one pool is taken as the named pool's history
    assert set(json.loads((tmp_path / "p.json").read_text())["pools"]) == {"nowhere"}


def test_team_rounds_report_log_loss_under_the_keys_of_matches_and_fit_on_them(history: dict[str, Path],
                                                                               tmp_path: Path) -> None:
    res = _run(evaluate, str(history["teams"]), "--system", "elo-mmr", "--min-history", "1")
    assert res["log_loss"] == res["team_log_loss"] and res["brier"] == res["team_brier"]
    assert res["n_two_sided"] == res["n_team_two"] > 0 and "n_two_player" not in res
    out = _fit(history["teams"], tmp_path / "teams.json", "elo-mmr", "--trials", "4", "--min-history", "1")
    assert out["objective"] == "log_loss" and out["fitted_train"] <= out["default_train"]
    assert set(out["params"]) == {"sig_limit", "weight_limit"}


def test_one_pool_selects_or_names_the_pool() -> None:
    events = [MatchEvent(event_id=f"e{i}", pool=pool, time=i, a="a", b="b", score=1.0)
              for i, pool in enumerate(["x", "y", "x"])]
    assert one_pool(events, "x") == ("x", [events[0], events[2]])
    single = events[:1]
    assert one_pool(single, None) == ("x", single)
    assert one_pool(single, "z") == ("z", [dataclasses.replace(single[0], pool="z")])
    with pytest.raises(Exception, match="choose one with --pool"):
        one_pool(events, None)
    with pytest.raises(Exception, match="no event of pool 'z'"):
        one_pool(events, "z")
    assert pick_objective("auto", events) == "log_loss" and pick_objective("brier", events) == "brier"


def test_skip_invalid_counts_and_names_the_first_bad_records(history: dict[str, Path], tmp_path: Path) -> None:
    lines = history["matches"].read_text().splitlines()
    bad = tmp_path / "bad.jsonl"
    broken = [*lines[:10], "{not json", *lines[10:20], '{"type": "match", "event_id": "x"}', *lines[20:]]
    bad.write_text("\n".join(broken) + "\n")
    runner = CliRunner()
    res = runner.invoke(evaluate, [str(bad), "--system", "elo", "--json"])
    assert res.exit_code == 2 and f"{bad}:11: bad JSON" in res.output  # the default: stop at the first
    res = runner.invoke(evaluate, [str(bad), "--system", "elo", "--json", "--skip-invalid"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["skipped"]["count"] == 2
    assert out["skipped"]["first"][0].startswith(f"{bad}:11: bad JSON")
    assert out["skipped"]["first"][1].startswith(f"{bad}:22: ")
    assert "skipped 2 invalid record(s):" in res.stderr
    clean = _run(evaluate, str(history["matches"]), "--system", "elo")
    assert out["n_events"] == clean["n_events"] and out["log_loss"] == clean["log_loss"]
    # replay (embedded) skips the same, and so do tune and fit
    res = runner.invoke(replay, [str(bad), "--embedded", "--system", "elo", "--no-progress", "--skip-invalid",
                                 "--out", str(tmp_path / "r.jsonl")])
    assert res.exit_code == 0 and "skipped 2 invalid record(s)" in res.output, res.output
    res = runner.invoke(replay, [str(bad), "--embedded", "--system", "elo", "--no-progress",
                                 "--out", str(tmp_path / "s.jsonl")])
    assert res.exit_code == 2 and f"{bad}:11" in res.output and not (tmp_path / "s.jsonl").exists()
    out = _fit(bad, tmp_path / "p.json", "elo", "--trials", "2", "--skip-invalid")
    assert out["skipped"]["count"] == 2 and out["n_events"] == clean["n_events"]


def test_skip_invalid_in_csv_rows(tmp_path: Path) -> None:
    csv = tmp_path / "r.csv"
    rows = ["date,home_team,away_team,home_score,away_score"]
    rows += [f"2020-01-{d:02d},A{d % 3},B{d % 4},{d % 3},1" for d in range(1, 29)]
    rows.insert(5, "2020-02-01,A,A,1,0")  # plays themself
    rows.insert(9, "2020-02-02,A,B,x,0")  # not a score
    csv.write_text("\n".join(rows) + "\n")
    res = CliRunner().invoke(evaluate, [str(csv), "--system", "elo", "--json", "--skip-invalid", "--min-history", "0"])
    assert res.exit_code == 0, res.output
    out = json.loads(res.stdout)
    assert out["n_events"] == 28 and out["skipped"]["count"] == 2
    assert [r.split(": ")[0] for r in out["skipped"]["first"]] == [f"{csv}:6", f"{csv}:10"]
    assert math.isfinite(out["log_loss"])


def test_fit_writes_the_learned_home_advantage_as_the_pools_starting_value(tmp_path: Path) -> None:
    """A history whose home side wins two games in three among equal players: the pools file starts the
    pool with the advantage the whole history taught (``advantage_init``), and eval reading the file
    starts from it; ``advantage=false`` writes none."""
    import random

    rng = random.Random(3)
    lines = []
    for i in range(1500):
        a, b = rng.sample([f"p{j}" for j in range(40)], 2)
        lines.append(json.dumps({"type": "match", "event_id": f"m{i}", "pool": "league", "time": i, "a": a, "b": b,
                                 "score": 1.0 if rng.random() < 2 / 3 else 0.0}))
    path = tmp_path / "home.jsonl"
    path.write_text("\n".join(lines) + "\n")
    pools = tmp_path / "pools.json"
    out = _fit(path, pools, "elo", "--trials", "3")
    start = out["params"]["advantage_init"]
    assert 60.0 < start < 240.0  # 2/3 home wins: an Elo edge of 120 points, learned back within a factor of 2
    assert json.loads(pools.read_text())["pools"]["league"]["params"] == out["params"]
    by_file = _run(evaluate, str(path), "--min-history", "2", "--pools", str(pools))
    by_param = _run(evaluate, str(path), "--min-history", "2", "--system", "elo",
                    *(a for k, v in out["params"].items() for a in ("--param", f"{k}={v!r}")))
    assert by_file["log_loss"] == by_param["log_loss"]
    off = _fit(path, tmp_path / "off.json", "elo", "--trials", "2", "--param", "advantage=false")
    assert "advantage_init" not in off["params"] and off["params"]["advantage"] is False


def test_paired_difference_takes_its_error_from_batches() -> None:
    rng = np.random.default_rng(1)
    ref = rng.random(400)
    shifted = paired_difference(ref - 0.01, ref)
    assert shifted.mean == pytest.approx(-0.01) and shifted.se == pytest.approx(0.0, abs=1e-12) and shifted.below(2)
    # a difference that drifts slowly (as two settings' ratings do): its batches see it, sd/√n would not
    slow = np.repeat(rng.normal(0.0, 0.01, 20), 20)
    d = paired_difference(ref + slow, ref)
    naive = float(np.std(slow, ddof=1) / math.sqrt(slow.size))
    assert d.se > 3 * naive and d.mean == pytest.approx(float(slow.mean()))
    with pytest.raises(ValueError, match="too few"):
        paired_difference(ref[:30], ref[:30])


@pytest.mark.parametrize(("found", "improved", "says"), [
    (Search({"k": 32.0}, 0.60, 0.60, True, None), False, "no trial beat the defaults"),
    (Search({"k": 20.0}, 0.5999, 0.60, False, Difference(-1e-4, 1e-4)), False, "within 2 se: noise"),
    (Search({"k": 20.0}, 0.59, 0.60, False, Difference(-1e-2, 1e-3)), True, "beyond 2 se"),
    (Search({"k": 20.0}, 0.59, 0.60, False, None), True, "beat the defaults"),
])
def test_the_best_trial_is_written_only_beyond_noise(found: Search, improved: bool, says: str) -> None:
    ok, why = choose(found, 2.0)
    assert ok is improved and says in why
    assert choose(found, 0.0)[0] is (not found.best_is_default)  # --z 0: whenever better


def test_fit_writes_every_sides_learned_belief_and_eval_starts_from_it(tmp_path: Path) -> None:
    """Team rounds with home/away labels: the pools file starts each side from the belief the history
    taught it (mean and sd), and eval reading the file plays with exactly those parameters."""
    path, pools = tmp_path / "sided.jsonl", tmp_path / "pools.json"
    path.write_text("\n".join(sided_round_lines(120.0)) + "\n")
    out = _fit(path, pools, "elo-mmr", "--trials", "3", "--min-history", "0", "--z", "0")
    params = out["params"]
    home, away = params["advantage_init_home"], params["advantage_init_away"]
    assert home > 0 > away and home == -away  # two sides, one observation each event: mirror images
    assert 0 < params["advantage_sd_home"] == params["advantage_sd_away"] < 0.5  # narrower than the prior (1 u)
    assert "advantage_init" not in params and out["improved"] is (out["fitted_train"] < out["default_train"])
    assert json.loads(pools.read_text())["pools"]["league"]["params"] == params
    common = (str(path), "--min-history", "0")
    by_file = _run(evaluate, *common, "--pools", str(pools))
    by_param = _run(evaluate, *common, "--system", "elo-mmr",
                    *(a for k, v in params.items() for a in ("--param", f"{k}={v!r}")))
    assert by_file["log_loss"] == by_param["log_loss"]
    assert by_file["pools"]["league"]["params"]["advantage_init_home"] == home
    fresh = _run(evaluate, *common, "--system", "elo-mmr", *(a for k, v in params.items()
                                                             if not k.startswith("advantage")
                                                             for a in ("--param", f"{k}={v!r}")))
    assert fresh["log_loss"] != by_param["log_loss"]  # the starting beliefs make a difference


def test_fit_scores_every_prediction_after_the_warm_up_by_default(tmp_path: Path) -> None:
    """``--min-history 0`` is fit's default: every held-out round is scored, debutants' included."""
    path = tmp_path / "sided.jsonl"
    path.write_text("\n".join(sided_round_lines(120.0, n=300)) + "\n")
    out = _run(fit, str(path), "--system", "elo-mmr", "--out", str(tmp_path / "p.json"), "--no-progress",
               "--trials", "2")
    assert out["n_scored"] == out["n_events"] - out["n_train"] == 150
