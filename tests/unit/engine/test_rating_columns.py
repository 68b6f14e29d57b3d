"""A step's ratings by columns (``RatingColumns``) against the rows they hold: the same tuples, and
messages byte for byte those ``rating_key`` / ``rating_value`` write of each row; the column helpers
(``stream.text_columns``) against writing each string on its own."""

from __future__ import annotations

import math
from itertools import pairwise
from typing import cast

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.engine.rating_columns import RatingColumns
from stream.events.model import RatingOutput
from stream.service.messages import rating_key, rating_value
from stream.service.step_rating import change_records
from stream.text_columns import cat, join_rows, json_numbers, json_strings, pick, split

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)
FLOATS = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1.0, 1500.0, 5e-324, 1e16, 1e17])
NAMES = st.text(min_size=0, max_size=12)  # quotes, backslashes, control characters, astral planes
TEXTS = st.just(b"{}") | st.dictionaries(st.text(max_size=5), FLOATS | st.text(max_size=5),
                                         min_size=1, max_size=3).map(orjson.dumps)  # explanations
EXPLAIN = st.none() | TEXTS


@st.composite
def ratings(draw: st.DrawFn, ints: st.SearchStrategy[int] = INT64, min_size: int = 0) -> list[RatingOutput]:
    pool, system = draw(NAMES), draw(st.sampled_from(["elo-mmr", "elo-mmχ", 'a"b\\c']))
    n = draw(st.integers(min_value=min_size, max_value=30))
    events = draw(st.lists(NAMES, min_size=1, max_size=3))
    explained = draw(st.booleans())
    return [RatingOutput(pool, draw(NAMES), draw(FLOATS), draw(FLOATS), draw(FLOATS), draw(ints), draw(ints),
                         draw(st.sampled_from(events)), draw(ints), system, draw(EXPLAIN) if explained else None)
            for _ in range(n)]


def columns_of(rows: list[RatingOutput], arrays: bool = False) -> RatingColumns:
    def col(i: int) -> list:  # type: ignore[type-arg]
        return [r[i] for r in rows]
    pool = rows[0].pool if rows else "p"
    system = rows[0].system if rows else "elo-mmr"
    rating, mu, sigma = (np.array(col(i), dtype=np.float64) if arrays else col(i) for i in (2, 3, 4))
    explain = col(10) if any(r.explain is not None for r in rows) else None
    return RatingColumns(pool, system, col(1), rating, mu, sigma, col(5), col(6), col(7), col(8), explain)


@settings(max_examples=300, deadline=None)
@given(ratings(), st.booleans())
def test_messages_are_each_rows_key_and_value_byte_for_byte(rows: list[RatingOutput], arrays: bool) -> None:
    columns = columns_of(rows, arrays)
    keys, values = columns.messages()
    assert keys == [rating_key(o.pool, o.player) for o in rows]
    assert values == [rating_value(o) for o in rows]


@settings(max_examples=50, deadline=None)
@given(ratings(ints=st.integers(min_value=2**63, max_value=2**64 - 1)))
def test_integers_beyond_int64_are_written_row_by_row(rows: list[RatingOutput]) -> None:
    keys, values = columns_of(rows).messages()
    assert values == [rating_value(o) for o in rows]
    assert keys == [rating_key(o.pool, o.player) for o in rows]


def test_an_integer_orjson_cannot_write_fails_as_it_does_row_by_row() -> None:
    row = RatingOutput("p", "a", 1.0, 1.0, 1.0, 2**64, 2**64, "e", 1, "elo-mmr")
    with pytest.raises(TypeError):
        rating_value(row)
    with pytest.raises(TypeError):
        columns_of([row]).messages()


@settings(max_examples=100, deadline=None)
@given(ratings().filter(lambda rows: all(math.isfinite(x) for r in rows for x in r[2:5])))
def test_the_columns_are_the_sequence_of_their_rows(rows: list[RatingOutput]) -> None:
    columns = columns_of(rows, arrays=True)  # (finite: a NaN made again from an array is not the same NaN)
    assert len(columns) == len(rows)
    assert columns == rows
    if rows:
        assert columns[-1] == rows[-1] and columns[:2] == rows[:2]
    assert [*columns] == list(rows)


def test_a_rating_column_row_is_the_tuple_a_step_made_before() -> None:
    columns = RatingColumns("p", "elo-mmr", ["a", "b"], np.array([1.5, 2.0]), np.array([3.0, 4.0]),
                            np.array([5.0, 6.0]), [1, 2], [1, 2], ["e1", "e2"], [10, 20], [b'{"x":1}', None])
    assert columns[0] == RatingOutput("p", "a", 1.5, 3.0, 5.0, 1, 1, "e1", 10, "elo-mmr", b'{"x":1}')
    assert type(columns[1].rating) is float  # as ``.tolist()`` gave them
    assert columns.messages()[1][0] == (b'{"type":"rating","pool":"p","player":"a","rating":1.5,"mu":3.0,"sigma":5.0,'
                                        b'"rounds":1,"version":1,"event_id":"e1","time":10,"system":"elo-mmr","x":1}')


