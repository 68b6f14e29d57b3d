"""Rows built from columns in C are the NamedTuples ``map(cls, *columns)`` builds."""

from __future__ import annotations

from itertools import repeat

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.events.model import RatingOutput
from stream.ratings.base import Rating, rows_of_columns


@settings(max_examples=100, deadline=None)
@given(st.lists(st.tuples(st.floats(), st.floats(), st.floats(), st.integers()), max_size=20))
def test_ratings_by_columns_are_the_namedtuples(rows: list[tuple[float, float, float, int]]) -> None:
    cols = list(zip(*rows, strict=True)) or [(), (), (), ()]
    made = list(rows_of_columns(Rating, *cols))
    assert [tuple(r) for r in made] == [tuple(r) for r in map(Rating, *cols)]  # NaN-safe: same objects
    assert all(type(r) is Rating for r in made)
    assert [r.rounds for r in made] == [r[3] for r in rows]


def test_outputs_stop_at_the_shortest_column_as_map_does() -> None:
    players, ratings = ["a", "b"], [1.0, 2.0]
    made = list(rows_of_columns(RatingOutput, repeat("pool"), players, ratings, ratings, ratings, [1, 2], [1, 2],
                                ["e1", "e2"], [5, 6], repeat("elo"), repeat(None)))
    assert made == list(map(RatingOutput, repeat("pool"), players, ratings, ratings, ratings, [1, 2], [1, 2],
                            ["e1", "e2"], [5, 6], repeat("elo"), repeat(None)))
    assert made[1].player == "b" and made[1].explain is None and made[1]._replace(version=3).version == 3


def test_a_missing_column_is_refused() -> None:
    """A row short of a field would be a tuple without it: refused rather than built."""
    with pytest.raises(TypeError, match="11 fields, 10 columns"):
        rows_of_columns(RatingOutput, *([["x"]] * 10))
