"""The history records of a commit (stream.state.history): which rows are recorded, and the
command that appends them."""

from __future__ import annotations

from stream.events.model import RatingOutput
from stream.state.history import HISTORY_LUA, RECORD, decode, history_command, history_rows


def _out(player: str, version: int, rating: float, eid: str) -> RatingOutput:
    return RatingOutput("p", player, rating, rating + 1, 50.0, version, version, eid, 1000 + version, "elo")


def test_rows_of_written_players_latest_version_only() -> None:
    published = [_out("a", 3, 1.0, "old"), _out("b", 7, 2.0, "re"), _out("a", 4, 5.0, "new"), _out("c", 1, 9.0, "x")]
    rows = history_rows(published, {"a": b"", "c": b""})  # b: a re-publication, not written by the commit
    assert rows is not None and rows.players == 2
    assert rows.keys == ["a", "c"]
    assert [decode(r) for r in rows.records] == [
        {"version": 4, "time": 1004, "rating": 5.0, "mu": 6.0, "sigma": 50.0, "event_id": "new"},
        {"version": 1, "time": 1001, "rating": 9.0, "mu": 10.0, "sigma": 50.0, "event_id": "x"}]
    assert history_rows([], {"a": b""}) is None
    assert history_rows([_out("b", 1, 1.0, "e")], {"a": b""}) is None


def test_the_command_appends_each_players_record_to_their_key() -> None:
    published = [RatingOutput("p", "a", 1.5, 3.0, 5.0, 1, 1, "e1", 10, "elo"),
                 RatingOutput("p", "x:{y}", 2.5, 4.0, 6.0, 2, 2, "é2", 20, "elo")]
    rows = history_rows(published, {"a": b"", "x:{y}": b""})
    assert rows is not None
    args: list[bytes | str | int] = ["EVAL", HISTORY_LUA, 1, b"mmr:{p}:chg", 7]
    rows_in = [(1.5, 3.0, 5.0, 1, 10, "e1"), (2.5, 4.0, 6.0, 2, 20, "é2")]
    for name, (r, m, s, v, t, e) in zip([b"a", b"x%3A%7By%7D"], rows_in, strict=True):
        args += [b"mmr:{p}:h:" + name, RECORD.pack(v, t, r, m, s) + e.encode()]
    assert history_command(rows, 7, b"mmr:{p}:h:", b"mmr:{p}:chg") == tuple(args)
