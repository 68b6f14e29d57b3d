"""``rating_records`` (the worker's rating messages made by columns) against ``rating_key`` and
``rating_value``, one output at a time: the same bytes for any names, numbers and explanations."""

from __future__ import annotations

import math

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.events.model import RatingOutput
from stream.service.messages import rating_key, rating_records, rating_value

#: names with the characters JSON escapes or cuts at: quotes, commas, backslashes, control and non-ASCII
names = st.text(alphabet=st.sampled_from(['"', ",", "\\", "\n", "\x00", "\x1f", "a", "é", "😀", " ", "[", "]"]),
                max_size=6) | st.text(max_size=8)
numbers = st.floats(allow_nan=True, allow_infinity=True) | st.sampled_from([0.0, -0.0, 1e16, 1e-7, 1500.0, 2**53 + 1.0])
counts = st.integers(min_value=-(2**63), max_value=2**63 - 1)
explanations = st.one_of(
    st.none(),
    st.dictionaries(names, numbers | names | st.none(), min_size=1, max_size=3).map(orjson.dumps),
    st.just(b"{}"),
    st.dictionaries(st.sampled_from(["delta", "cause"]), counts, max_size=2),  # a mapping, not JSON text
)
outputs = st.builds(RatingOutput, names, names, numbers, numbers, numbers, counts, counts, names, counts, names,
                    explanations)


@settings(max_examples=300, deadline=None)
@given(st.lists(outputs, max_size=12), st.sampled_from(["p", 'a","b']))
def test_records_by_columns_are_the_records_one_at_a_time(batch: list[RatingOutput], shared: str) -> None:
    # a step's ratings usually share their pool and system, and a round's players their event id
    batch = batch + [o._replace(pool=shared, system=shared, event_id=shared) for o in batch]
    keys, values = rating_records(batch)
    assert keys == [rating_key(o.pool, o.player) for o in batch]
    assert values == [rating_value(o) for o in batch]


def test_no_outputs_no_records() -> None:
    assert rating_records([]) == ([], [])


def test_a_rating_that_is_not_a_number_is_null_in_both() -> None:
    o = RatingOutput("p", "x", math.nan, math.inf, -math.inf, 1, 1, "e", 0, "elo")
    assert rating_records([o])[1] == [rating_value(o)]
    assert orjson.loads(rating_value(o))["rating"] is None
