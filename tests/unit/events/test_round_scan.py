"""``round`` events whose standings the worker reads from their bytes (``scan_round`` +
``round_of_columns``) decode to what decoding the whole event gives, or fall back to it: the same
event, or the same refusal with the same reason."""

from __future__ import annotations

from typing import Any

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.events import _standings_scan
from stream.events.validate import InvalidEvent, fast_round, round_of_columns
from stream.service import planning
from stream.service.config import Settings
from stream.service.messages import Message

HEAD = '{"type":"round","event_id":"e1","pool":"p","round_id":"r1","time":5,'
EVENTS: dict[str, str | bytes] = {
    "plain": HEAD + '"standings":[{"player":"ann","rank":1},{"player":"bob","rank":2},{"player":"cy","rank":2}]}',
    "spaces, rank first": ' { "standings" : [ { "rank" : 1 , "player" : "a b" } ,\t{ "player" : "c" , "rank" : 2 } ] ,'
                          ' "type":"round","event_id":"e","pool":"p","round_id":"r","time":5 , "weight" : 0.5 } ',
    "non-ascii names": HEAD + '"standings":[{"player":"jos\u00e9","rank":1},{"player":"\U0001f600","rank":2}]}',
    "escaped name": HEAD + '"standings":[{"player":"a\\u0062","rank":1},{"player":"b","rank":2}]}',
    "quote in a name": HEAD + '"standings":[{"player":"a\\"b","rank":1},{"player":"b","rank":2}]}',
    "control character": HEAD + '"standings":[{"player":"a\tb","rank":1},{"player":"b","rank":2}]}',
    "extra item field": HEAD + '"standings":[{"player":"a","rank":1,"team":3},{"player":"b","rank":2}]}',
    "rank twice": HEAD + '"standings":[{"player":"a","rank":1,"rank":2},{"player":"b","rank":2}]}',
    "player twice in an item": HEAD + '"standings":[{"player":"a","player":"c","rank":1},{"player":"b","rank":2}]}',
    "no rank": HEAD + '"standings":[{"player":"a"},{"player":"b","rank":2}]}',
    "rank 0": HEAD + '"standings":[{"player":"a","rank":0},{"player":"b","rank":2}]}',
    "float rank": HEAD + '"standings":[{"player":"a","rank":1.0},{"player":"b","rank":2}]}',
    "exponent rank": HEAD + '"standings":[{"player":"a","rank":1e1},{"player":"b","rank":2}]}',
    "negative rank": HEAD + '"standings":[{"player":"a","rank":-1},{"player":"b","rank":2}]}',
    "leading zero": HEAD + '"standings":[{"player":"a","rank":01},{"player":"b","rank":2}]}',
    "huge rank": HEAD + '"standings":[{"player":"a","rank":123456789012345678901},{"player":"b","rank":2}]}',
    "19-digit rank": HEAD + '"standings":[{"player":"a","rank":1234567890123456789},{"player":"b","rank":2}]}',
    "empty name": HEAD + '"standings":[{"player":"","rank":1},{"player":"b","rank":2}]}',
    "long name": HEAD + '"standings":[{"player":"' + "x" * 129 + '","rank":1},{"player":"b","rank":2}]}',
    "name of 128": HEAD + '"standings":[{"player":"' + "x" * 128 + '","rank":1},{"player":"b","rank":2}]}',
    "long in characters": HEAD + '"standings":[{"player":"' + "\u00e9" * 100 + '","rank":1},{"player":"b","rank":2}]}',
    "duplicate player": HEAD + '"standings":[{"player":"a","rank":1},{"player":"a","rank":2}]}',
    "empty standings": HEAD + '"standings":[]}',
    "trailing comma": HEAD + '"standings":[{"player":"a","rank":1},]}',
    "standings twice": HEAD + '"standings":[{"player":"a","rank":1}],"standings":[{"player":"b","rank":1}]}',
    "escaped key": HEAD + '"st\\u0061ndings":[{"player":"a","rank":1}]}',
    "a standings string": '{"type":"round","event_id":"\\"standings\\":[]","pool":"p","round_id":"r","time":5,'
                          '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]}',
    "nested standings key": HEAD + '"meta":{"standings":[{"player":"z","rank":1}]},'
                                   '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]}',
    "teams": '{"type":"round","event_id":"e","pool":"p","round_id":"r","time":5,"standings":[],'
             '"teams":[{"players":["a"],"rank":1},{"players":["b"],"rank":2}]}',
    "unknown pool": HEAD.replace('"p"', '"q"') + '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]}',
    "too many players": HEAD + '"standings":['
                        + ",".join(f'{{"player":"p{i}","rank":{i + 1}}}' for i in range(6)) + "]}",
    "a match": '{"type":"match","event_id":"m","pool":"p","time":5,"a":"x","b":"y","score":1}',
    "bad weight": HEAD + '"weight":0,"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]}',
    "time a float": '{"type":"round","event_id":"e","pool":"p","round_id":"r","time":5.0,'
                    '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]}',
    "invalid utf-8": (HEAD + '"standings":[{"player":"a').encode() + b"\xff" + b'","rank":1},{"player":"b","rank":2}]}',
    "trailing garbage": HEAD + '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]} x',
    "missing brace": HEAD + '"standings":[{"player":"a","rank":1},{"player":"b","rank":2}]',
}
SETTINGS = Settings(pools={}, max_participants=5)
planning.use_standings_scan()  # as the worker's processor does