@settings(max_examples=200, deadline=None)
@given(st.lists(FLOATS, max_size=40))
def test_json_numbers_are_orjsons_text_of_each_float(xs: list[float]) -> None:
    assert split(json_numbers(np.array(xs, dtype=np.float64))) == [orjson.dumps(x) for x in xs]
    assert all(orjson.loads(t) is None for x, t in zip(xs, split(json_numbers(np.array(xs))), strict=True)
               if not math.isfinite(x))


@settings(max_examples=100, deadline=None)
@given(st.lists(INT64, max_size=40))
def test_json_numbers_are_orjsons_text_of_each_int(xs: list[int]) -> None:
    assert split(json_numbers(np.array(xs, dtype=np.int64))) == [orjson.dumps(x) for x in xs]


@settings(max_examples=200, deadline=None)
@given(st.integers(min_value=0, max_value=6).flatmap(
    lambda n: st.lists(st.binary(max_size=4) | st.lists(st.binary(max_size=5), min_size=n, max_size=n),
                       max_size=5).map(lambda parts: (n, parts))))
def test_join_rows_concatenates_each_rows_parts(case: tuple[int, list[bytes | list[bytes]]]) -> None:
    n, parts = case
    columns = [p if isinstance(p, bytes) else cat(p) for p in parts]
    expected = [b"".join(p if isinstance(p, bytes) else p[i] for p in parts) for i in range(n)]
    assert split(join_rows(n, columns)) == expected


@settings(max_examples=200, deadline=None)
@given(st.lists(st.binary(max_size=6), min_size=1, max_size=5).flatmap(
    lambda strings: st.tuples(st.just(strings), st.lists(st.integers(0, len(strings) - 1), max_size=30))))
def test_pick_gathers_each_rows_string(case: tuple[list[bytes], list[int]]) -> None:
    strings, rows = case
    got = pick(strings, np.array(rows, dtype=np.int64))
    assert split(got) == [strings[r] for r in rows]
    assert split(join_rows(len(rows), [got, b";"])) == [strings[r] + b";" for r in rows]


def test_join_rows_takes_a_column_cut_from_a_larger_buffer() -> None:
    blob, at = cat([b"xx", b"ab", b"c"])
    assert split(join_rows(2, [(blob, at[1:]), b"!"])) == [b"ab!", b"c!"]


@settings(max_examples=200, deadline=None)
@given(st.lists(st.text(max_size=8), max_size=20))
def test_json_strings_are_orjsons_text_of_each_string(xs: list[str]) -> None:
    assert split(json_strings(xs)) == [orjson.dumps(x) for x in xs]


@settings(max_examples=100, deadline=None)
@given(ratings(min_size=1), st.data())
def test_records_by_columns_are_change_records_byte_for_byte(rows: list[RatingOutput], data: st.DataObject) -> None:
    texts = [data.draw(TEXTS) for _ in rows]
    rows = [r._replace(version=r.rounds, explain=t) for r, t in zip(rows, texts, strict=True)]
    players = list(dict.fromkeys(r.player for r in rows))  # (a player once, as in a step)
    rows = [next(r for r in rows if r.player == p) for p in players]
    texts = [cast(bytes, r.explain) for r in rows]
    columns = columns_of(rows)
    by_columns = RatingColumns(columns.pool, columns.system, columns.players, columns.rating, columns.mu, columns.sigma,
                               columns.rounds, columns.rounds, columns.event_ids, columns.times, cat(texts))
    expected = change_records(players, [r.version for r in rows], [r.event_id for r in rows],
                              [r.time for r in rows], texts)
    records = by_columns.records()
    assert dict(records) == expected and list(records) == list(expected)
    assert by_columns.messages() == columns.messages()  # the explanations as a column or one by one
    assert list(by_columns) == list(columns)


def test_records_need_the_explanations_as_a_column() -> None:
    columns = RatingColumns("p", "s", ["a"], [1.0], [1.0], [1.0], [1], [1], ["e"], [1], [b'{"x":1}'])
    with pytest.raises(TypeError):
        columns.records()


@settings(max_examples=100, deadline=None)
@given(ratings(min_size=1), st.data())
def test_parts_give_the_messages_of_the_whole(rows: list[RatingOutput], data: st.DataObject) -> None:
    """``part`` (what the worker sends a slice at a time): the parts' messages, one after another, are
    the whole's, whether the explanations are one each or a column, and with texts made before."""
    rows = [r._replace(version=r.rounds) for r in rows]
    whole = columns_of(rows)
    keys, values = whole.messages()
    texts = [cast(bytes, r.explain or b"{}") for r in rows]
    as_column = RatingColumns(whole.pool, whole.system, whole.players, whole.rating, whole.mu, whole.sigma,
                              whole.rounds, whole.rounds, whole.event_ids, whole.times, cat(texts))
    as_column.records()  # (caches the versions', event ids' and times' texts, as a step does)
    column_keys, column_values = as_column.messages()
    cuts = sorted(data.draw(st.lists(st.integers(0, len(rows)), max_size=4)))
    bounds = [0, *cuts, len(rows)]
    for columns, (k, v) in ((whole, (keys, values)), (as_column, (column_keys, column_values))):
        got_k: list[bytes] = []
        got_v: list[bytes] = []
        for a, b in pairwise(bounds):
            pk, pv = columns.part(a, b).messages()
            got_k += pk
            got_v += pv
        assert (got_k, got_v) == (k, v)
