"""``mmr synth --kind teams`` and ``mmr bench teams``: valid, seeded team rounds from the model."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from click.testing import CliRunner

from stream.events.validate import decode_event
from stream.tools.bench.teams import bench_teams
from stream.tools.synth import synth, synth_team_rounds


def test_team_rounds_are_valid_seeded_and_reformed() -> None:
    rows, truth = synth_team_rounds(40, 60, 3, 4, seed=7)
    again, truth2 = synth_team_rounds(40, 60, 3, 4, seed=7)
    assert rows == again and truth == truth2
    assert synth_team_rounds(40, 60, 3, 4, seed=8)[0] != rows
    assert len(truth) == 40
    line_ups = set()
    for row in rows:
        etype, ev = decode_event(row)  # the decoder of the worker and the replay
        assert etype == "round"
        assert ev.teams is not None and len(ev.teams.ranks) == 4
        assert len(ev.players) == 12 == len(set(ev.players))
        assert np.bincount(ev.teams.team_of).tolist() == [3, 3, 3, 3]
        line_ups.add(frozenset(frozenset(t["players"]) for t in row["teams"]))
    assert len(line_ups) == 60  # teams re-formed every round
    days = {row["time"] // 86_400_000 for row in rows}
    assert len(days) == 60 // (40 // 12)  # a day: every player plays once on average


def test_stronger_teams_win_more_often() -> None:
    rows, _ = synth_team_rounds(100, 600, 2, 2, seed=3, drift=0.0)
    rng = np.random.default_rng(3)
    skill = rng.normal(1500.0, 350.0, 100)  # the generator's first draw: the skills (no drift)
    wins = 0
    for row in rows:
        a, b = row["teams"]
        sa = sum(skill[int(p[1:])] for p in a["players"])
        sb = sum(skill[int(p[1:])] for p in b["players"])
        wins += (a["rank"] < b["rank"]) == (sa > sb)
    assert wins / len(rows) > 0.75


def test_synth_cli_writes_teams_and_truth(tmp_path: Path) -> None:
    out, truth = tmp_path / "t.jsonl", tmp_path / "truth.json"
    res = CliRunner().invoke(synth, ["--kind", "teams", "--players", "30", "--rounds", "5", "--team-size", "5",
                                     "--teams", "3", "--out", str(out), "--truth", str(truth)])
    assert res.exit_code == 0, res.output
    assert len(out.read_text().splitlines()) == 5
    assert len(json.loads(truth.read_text())) == 30
    res = CliRunner().invoke(synth, ["--kind", "teams", "--players", "10", "--team-size", "5", "--teams", "3",
                                     "--out", str(out)])
    assert res.exit_code == 2 and "need at least 15 players" in res.output


def test_bench_teams_recovers_skills() -> None:
    res = CliRunner().invoke(bench_teams, ["--scenario", "2v2", "--noise", "gaussian", "--scale", "0.1",
                                           "--min-history", "3", "--system", "elo-mmx", "--system",
                                           "trueskill (package)", "--system", "elo-mmr:weight_limit=1", "--json"])
    assert res.exit_code == 0, res.output
    rows = [json.loads(line) for line in res.stdout.splitlines()]
    assert [r["system"] for r in rows] == ["elo-mmx", "trueskill (package)", "elo-mmr:weight_limit=1"]
    for r in rows:
        assert r["n_rounds"] == 400 and r["n_players"] > 100
        assert r["spearman"] > 0.4 and r["kendall"] > 0.25
        assert r["team_log_loss"] < 0.69 and r["team_brier"] < 0.25


def test_bench_teams_refuses_unknown_systems_and_parameters() -> None:
    for name, reason in [("glicko-teams", "unknown or not installed"), ("elo-mmx:nope=1", "unknown parameter")]:
        res = CliRunner().invoke(bench_teams, ["--scale", "0.01", "--system", name])
        assert res.exit_code == 2 and reason in res.output
