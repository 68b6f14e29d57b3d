"""The frames of a commit's bulk writes, written by numba from its columns or from the arena, are byte for
byte what hiredis packs for the same commands built the plain way, one argument per string."""

from __future__ import annotations

import math
from typing import Any, cast

import hiredis
import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.state.commit_frames import _score_texts, frames, rows_flat, rows_of, score_order, score_text
from stream.state.keys import escape

PREFIX, LB, CHG = b"mmr:{p}:p:", b"mmr:{p}:lb", b"mmr:{p}:chg"

names = st.text(min_size=1, max_size=20) | st.sampled_from(["a:b", "%", "{x}", "}:lb", "é名:"])
scores = st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e16, 1.5e-7, math.pi])


def _pack(*args: bytes) -> bytes:
    """hiredis's frame of one command (its stubs type the argument tuple as of one element)."""
    return hiredis.pack_command(cast(Any, args))


def _text(score: float) -> bytes:
    """A score's text: orjson's for a finite one, Python's ``repr`` for ±inf (orjson writes null)."""
    return orjson.dumps(float(score)) if math.isfinite(score) else repr(float(score)).encode()


def _plain(players: list[str], values: list[bytes], scores: list[float], changes: dict[str, bytes]) -> list[bytes]:
    """The oracle: the commands with one argument per string, players by ascending score (ties as
    given), packed by hiredis; no command where it would have nothing to write."""
    rows = sorted(zip(players, values, scores, strict=True), key=lambda row: row[2])
    out = []
    if rows:
        out.append(_pack(b"MSET", *[x for p, v, _ in rows for x in (PREFIX + escape(p).encode(), v)]))
        out.append(_pack(b"ZADD", LB, *[x for p, _, s in rows for x in (_text(s), p.encode())]))
    if changes:
        out.append(_pack(b"HSET", CHG, *[x for p, t in changes.items() for x in (p.encode(), t)]))
    return out


def _changes(players: list[str], texts: list[bytes]) -> dict[str, bytes]:
    return dict(zip(players, texts, strict=False))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(names, st.binary(max_size=40), scores), max_size=30, unique_by=lambda r: r[0]),
       st.lists(st.binary(max_size=30), max_size=30))
def test_frames_equal_the_plain_packing(rows: list[tuple[str, bytes, float]], texts: list[bytes]) -> None:
    players = [p for p, _, _ in rows]
    values = [v for _, v, _ in rows]
    ss = [s for _, _, s in rows]
    changes = _changes(players, texts)
    got = [bytes(f) for f in frames(rows_of(players, values, ss, changes), PREFIX, LB, CHG)]
    assert got == _plain(players, values, ss, changes)


@settings(max_examples=300, deadline=None)
@given(st.lists(st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e16, 1.5e-7, 5e-324, 1.7976931348623157e308]),
                max_size=30))
def test_score_texts_parse_back_to_the_same_double(scores: list[float]) -> None:
    """What ZADD parses is each score exactly (strtod of the shortest round-trip text), cut by
    columns from one text of all of them."""
    values, order = score_order(scores)
    cat, at = _score_texts(values[order])
    texts = [cat[at[i]:at[i + 1]].tobytes() for i in range(len(scores))]
    assert texts == [score_text(x) for x in values[order].tolist()]
    assert [float(t) for t in texts] == sorted(scores)
    signs = [math.copysign(1, x) for x in values[order].tolist()]
    assert [math.copysign(1, float(t)) for t in texts] == signs


def test_players_go_by_ascending_score_ties_as_given() -> None:
    """ZADD gets the players by score, so each finds its place in the sorted set next to where the one
    before it went; MSET lists them in the same order."""
    mset, zadd = frames(rows_of(["c", "a", "d", "b"], [b"3", b"1", b"4", b"2"], [2.0, -1.0, 2.0, 0.5], {}),
                        PREFIX, LB, CHG)
    assert bytes(zadd) == _pack(b"ZADD", LB, b"-1.0", b"a", b"0.5", b"b", b"2.0", b"c", b"2.0", b"d")
    assert bytes(mset).endswith(b"a\r\n$1\r\n1\r\n$11\r\nmmr:{p}:p:b\r\n$1\r\n2\r\n$11\r\nmmr:{p}:p:c\r\n$1\r\n3\r\n"
                                b"$11\r\nmmr:{p}:p:d\r\n$1\r\n4\r\n")


def test_lengths_count_encoded_bytes_and_reach_many_digits() -> None:
    """A length is the bytes' count, not the characters'; a value of 12,345 bytes has a five-digit one."""
    mset, _ = frames(rows_of(["é名"], [b"x" * 12345], [1.0], {}), PREFIX, LB, CHG)
    n = len(PREFIX) + len("é名".encode())
    assert bytes(mset).startswith(b"*3\r\n$4\r\nMSET\r\n$%d\r\n" % n + PREFIX + "é名".encode() + b"\r\n$12345\r\n")


def test_only_the_changes_when_no_player_is_written() -> None:
    (hset,) = frames(rows_of([], [], [], {"a": b"{}"}), PREFIX, LB, CHG)
    assert bytes(hset) == _pack(b"HSET", CHG, b"a", b"{}")
    assert frames(rows_of([], [], [], {}), PREFIX, LB, CHG) == []


def test_a_nan_score_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="NaN"):
        rows_of(["a", "b"], [b"", b""], [1.0, float("nan")], {})


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(names, st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=7), scores),
                max_size=30, unique_by=lambda r: r[0]),
       st.sampled_from([b"\x01", b"", b"\x02\x03"]), st.integers(0, 3), st.lists(st.binary(max_size=30), max_size=30))
def test_frames_from_the_arena_equal_the_plain_form(rows: list[tuple[str, list[float], float]], tag: bytes,
                                                    lead: int, texts: list[bytes]) -> None:
    """``rows_flat`` (values read from one float64 array by numba) gives the frames of each value's
    ``bytes``, whatever the lengths, the tag, and where in the array the first value starts."""
    players = [p for p, _, _ in rows]
    beliefs = [np.array(v, dtype="<f8") for _, v, _ in rows]
    ss = [s for _, _, s in rows]
    flat = np.concatenate([np.full(lead, 7.0), *beliefs]) if beliefs else np.full(lead, 7.0)
    offsets = lead + np.concatenate([[0], np.cumsum([len(b) for b in beliefs], dtype=np.int64)]).astype(np.int64)
    values = [tag + b.tobytes() for b in beliefs]
    changes = _changes(players, texts)
    got = [bytes(f) for f in frames(rows_flat(players, flat, offsets, tag, ss, changes), PREFIX, LB, CHG)]
    assert got == _plain(players, values, ss, changes)


def test_the_arena_rows_refuse_a_nan_score_too() -> None:
    with pytest.raises(ValueError, match="NaN"):
        rows_flat(["a"], np.zeros(1), np.array([0, 1]), b"\x01", [float("nan")], {})
