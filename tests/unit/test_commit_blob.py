"""The commit's players blob, built by columns or from the arena, is byte for byte the plain per-player form."""

from __future__ import annotations

import math
import struct

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.state.commit_blob import _score_texts, players_blob, players_blob_flat, score_order, score_text
from stream.state.keys import escape


def _text(score: float) -> bytes:
    """A score's text: orjson's for a finite one, Python's ``repr`` for ±inf (orjson writes null)."""
    return orjson.dumps(float(score)) if math.isfinite(score) else repr(float(score)).encode()


def _plain(players: list[str], values: list[bytes], scores: list[float]) -> bytes:
    """The oracle: one (key name, value, score text, name) quadruple per player, players by
    ascending score (ties as given), lengths first; the name is empty when it is the key name."""
    rows = [(escape(p).encode(), v, _text(s), b"" if escape(p) == p else p.encode())
            for p, v, s in sorted(zip(players, values, scores, strict=True), key=lambda row: row[2])]
    return (struct.pack(f"<{4 * len(rows)}I", *[len(x) for t in rows for x in t])
            + b"".join(x for t in rows for x in t))


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=20) | st.sampled_from(["a:b", "%", "{x}", "}:lb"]),
                          st.binary(max_size=40),
                          st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e16, 1.5e-7, math.pi])),
                max_size=30))
def test_players_blob_equals_plain_packing(rows: list[tuple[str, bytes, float]]) -> None:
    players = [p for p, _, _ in rows]
    values = [v for _, v, _ in rows]
    scores = [s for _, _, s in rows]
    assert players_blob(players, values, scores) == _plain(players, values, scores)


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


def test_players_blob_counts_encoded_bytes_not_characters() -> None:
    blob = players_blob(["é名:", "é名"], [b"\x01", b""], [1.0, 1500.25])
    n = len("é名".encode())
    assert struct.unpack("<8I", blob[:32]) == (n + 3, 1, len(b"1.0"), n + 1, n, 0, len(b"1500.25"), 0)


def test_players_go_by_ascending_score_ties_as_given() -> None:
    """The script hands the players to ZADD in blob order: by score, so each finds its place in
    the sorted set next to where the one before it went."""
    blob = players_blob(["c", "a", "d", "b"], [b"3", b"1", b"4", b"2"], [2.0, -1.0, 2.0, 0.5])
    lens = struct.unpack("<16I", blob[:64])
    body, pos, keys = blob[64:], 0, []
    for k in range(4):
        keys.append(body[pos:pos + lens[4 * k]])
        pos += sum(lens[4 * k:4 * k + 4])
    assert keys == [b"a", b"b", b"c", b"d"]


def test_a_nan_score_is_refused_before_anything_is_sent() -> None:
    with pytest.raises(ValueError, match="NaN"):
        players_blob(["a", "b"], [b"", b""], [1.0, float("nan")])


@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.text(min_size=1, max_size=20) | st.sampled_from(["a:b", "%", "{x}", "}:lb"]),
                          st.lists(st.floats(allow_nan=True, allow_infinity=True), max_size=7),
                          st.floats(allow_nan=False) | st.sampled_from([0.0, -0.0, 1e16, 1.5e-7, math.pi])),
                max_size=30),
       st.sampled_from([b"\x01", b"", b"\x02\x03"]), st.integers(0, 3))
def test_players_blob_from_the_arena_equals_the_plain_form(rows: list[tuple[str, list[float], float]], tag: bytes,
                                                           lead: int) -> None:
    """``players_blob_flat`` (values written from one float64 array by numba) gives the bytes of
    ``players_blob`` of each value's ``bytes``, whatever the lengths, the tag, and where in the
    array the first value starts."""
    players = [p for p, _, _ in rows]
    beliefs = [np.array(v, dtype="<f8") for _, v, _ in rows]
    scores = [s for _, _, s in rows]
    flat = np.concatenate([np.full(lead, 7.0), *beliefs]) if beliefs else np.full(lead, 7.0)
    offsets = lead + np.concatenate([[0], np.cumsum([len(b) for b in beliefs], dtype=np.int64)]).astype(np.int64)
    values = [tag + b.tobytes() for b in beliefs]
    assert bytes(players_blob_flat(players, flat, offsets, tag, scores)) == players_blob(players, values, scores)


def test_the_arena_blob_refuses_a_nan_score_too() -> None:
    with pytest.raises(ValueError, match="NaN"):
        players_blob_flat(["a"], np.zeros(1), np.array([0, 1]), b"\x01", [float("nan")])
