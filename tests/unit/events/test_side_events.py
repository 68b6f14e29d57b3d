"""Sides in the events (docs/advantage.md): a match's ``neutral``, a team's ``side``, the CSV reader's
``neutral`` column and ``mmr teams-csv``'s ``side`` column."""

from __future__ import annotations

from pathlib import Path

import pytest

from stream.events.inputs import InputError, read_records
from stream.events.model import MatchEvent
from stream.events.validate import InvalidEvent, decode_event
from stream.tools.teams_csv import read_team_csv

MATCH = {"type": "match", "event_id": "m1", "pool": "p", "time": 1, "a": "x", "b": "y", "score": 1}


def test_match_neutral_defaults_to_false() -> None:
    _, ev = decode_event(dict(MATCH))
    assert isinstance(ev, MatchEvent) and ev.neutral is False
    _, ev = decode_event({**MATCH, "neutral": True})
    assert ev.neutral is True
    with pytest.raises(InvalidEvent, match="neutral"):
        decode_event({**MATCH, "neutral": "yes"})


def _team_round(*sides: str | None) -> dict[str, object]:
    teams = []
    for t, side in enumerate(sides):
        team: dict[str, object] = {"players": [f"p{t}a", f"p{t}b"], "rank": t + 1}
        if side is not None:
            team["side"] = side
        teams.append(team)
    return {"type": "round", "event_id": "r", "pool": "p", "round_id": "r", "time": 1, "teams": teams}


def test_team_sides_are_decoded_and_bounded() -> None:
    _, ev = decode_event(_team_round("home", "away"))
    assert ev.teams.sides == ("home", "away")
    _, ev = decode_event(_team_round(None, None))
    assert ev.teams.sides is None
    _, ev = decode_event(_team_round("blue", None))
    assert ev.teams.sides == ("blue", None)
    decode_event(_team_round("x" * 32, "y"))
    with pytest.raises(InvalidEvent, match="side"):
        decode_event(_team_round("x" * 33, "y"))
    with pytest.raises(InvalidEvent, match="side"):
        decode_event(_team_round("", "y"))


def test_csv_neutral_column(tmp_path: Path) -> None:
    path = tmp_path / "r.csv"
    path.write_text("date,home_team,away_team,home_score,away_score,neutral\n"
                    "2020-01-01,A,B,1,0,FALSE\n2020-01-02,A,B,1,1,TRUE\n2020-01-03,B,A,0,2,\n")
    got = [v for _, _, v in read_records(str(path))]
    assert [m.neutral for m in got] == [False, True, False]
    path.write_text("date,home_team,away_team,home_score,away_score,neutral\n2020-01-01,A,B,1,0,maybe\n")
    with pytest.raises(InputError, match=r"r\.csv:2.*neutral"):
        list(read_records(str(path)))
    path.write_text("date,home_team,away_team,home_score,away_score\n2020-01-01,A,B,1,0\n")
    assert [m.neutral for _, _, m in read_records(str(path))] == [False]


def test_teams_csv_side_column(tmp_path: Path) -> None:
    path = tmp_path / "t.csv"
    path.write_text("event_id,time,team,rank,player,side\n"
                    "g1,1,H,1,a,home\ng1,1,H,1,b,home\ng1,1,A,2,c,away\ng1,1,A,2,d,away\n"
                    "g2,2,X,1,a,\ng2,2,Y,2,c,\n")
    events = list(read_team_csv(str(path)))
    assert [t.get("side") for t in events[0]["teams"]] == ["home", "away"]
    assert all("side" not in t for t in events[1]["teams"])
    path.write_text("event_id,time,team,rank,player,side\ng1,1,H,1,a,home\ng1,1,H,1,b,away\ng1,1,A,2,c,\n")
    with pytest.raises(InputError, match="sides"):
        list(read_team_csv(str(path)))


def test_fast_paths_leave_a_neutral_match_to_the_full_decoder(tmp_path: Path) -> None:
    """The column forms carry no ``neutral``: a batch or a run of lines with one is decoded in full."""
    from stream.events.validate import fast_matches, plain_match_rows

    rows = [{k: v for k, v in MATCH.items() if k not in ("type", "pool")}, {**MATCH, "event_id": "m2", "neutral": True}]
    rows[1].pop("type")
    rows[1].pop("pool")
    assert plain_match_rows(rows) is None
    assert fast_matches({"type": "match_batch", "pool": "p", "matches": rows}) is None
    _, got = decode_event({"type": "match_batch", "pool": "p", "matches": rows})
    assert [m.neutral for m in got] == [False, True]
    path = tmp_path / "m.jsonl"
    path.write_text('{"type":"match","event_id":"a","pool":"p","time":1,"a":"x","b":"y","score":1}\n'
                    '{"type":"match","event_id":"b","pool":"p","time":2,"a":"x","b":"y","score":1,"neutral":true}\n')
    got_all = [v for _, _, v in read_records(str(path), chunks=True)]
    flat = [m for v in got_all for m in (v if isinstance(v, list) else getattr(v, "matches", [v]))]
    assert any(getattr(m, "neutral", False) for m in flat)
