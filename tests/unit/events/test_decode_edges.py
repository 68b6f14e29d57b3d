"""Edge cases of decoding found by fuzzing the decoders (tests/property/events/test_fuzz_decoders.py).

Each test is the smallest input of one bug: it failed before the fix.
"""

from __future__ import annotations

import pytest

from stream.events.validate import InvalidEvent, decode_event, fast_matches, parse_json

MATCH = b'{"type":"match","event_id":"e","pool":"p","a":"x","b":"y","score":1,"time":%s}'
ROUND = b'{"type":"round","event_id":"e","pool":"p","round_id":"r","time":%s,"standings":[{"player":"a","rank":%s}]}'
RESULT = b'{"type":"round_result","event_id":"e","pool":"p","round_id":"r","time":%s,"player":"a","rank":%s}'
COMPLETED = b'{"type":"round_completed","event_id":"e","pool":"p","round_id":"r","time":%s,"participants":%s}'
ROWS = b'{"type":"match_batch","pool":"p","matches":[{"event_id":"e","a":"x","b":"y","score":1,"time":%s}]}'
COLUMNS = b'{"type":"match_columns","pool":"p","event_id":["e"],"a":["x"],"b":["y"],"score":[1],"time":[%s]}'


def _decode(raw: bytes) -> tuple[str, object]:
    obj = parse_json(raw)
    assert fast_matches(obj) is None
    return decode_event(obj)


# integers beyond 64 bits (orjson reads them as floats) and floats too large to be exact
INEXACT = [b"-9223372036854775809", b"-9223372036854776833", b"9007199254740993.0", b"-9.3e18", b"1e16"]


@pytest.mark.parametrize("number", INEXACT)
def test_times_that_are_not_exact_integers_are_rejected(number: bytes) -> None:
    """``-9223372036854775809`` was read as the float -2^63, which passed the schema's bounds
    (an integral float is an integer to JSON Schema) and was applied as time -2^63."""
    for template in (MATCH, ROWS, COLUMNS):
        with pytest.raises(InvalidEvent, match=r"field (matches\.0\.)?time"):
            _decode(template % number)
    for template, other in ((ROUND, b"1"), (RESULT, b"1"), (COMPLETED, b"1")):
        with pytest.raises(InvalidEvent, match="field time"):
            _decode(template % (number, other))


@pytest.mark.parametrize("number", [b"9007199254740993.0", b"1e16", b"18446744073709551616"])
def test_ranks_and_participants_that_are_not_exact_integers_are_rejected(number: bytes) -> None:
    with pytest.raises(InvalidEvent, match=r"field standings\.0\.rank"):
        _decode(ROUND % (b"1", number))
    with pytest.raises(InvalidEvent, match="field rank"):
        _decode(RESULT % (b"1", number))
    with pytest.raises(InvalidEvent, match="field participants"):
        _decode(COMPLETED % (b"1", number))


def test_integral_floats_below_2_53_are_still_exact_integers() -> None:
    """An integral float is an integer to JSON Schema, and exact below 2^53: still accepted,
    decoded as an int (dicts of round_result/round_completed included)."""
    big = 2**53 - 1
    for template in (MATCH, ROWS, COLUMNS):
        _, value = _decode(template % f"{big}.0".encode())
        times = [m.time for m in value] if isinstance(value, list) else [value.time]  # type: ignore[attr-defined]
        assert times == [big] and type(times[0]) is int
    _, rnd = _decode(ROUND % (b"-1e15", b"2.0"))
    assert rnd.time == -10**15 and rnd.ranks.tolist() == [2]  # type: ignore[attr-defined]
    _, res = _decode(RESULT % (b"5.0", b"3.0"))
    assert (res["time"], res["rank"]) == (5, 3) and type(res["time"]) is int and type(res["rank"]) is int  # type: ignore[index]
    _, comp = _decode(COMPLETED % (b"5.0", b"2.0"))
    assert comp["participants"] == 2 and type(comp["participants"]) is int  # type: ignore[index]


def test_the_int64_bounds_themselves_are_valid() -> None:
    low, high = b"-9223372036854775808", b"9223372036854775807"
    for number in (low, high):
        obj = parse_json(MATCH % number)
        fast = fast_matches(obj)
        assert fast is not None and fast.times == [int(number)]
        assert decode_event(obj)[1].time == int(number)  # type: ignore[attr-defined]


def test_extra_fields_named_like_other_types_fields_are_ignored() -> None:
    _, res = _decode(b'{"type":"round_result","event_id":"e","pool":"p","round_id":"r","time":1,"player":"a",'
                     b'"rank":1,"participants":"many"}')
    assert res["participants"] == "many"  # type: ignore[index]


def test_a_player_playing_themself_is_named_with_the_match() -> None:
    """The reason said ``field b`` for any match of a batch: which of 50,000 was not said."""
    rows = (b'{"type":"match_batch","pool":"p","matches":[{"event_id":"e","a":"x","b":"y","score":1,"time":1},'
            b'{"event_id":"f","a":"x","b":"x","score":1,"time":1}]}')
    with pytest.raises(InvalidEvent, match=r"^event f: field matches\.1\.b: player 'x' cannot play themself"):
        _decode(rows)
    columns = (b'{"type":"match_columns","pool":"p","event_id":["e","f"],"a":["x","z"],"b":["y","z"],'
               b'"score":[1,1],"time":[1,1]}')
    with pytest.raises(InvalidEvent, match=r"field b\.1: player 'z'"):
        _decode(columns)
    with pytest.raises(InvalidEvent, match=r"field b: player 'x'"):
        _decode(MATCH.replace(b'"y"', b'"x"') % b"1")


def test_a_completions_real_valued_fields_are_floats_whatever_literal_carried_them() -> None:
    raw = (b'{"type": "round_completed", "event_id": "c", "pool": "p", "round_id": "r", "time": 0, '
           b'"participants": 2, "weight": 1, "perf_ceiling": 9223372036854775807}')
    etype, value = decode_event(parse_json(raw))
    assert etype == "round_completed"
    assert type(value["weight"]) is float and value["weight"] == 1.0
    assert type(value["perf_ceiling"]) is float and value["perf_ceiling"] == float(2**63 - 1)
