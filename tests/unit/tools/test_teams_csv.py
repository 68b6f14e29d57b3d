"""``mmr teams-csv``: a team CSV (one row per player) → team round events that ``mmr eval`` reads."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from stream.tools.evaluate import evaluate
from stream.tools.teams_csv import teams_csv

GOOD = """event_id,time,team,rank,player,weight
g1,2026-01-01,A,1,ann,
g2,2026-01-02T10:00:00,X,2,ann,
g1,2026-01-01,A,1,bob,0.5
g1,2026-01-01,B,2,cat,
g1,2026-01-01,B,2,dan,
g2,2026-01-02T10:00:00,Y,1,cat,
"""


def _convert(tmp_path: Path, text: str) -> tuple[int, str, Path]:
    src, out = tmp_path / "t.csv", tmp_path / "t.jsonl"
    src.write_text(text)
    res = CliRunner().invoke(teams_csv, [str(src), "--out", str(out), "--pool", "duos"])
    return res.exit_code, res.output, out


def test_team_csv_to_events(tmp_path: Path) -> None:
    code, output, out = _convert(tmp_path, GOOD)
    assert code == 0, output
    rows = [json.loads(line) for line in out.read_text().splitlines()]
    assert rows == [
        {"type": "round", "event_id": "g1", "pool": "duos", "round_id": "g1", "time": 1767225600000,
         "teams": [{"players": ["ann", "bob"], "rank": 1, "weights": [1.0, 0.5]},
                   {"players": ["cat", "dan"], "rank": 2}]},
        {"type": "round", "event_id": "g2", "pool": "duos", "round_id": "g2", "time": 1767348000000,
         "teams": [{"players": ["ann"], "rank": 2}, {"players": ["cat"], "rank": 1}]},
    ]
    res = CliRunner().invoke(evaluate, [str(out), "--system", "trueskill", "--json", "--warmup", "0.5",
                                        "--min-history", "1"])
    assert res.exit_code == 0, res.output
    assert json.loads(res.stdout)["n_team_two"] == 1


@pytest.mark.parametrize(("text", "reason"), [
    ("event_id,time,team,player\n", "missing column(s) rank"),
    ("event_id,time,team,rank,player\ng,1,A,1,x\ng,1,A,2,y\n", "t.csv:3: team 'A' of 'g' has ranks 1 and 2"),
    ("event_id,time,team,rank,player\ng,1,A,1,x\ng,1,B,2,x\n", "t.csv:2: event 'g'"),
    ("event_id,time,team,rank,player,weight\ng,1,A,1,x,1.5\ng,1,B,2,y,\n", "t.csv:2: event 'g'"),
    ("event_id,time,team,rank,player\ng,yesterday,A,1,x\n", "cannot parse time"),
])
def test_bad_rows_are_refused_with_their_line(tmp_path: Path, text: str, reason: str) -> None:
    code, output, out = _convert(tmp_path, text)
    assert code == 2
    assert reason in output
    assert not out.exists()