def _raw(case: str) -> bytes:
    raw = EVENTS[case]
    return raw if isinstance(raw, bytes) else raw.encode()


def _decoded(raw: bytes) -> Any:
    """What the worker's decoder makes of ``raw``: the event's fields, or the refusal's reason."""
    try:
        etype, v = planning.decode_message(Message("t", 0, 0, raw), SETTINGS.with_(pools=_pools()))
    except InvalidEvent as exc:
        return ("refused", exc.reason, exc.event_id)
    if etype != "round":
        return (etype, type(v).__name__)
    return (etype, v.event_id, v.pool, v.round_id, v.time, v.players, v.ranks.tolist(), str(v.ranks.dtype),
            v.weight, v.perf_ceiling, v.teams is None)


def _pools() -> dict[str, Any]:
    from stream.service.config import PoolConfig

    return {"p": PoolConfig("elo-mmr")}


@pytest.mark.parametrize("case", sorted(EVENTS))
def test_the_scan_decodes_each_event_as_the_whole_decoding_does(case: str, monkeypatch: pytest.MonkeyPatch) -> None:
    raw = _raw(case)
    scanned = _decoded(raw)
    monkeypatch.setattr(planning, "_scan_round", None)
    assert scanned == _decoded(raw)


def test_the_scan_takes_the_plain_rounds() -> None:
    taken = {case for case in EVENTS
             if (got := _standings_scan.scan_round(_raw(case), 128)) is not None and round_of_columns(*got) is not None}
    assert taken == {"plain", "spaces, rank first", "non-ascii names", "name of 128", "unknown pool",
                     "too many players", "nested standings key", "a standings string"}


names = st.text(alphabet=st.sampled_from(['"', "\\", "\n", "\x00", "a", "b", "\u00e9", "\U0001f600", " ", ",",
                                          "{", "}", ":"]), min_size=0, max_size=5)
ranks = st.integers(min_value=-2, max_value=2**64 - 1) | st.floats(allow_nan=False, allow_infinity=False, width=32)
items = st.lists(st.fixed_dictionaries({"player": names, "rank": ranks},
                                       optional={"x": st.integers(min_value=0, max_value=9)}), min_size=0, max_size=6)


@settings(max_examples=400, deadline=None)
@given(items, st.sampled_from([0, orjson.OPT_INDENT_2]), st.booleans())
def test_any_round_is_scanned_to_what_fast_round_decodes_or_falls_back(
        standings: list[dict[str, Any]], spaced: int, rank_first: bool) -> None:
    if rank_first:
        standings = [dict(reversed(list(s.items()))) for s in standings]
    body = {"type": "round", "event_id": "e", "pool": "p", "round_id": "r", "time": 1, "standings": standings}
    raw = orjson.dumps(body, option=spaced)
    got = _standings_scan.scan_round(raw, 128)
    scanned = None if got is None else round_of_columns(*got)
    whole = fast_round(orjson.loads(raw))
    if scanned is not None:
        assert whole is not None
        assert (scanned.players, scanned.ranks.tolist(), scanned.ranks.dtype) == \
            (whole.players, whole.ranks.tolist(), whole.ranks.dtype)
        assert (scanned.event_id, scanned.pool, scanned.round_id, scanned.time, scanned.weight) == \
            (whole.event_id, whole.pool, whole.round_id, whole.time, whole.weight)
    elif whole is not None:  # what the scan leaves to fast_round: a name with an escape, another field, ...
        assert any(set(p) & {'"', "\\", "\n", "\x00"} or len(p.encode()) > 128 for p in whole.players) \
            or any(r >= 10**18 for r in whole.ranks.tolist()) or any("x" in item for item in standings)
