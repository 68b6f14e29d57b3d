"""Sides in the events (docs/advantage.md): a match's ``neutral``, a team's ``side``, the CSV reader's
``neutral`` column and ``mmr teams-csv``'s ``side`` column."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from stream.events.inputs import InputError, read_records
from stream.events.model import MatchBatch, MatchEvent
from stream.events.validate import InvalidEvent, decode_event, fast_matches, plain_match_rows
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


def _full(obj: dict[str, Any]) -> MatchBatch:
    """The batch the worker builds from the full decoder's events (``planning.decode_message``)."""
    etype, value = decode_event(obj)
    batch = MatchBatch(obj["pool"])
    for m in [value] if etype == "match" else value:
        batch.add(m)
    return batch


ROW = {k: v for k, v in MATCH.items() if k not in ("type", "pool")}


@pytest.mark.parametrize("flags", [[False, True, False], [True, True, True], [False, False, False], None])
def test_every_match_form_carries_neutral_through_the_fast_paths(flags: list[bool] | None) -> None:
    """``match``, ``match_batch`` items and the ``match_columns`` column ``neutral``: the fast decoder
    gives the full decoder's batch, its flags included (None when no match is neutral)."""
    rows = [{**ROW, "event_id": f"m{i}", "time": i, **({} if flags is None else {"neutral": f})}
            for i, f in enumerate(flags or [False, False, False])]
    cols: dict[str, Any] = {c: [r[c] for r in rows] for c in ("event_id", "time", "a", "b", "score")}
    if flags is not None:
        cols["neutral"] = flags
    want = flags if flags and True in flags else None
    for obj in ({"type": "match_batch", "pool": "p", "matches": rows},
                {"type": "match_columns", "pool": "p", **cols}):
        fast = fast_matches(obj)
        assert fast is not None and fast == _full(obj) and fast.neutral == want
        assert [m.neutral for m in decode_event(obj)[1]] == (flags or [False] * 3)
    one = {**MATCH, **({"neutral": flags[1]} if flags else {})}
    single = fast_matches(one)
    assert single is not None and single == _full(one) and single.is_neutral(0) == bool(flags and flags[1])
    got = plain_match_rows(rows)
    assert got is not None and got[1] == want


@pytest.mark.parametrize("bad", [["yes", False], [1, 0], [True], [True, False, True], "true"])
def test_a_bad_neutral_column_is_refused_by_name(bad: Any) -> None:
    """The column is checked like the others: booleans only, as many as the matches (else the fast path
    leaves it to the full decoder, whose reason names it)."""
    obj = {"type": "match_columns", "pool": "p", "event_id": ["m1", "m2"], "time": [1, 2], "a": ["x", "y"],
           "b": ["y", "x"], "score": [1, 0], "neutral": bad}
    assert fast_matches(obj) is None
    with pytest.raises(InvalidEvent, match="neutral"):
        decode_event(obj)


@pytest.mark.parametrize("bad", ["yes", 1, None])
def test_a_bad_neutral_item_goes_to_the_full_decoder(bad: Any) -> None:
    rows: list[Any] = [ROW, {**ROW, "event_id": "m2", "neutral": bad}]
    obj = {"type": "match_batch", "pool": "p", "matches": rows}
    assert fast_matches(obj) is None and plain_match_rows(rows) is None
    with pytest.raises(InvalidEvent, match="neutral"):
        decode_event(obj)


def test_a_run_of_match_lines_keeps_neutral(tmp_path: Path) -> None:
    """The embedded replay's runs of ``match`` lines (``chunks=True``) hold each line's ``neutral``, per
    pool, as the lines read one by one do."""
    path = tmp_path / "m.jsonl"
    path.write_text('{"type":"match","event_id":"a","pool":"p","time":1,"a":"x","b":"y","score":1}\n'
                    '{"type":"match","event_id":"b","pool":"p","time":2,"a":"x","b":"y","score":1,"neutral":true}\n'
                    '{"type":"match","event_id":"c","pool":"q","time":3,"a":"x","b":"y","score":0,"neutral":false}\n')
    runs = [v for _, _, v in read_records(str(path), chunks=True)]
    assert [r.batch.neutral for r in runs] == [[False, True], None]
    assert [m.neutral for r in runs for m in r.events()] == \
        [v.neutral for _, _, v in read_records(str(path))] == [False, True, False]
