"""The bulk writes of a commit (``redis_store.bulk_commands``): each player's belief, score and change,
the players by ascending score, each score exactly as the leaderboard must hold it."""

from __future__ import annotations

import math

import hiredis
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.state.keys import escape
from stream.state.redis_store import Commit, bulk_commands

PREFIX, LB, CHG, HIST = b"mmr:{p}:p:", b"mmr:{p}:lb", b"mmr:{p}:chg", b"mmr:{p}:h:"

names = st.text(min_size=1, max_size=20) | st.sampled_from(["a:b", "%", "{x}", "}:lb", "é名:"])
scores = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e16, 1.5e-7, 5e-324, math.pi])


def _commands(packed: list[bytes]) -> list[list[bytes]]:
    """The commands as Redis reads them (hiredis's reader takes a command's frame as an array)."""
    reader = hiredis.Reader()
    reader.feed(b"".join(packed))
    out = []
    while (cmd := reader.gets()) is not False:
        out.append(cmd)
    return out


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(names, st.binary(max_size=40), scores), max_size=30, unique_by=lambda r: r[0]),
       st.lists(st.binary(max_size=30), max_size=30))
def test_the_commands_write_each_players_value_score_and_change(rows: list[tuple[str, bytes, float]],
                                                                 texts: list[bytes]) -> None:
    players = [p for p, _, _ in rows]
    changes = dict(zip(players, texts, strict=False))
    c = Commit(beliefs={p: v for p, v, _ in rows}, scores={p: s for p, _, s in rows}, changes=changes)
    got = _commands(bulk_commands(c, PREFIX, LB, CHG, HIST, 0))
    want_rows = sorted(rows, key=lambda r: r[2])  # ascending score, ties as given
    want: list[list[bytes]] = []
    if rows:
        want.append([b"MSET", *[x for p, v, _ in want_rows for x in (PREFIX + escape(p).encode(), v)]])
        zadd = got[1]
        assert zadd[:2] == [b"ZADD", LB] and zadd[3::2] == [p.encode() for p, _, _ in want_rows]
        parsed = [float(t) for t in zadd[2::2]]  # what ZADD parses: each score exactly, its sign too
        assert parsed == [s for _, _, s in want_rows]
        assert [math.copysign(1, x) for x in parsed] == [math.copysign(1, s) for _, _, s in want_rows]
        want.append(zadd)
    if changes:
        want.append([b"HSET", CHG, *[x for p, t in changes.items() for x in (p.encode(), t)]])
    assert got == want


def test_infinite_scores_are_written_as_redis_reads_them() -> None:
    c = Commit(beliefs={"a": b"1", "b": b"2"}, scores={"a": math.inf, "b": -math.inf})
    assert _commands(bulk_commands(c, PREFIX, LB, CHG, HIST, 0))[1] == [b"ZADD", LB, b"-inf", b"b", b"inf", b"a"]


def test_only_the_changes_when_no_player_is_written() -> None:
    assert _commands(bulk_commands(Commit(changes={"a": b"{}"}), PREFIX, LB, CHG, HIST, 0)) == [
        [b"HSET", CHG, b"a", b"{}"]]
    assert bulk_commands(Commit(), PREFIX, LB, CHG, HIST, 0) == []


def test_a_nan_score_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="NaN"):
        bulk_commands(Commit(beliefs={"a": b"", "b": b""}, scores={"a": 1.0, "b": math.nan}), PREFIX, LB, CHG,
                      HIST, 0)
