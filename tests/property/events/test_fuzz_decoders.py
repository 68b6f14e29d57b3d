"""Fuzzing the decoders: every input is decoded to a valid value or rejected with a reason.

Entry points: what the worker runs on every message (``parse_json`` → ``fast_matches`` →
``decode_event``) and what the replay runs on every file (``read_records``). Inputs:

(a) arbitrary bytes, and valid events with bytes flipped, inserted or deleted;
(b) arbitrary JSON values, and objects with the events' field names and arbitrary values;
(c) valid events with one thing changed: a field's value (wrong types, int64 and float-exactness
    boundaries, NaN/Infinity, long, empty and 129-character names, lone surrogates, control
    characters, ``{``/``}``/``:``), a field removed or given twice, an extra field (nested 1,025
    deep, say), both players the same, an array grown to 2,000 items; and 50,000-item messages
    (the worker's batch) with their last item changed;
(d) small files of each input format (event JSONL, contest JSONL, CSV) with such changes,
    plain, gzip or xz, the compressed bytes maybe cut or damaged.

Properties. A message either decodes to values within the contract -- equal to the numbers and
strings its JSON text says (an exact parse of the text is the oracle, so a value rounded or
coerced on the way fails), times and ranks ints in int64, names 1-128 characters, score in
[0, 1] -- or raises ``InvalidEvent`` whose reason names the field (or says the JSON is bad),
never another exception. The fast path, when it decodes, gives exactly what ``decode_event``
gives, and it decodes every plain valid match. A file either reads into such values, which the
service accepts in the form ``mmr replay --broker`` publishes them, or raises ``InputError``
naming the file and line.

Bounded for CI: ``max_examples`` below add up to 3,450 messages and 150 files per run (plus the
messages published from those files and twelve 50,000-item messages), ~10 s of CPU; set
``MMR_FUZZ_SCALE=10`` (say) for a longer run.
"""

from __future__ import annotations

import copy
import gzip
import itertools
import json
import lzma
import math
import os
import re
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from decimal import Decimal
from pathlib import Path
from typing import Any

import orjson
import pytest
from hypothesis import HealthCheck, assume, example, given, settings
from hypothesis import event as hypothesis_event
from hypothesis import strategies as st
from hypothesis.control import currently_in_test_context

from stream.events.inputs import MATCH_RUN, InputError, read_records
from stream.events.model import MatchBatch, MatchEvent, RoundEvent
from stream.events.validate import MATCH_LISTS, InvalidEvent, decode_event, fast_matches, parse_json

SCALE = float(os.environ.get("MMR_FUZZ_SCALE", "1"))
#: the bounds of an int64 (``time`` and ``rank`` are stored as one)
MAX_INT64, MIN_INT64 = 2**63 - 1, -(2**63)


def fuzz(examples: int) -> Callable[[Any], Any]:
    """Bounded settings: ``examples`` × MMR_FUZZ_SCALE, no deadline (the machine may be loaded)."""
    return settings(max_examples=max(1, int(examples * SCALE)), deadline=None, database=None,
                    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large,
                                           HealthCheck.function_scoped_fixture])


# --- building JSON text --------------------------------------------------------------------
@dataclass(frozen=True)
class Raw:
    """A value written as this JSON text (maybe not valid JSON at all)."""

    text: str


@dataclass(frozen=True)
class Dup:
    """An object key written a second time (``key`` renders as the plain key)."""

    key: str


def render(value: Any) -> str:
    """JSON text of ``value``; Raw parts verbatim, Dup keys as their key."""
    if isinstance(value, Raw):
        return value.text
    if isinstance(value, dict):
        return "{" + ",".join(f"{_text(k.key if isinstance(k, Dup) else k)}:{render(v)}"
                              for k, v in value.items()) + "}"
    if isinstance(value, list):
        return "[" + ",".join(map(render, value)) + "]"
    return _text(value)


def _text(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False, allow_nan=True)


def encode(text: str) -> bytes:
    """UTF-8, lone surrogates included as their (invalid) 3-byte form."""
    return text.encode("utf-8", "surrogatepass")


@contextmanager
def _deep_recursion() -> Iterator[None]:
    old = sys.getrecursionlimit()
    sys.setrecursionlimit(max(old, 20_000))
    try:
        yield
    finally:
        sys.setrecursionlimit(old)


def exact(raw: bytes) -> Any:
    """The JSON text's values exactly: integers as ints, every other number as a Decimal."""
    with _deep_recursion():
        return json.loads(raw.decode("utf-8"), parse_float=Decimal)


# --- the contract ----------------------------------------------------------------------------
def _name(value: Any, limit: int = 128) -> bool:
    return type(value) is str and 0 < len(value) <= limit


def _int64(value: Any) -> bool:
    return type(value) is int and MIN_INT64 <= value <= MAX_INT64


def _number(value: Any) -> bool:
    """A JSON number of the exact parse (not a bool)."""
    return type(value) in (int, Decimal)


def _same_int(decoded: Any, src: Any) -> bool:
    """An integer field decoded as the integer its text says. A JSON integer must come out
    exactly (orjson reads one beyond 64 bits as a double: the -2^63 - 1 bug). A number written
    with a fraction or an exponent is a double to the parser; it is valid where that double is
    integral and below 2^53, the integer it then denotes (digits beyond a double's 17 significant
    ones, as in ``1.0000000000000001``, are rounded by the parser before anyone sees them)."""
    if not _int64(decoded):
        return False
    if type(src) is int:
        return decoded == src
    return type(src) is Decimal and abs(float(src)) < 2**53 and decoded == float(src)


def check_match(m: MatchEvent, src: dict[str, Any], pool: str) -> None:
    """A decoded match is valid and is what its text says."""
    assert _name(m.event_id, 256) and m.event_id == src["event_id"]
    assert _name(m.pool) and m.pool == pool
    assert _name(m.a) and _name(m.b) and m.a != m.b and (m.a, m.b) == (src["a"], src["b"])
    assert _same_int(m.time, src["time"]), (m.time, src["time"])
    assert type(m.score) is float and 0 <= m.score <= 1
    assert _number(src["score"]) and m.score == float(src["score"])


def check_round(r: RoundEvent, src: dict[str, Any]) -> None:
    assert _name(r.event_id, 256) and r.event_id == src["event_id"]
    assert _name(r.pool) and r.pool == src["pool"]
    assert _name(r.round_id, 256) and r.round_id == src["round_id"]
    assert _same_int(r.time, src["time"])
    if "teams" in src:
        assert "standings" not in src
        check_teams(r, src["teams"])
    elif "standings" in src:
        assert r.teams is None
        assert r.players == [s["player"] for s in src["standings"]]
    else:  # the column form
        assert r.teams is None and r.players == src["players"] and len(src["ranks"]) == len(src["players"])
    assert r.players and all(map(_name, r.players)) and len(set(r.players)) == len(r.players)
    ranks = r.ranks.tolist()
    standings = (src.get("standings") or [{"rank": rank} for rank in src.get("ranks", ())]
                 or [{"rank": t["rank"]} for t in src["teams"] for _ in t["players"]])
    assert r.ranks.dtype.name == "int64" and len(ranks) == len(standings)
    assert all(_same_int(rank, s["rank"]) and rank >= 1 for rank, s in zip(ranks, standings, strict=True))
    assert type(r.weight) is float and math.isfinite(r.weight) and r.weight > 0
    assert r.weight == float(src.get("weight", 1)) and _number(src.get("weight", 1))
    assert type(r.perf_ceiling) is float and not math.isnan(r.perf_ceiling)
    assert r.perf_ceiling == float(src.get("perf_ceiling", math.inf))


def check_teams(r: RoundEvent, teams: list[dict[str, Any]]) -> None:
    """A team round: its players team by team, each team's rank, the weights given or 1."""
    assert r.teams is not None and teams
    assert r.players == [p for t in teams for p in t["players"]]
    assert r.teams.team_of.tolist() == [k for k, t in enumerate(teams) for _ in t["players"]]
    assert all(_same_int(rank, t["rank"]) and rank >= 1 for rank, t in zip(r.teams.ranks.tolist(), teams, strict=True))
    weights = [w for t in teams for w in t.get("weights", [1] * len(t["players"]))]
    assert r.teams.weights.dtype.name == "float64" and len(weights) == len(r.players)
    assert all(_number(w) and 0 < got == float(w) <= 1 for got, w in zip(r.teams.weights.tolist(), weights,
                                                                          strict=True))


def check_part(d: dict[str, Any], src: dict[str, Any], etype: str) -> None:
    """A ``round_result`` or ``round_completed``: the validated dict, its integers as ints."""
    assert set(d) == set(src)
    assert _name(d["event_id"], 256) and _name(d["pool"]) and _name(d["round_id"], 256)
    assert _same_int(d["time"], src["time"])
    if etype == "round_result":
        assert _name(d["player"]) and d["player"] == src["player"]
        assert _same_int(d["rank"], src["rank"]) and d["rank"] >= 1
    else:
        assert type(d["participants"]) is int and d["participants"] >= 1
        assert _same_int(d["participants"], src["participants"]) or d["participants"] == src["participants"] > MAX_INT64
        for k in ("weight", "perf_ceiling"):
            if k in src:
                assert _number(src[k]) and d[k] == float(src[k])
        if "weight" in src:
            assert d["weight"] > 0


def event(label: str) -> None:
    """Count ``label`` in hypothesis' statistics (``--hypothesis-show-statistics``)."""
    if currently_in_test_context():
        hypothesis_event(label)


def check_value(raw: bytes, etype: str, value: Any) -> None:
    src = exact(raw)
    assert src["type"] == etype
    if etype == "match":
        check_match(value, src, src["pool"])
    elif etype == "match_batch":
        assert len(value) == len(src["matches"]) > 0
        for m, item in zip(value, src["matches"], strict=True):
            check_match(m, item, src["pool"])
    elif etype == "match_columns":
        cols = [src[k] for k in ("event_id", "time", "a", "b", "score")]
        assert len(value) == len(cols[0]) > 0 and all(len(c) == len(value) for c in cols)
        for m, row in zip(value, zip(*cols, strict=True), strict=True):
            check_match(m, dict(zip(("event_id", "time", "a", "b", "score"), row, strict=True)), src["pool"])
    elif etype == "round":
        check_round(value, src)
    else:
        assert etype in ("round_result", "round_completed")
        check_part(value, src, etype)


REASON = re.compile(r"^(field \S+: |bad JSON: |an event must be a JSON object$)")


def check_reason(exc: InvalidEvent) -> str:
    """A rejection's reason names the field (or the JSON) and is bounded, however large the
    message: it quotes at most a name or two (128 characters, up to 10 each in a repr)."""
    assert REASON.match(exc.reason), exc.reason
    assert len(exc.reason) <= 3000, exc.reason[:500]
    assert exc.event_id is None or _name(exc.event_id, 256)
    return exc.reason


def as_batch(etype: str, value: Any, pool: str) -> MatchBatch:
    batch = MatchBatch(pool)
    for m in [value] if etype == "match" else value:
        batch.add(m)
    return batch


def decode(raw: bytes) -> tuple[str, Any] | InvalidEvent:
    """What the worker does with one message, checked: the decoded value or the rejection."""
    try:
        obj = parse_json(raw)
    except InvalidEvent as exc:
        event("rejected: " + check_reason(exc).split(":", 1)[0])
        return exc
    before = copy.deepcopy(obj) if len(raw) < 100_000 else None
    fast = fast_matches(obj)
    try:
        etype, value = decode_event(obj)
    except InvalidEvent as exc:
        assert fast is None, f"the fast path accepted what decode_event rejects: {exc}"
        event("rejected: " + re.sub(r"\.\d+", ".N", check_reason(exc).split(":", 1)[0]))
        return exc
    if before is not None:
        assert obj == before, "decoding changed the parsed message"
    if fast is not None:
        assert etype == "match" or etype in MATCH_LISTS
        assert fast == as_batch(etype, value, obj["pool"]), "the fast path decoded other values"
        assert all(type(s) is float for s in fast.scores) and all(type(t) is int for t in fast.times)
    check_value(raw, etype, value)
    event(f"accepted: {etype} by " + ("fast_matches" if fast is not None else "decode_event"))
    return etype, value


# --- strategies: valid events ------------------------------------------------------------------
SPECIAL_NAMES = ["{", "}", ":", "kc}:p:x", "x}:lb", "\x00", "a\nb", " ", "é" * 128, "😀" * 128, "x" * 128,
                 "\u2028", "\ufeff", "\u0301", "null", "1"]
names = st.one_of(st.text(min_size=1, max_size=6), st.text(min_size=120, max_size=128),
                  st.sampled_from(SPECIAL_NAMES))
ids = st.one_of(names, st.text(min_size=250, max_size=256))
times = st.one_of(st.integers(MIN_INT64, MAX_INT64), st.integers(-(10**13), 10**13),
                  st.sampled_from([MIN_INT64, MAX_INT64, 0, -1, 2**53, -(2**53)]))
scores = st.one_of(st.sampled_from([0, 1, 0.5, 0.0, 1.0, -0.0, 5e-324]), st.floats(0, 1))
ranks = st.one_of(st.integers(1, 5), st.integers(1, MAX_INT64))


def _distinct(ab: tuple[str, str]) -> tuple[str, str]:
    """Two different names (b changed when it is a: no filter, which hypothesis would retry)."""
    a, b = ab
    return (a, b) if a != b else (a, a[:-1] if len(a) > 1 else a + "'")


pairs = st.tuples(names, names).map(_distinct)
extras = st.dictionaries(st.sampled_from(["extra", "more", "_", "x" * 300]),
                         st.recursive(st.none() | st.booleans() | st.integers() | st.text(max_size=5),
                                      lambda c: st.lists(c, max_size=3) | st.dictionaries(st.text(max_size=3), c,
                                                                                           max_size=3),
                                      max_leaves=5), max_size=1)


@st.composite
def match_item(draw: st.DrawFn) -> dict[str, Any]:
    a, b = draw(pairs)
    return {"event_id": draw(ids), "time": draw(times), "a": a, "b": b, "score": draw(scores), **draw(extras)}


@st.composite
def valid_event(draw: st.DrawFn, kinds: tuple[str, ...] = ("match", "match_batch", "match_columns", "round",
                                                             "round_result", "round_completed")) -> dict[str, Any]:
    kind = draw(st.sampled_from(kinds))
    head: dict[str, Any] = {"type": kind}
    pool = draw(names)
    if kind == "match":
        return {**head, "pool": pool, **draw(match_item())}
    if kind in MATCH_LISTS:
        items = draw(st.lists(match_item(), min_size=1, max_size=4))
        if kind == "match_batch":
            return {**head, "pool": pool, "matches": items, **draw(extras)}
        return {**head, "pool": pool, **{k: [m[k] for m in items] for k in ("event_id", "time", "a", "b", "score")}}
    common = {**head, "event_id": draw(ids), "pool": pool, "round_id": draw(ids), "time": draw(times)}
    optional = draw(st.fixed_dictionaries({}, optional={
        "weight": st.floats(1e-300, 1e300) | st.integers(1, 10), "perf_ceiling": st.floats(-1e300, 1e300)}))
    if kind == "round":
        players = draw(st.lists(names, min_size=1, max_size=5, unique=True))
        form = draw(st.sampled_from(["teams", "standings", "columns"]))
        if form == "columns":  # standings as two columns
            return {**common, "players": players, "ranks": [draw(ranks) for _ in players], **optional,
                    **draw(extras)}
        if form == "teams":  # a team round: the players split into teams, weights or not
            cuts = sorted(draw(st.lists(st.integers(1, len(players) - 1), max_size=2, unique=True))
                          if len(players) > 1 else [])
            teams = []
            for lo, hi in itertools.pairwise([0, *cuts, len(players)]):
                team: dict[str, Any] = {"players": players[lo:hi], "rank": draw(ranks), **draw(extras)}
                if draw(st.booleans()):
                    team["weights"] = [draw(st.floats(1e-300, 1.0) | st.just(1)) for _ in range(hi - lo)]
                teams.append(team)
            return {**common, "teams": teams, **optional, **draw(extras)}
        standings = [{"player": p, "rank": draw(ranks)} for p in players]
        return {**common, "standings": standings, **optional, **draw(extras)}
    if kind == "round_result":
        return {**common, "player": draw(names), "rank": draw(ranks), **draw(extras)}
    return {**common, "participants": draw(st.integers(1, 2**64 - 1)), **optional}


# --- strategies: one thing changed -------------------------------------------------------------
NUMBERS = ["0", "1", "-1", "2", "0.5", "1.0", "-0.0", "0.0", "1e0", "1E2", "1.5", "5e-324", "1e-400",
           "-9223372036854775808", "-9223372036854775809", "9223372036854775807", "9223372036854775808",
           "18446744073709551615", "18446744073709551616", "-9223372036854776833", "-9223372036854775808.0",
           "9223372036854775807.0", "9007199254740991.0", "9007199254740992", "9007199254740993",
           "9007199254740993.0", "-9007199254740993.0", "4503599627370496.5", "-9.3e18", "1e16", "1e308",
           "1e309", "-1e309", "1" * 400, "-" + "9" * 30, "0.1", "0.30000000000000004", "1.0000000000000001",
           "0.99999999999999999", "-0.0000001", "1e-7", "00", "01", "-", "1.", ".5", "+1", "0x10", "1_000"]
LITERALS = ["NaN", "-NaN", "Infinity", "-Infinity", "nan", "inf", "true", "false", "null", "None", "undefined",
            "[]", "{}", "[1]", "[[]]", '{"a":1}', '""', '"5"', '"1"', '"x"', '"null"', '"\\ud800"', '"\\udc00x"',
            '"a\\ud800\\ud800"', '"\\ud83d\\ude00"', '"\\u0000"', '"a\x01b"', '"a\x00b"', '"\\x41"', '"abc',
            '"\\u2028"', '"{"', '"}"', '":"', '"kc}:p:x"', "'x'", "[" * 1024 + "]" * 1024, "[" * 1025 + "]" * 1025,
            "[" * 5000, '"' + "x" * 129 + '"', '"' + "x" * 128 + '"', '"' + "é" * 129 + '"', '"' + "x" * 256 + '"',
            '"' + "x" * 257 + '"', '"' + "x" * 100_000 + '"', "[" + ",".join(["0.5"] * 3) + "]",
            '[{"event_id":"e","time":1,"a":"x","b":"y","score":1}]', '[{"player":"a","rank":1}]']
texts = st.text(st.characters(exclude_categories=()), max_size=200)  # lone surrogates included
literals = st.one_of(
    st.sampled_from(NUMBERS), st.sampled_from(LITERALS),
    st.integers().map(str), st.integers(-(2**70), 2**70).map(str),
    st.floats(allow_nan=False, allow_infinity=False).map(repr),
    st.builds(json.dumps, texts, ensure_ascii=st.booleans()),
    st.builds(json.dumps, st.text(st.characters(categories=["Cs", "Cc"]), min_size=1, max_size=3)),
    st.sampled_from(["match", "round", "match_batch", "match_columns", "round_result", "round_completed",
                     "rating", "Match"]).map(_text),
).map(Raw)

EVENT_FIELDS = ["type", "event_id", "pool", "time", "a", "b", "score", "matches", "round_id", "standings", "teams",
               "players", "ranks", "weights",
                "player", "rank", "weight", "perf_ceiling", "participants"]


def _paths(value: Any, prefix: tuple[Any, ...] = ()) -> Iterator[tuple[Any, ...]]:
    """Every place in an event (keys of objects, items of arrays), at most 3 deep."""
    if len(prefix) >= 3:
        return
    if isinstance(value, dict):
        for k, v in value.items():
            yield (*prefix, k)
            yield from _paths(v, (*prefix, k))
    elif isinstance(value, list):
        for i, v in enumerate(value[:3]):
            yield (*prefix, i)
            yield from _paths(v, (*prefix, i))


def _at(event: Any, path: tuple[Any, ...]) -> Any:
    for step in path:
        event = event[step]
    return event


def _field_names(path: tuple[Any, ...]) -> set[str]:
    """What a reason may name for a change at ``path``: any of the path's keys."""
    return {p for p in path if isinstance(p, str)}


@dataclass
class Changed:
    """A valid event with one thing changed; ``fields``: what a rejection's reason may name."""

    event: Any
    how: str
    fields: set[str]


@st.composite
def changed_event(draw: st.DrawFn) -> Changed:
    event = draw(valid_event())
    how = draw(st.sampled_from(["replace", "replace", "replace", "delete", "duplicate", "extra", "same_player",
                                "grow", "wrap"]))
    if how == "wrap":
        return Changed(Raw(draw(st.sampled_from(["[{}]", '"{}"', "{}"])).replace("{}", render(event))), how, set())
    if how == "same_player":
        if event["type"] == "round" and "teams" in event:
            event["teams"].append({"players": [event["teams"][0]["players"][0]], "rank": 1})
            return Changed(event, how, {"teams"})
        if event["type"] == "round" and "players" in event:
            event["players"].append(event["players"][0])
            event["ranks"].append(1)
            return Changed(event, how, {"players"})
        if event["type"] == "round":
            event["standings"].append({"player": event["standings"][0]["player"], "rank": 1})
            return Changed(event, how, {"standings"})
        if event["type"] == "match":
            event["b"] = event["a"]
            return Changed(event, how, {"b"})
        how = "grow"
    if how == "grow":
        n = draw(st.sampled_from([100, 2000]))
        etype = event["type"]
        if etype == "match_batch":
            event["matches"] = (event["matches"] * n)[:n]
        elif etype == "match_columns":
            for k in ("event_id", "time", "a", "b", "score"):
                event[k] = (event[k] * n)[:n]
        elif etype == "round" and "teams" in event:
            event["teams"] = [{"players": [f"p{i}", f"q{i}"], "rank": i // 3 + 1} for i in range(n // 2)]
        elif etype == "round" and "players" in event:
            event["players"], event["ranks"] = [f"p{i}" for i in range(n)], [i // 3 + 1 for i in range(n)]
        elif etype == "round":
            event["standings"] = [{"player": f"p{i}", "rank": i // 3 + 1} for i in range(n)]
        how = "replace"  # and change one thing in it
    path = draw(st.sampled_from(list(_paths(event))))
    parent, key = _at(event, path[:-1]), path[-1]
    fields = _field_names(path)
    if how == "delete":
        del parent[key]
    elif how == "duplicate" and isinstance(parent, dict):
        again = {Dup(key): draw(literals)}
        items = [*parent.items(), *again.items()] if draw(st.booleans()) else [*again.items(), *parent.items()]
        parent.clear()
        parent.update(items)
    elif how == "extra" and isinstance(parent, dict):
        parent[draw(st.text(max_size=20).filter(lambda k: k not in EVENT_FIELDS))] = draw(literals)
        fields = set()  # an extra field never makes an event invalid
    else:
        parent[key] = draw(literals)
    return Changed(event, how, fields)


def check_changed(changed: Changed) -> None:
    raw = encode(render(changed.event))
    out = decode(raw)
    if isinstance(out, InvalidEvent) and not out.reason.startswith(("bad JSON", "an event must be")):
        assert changed.fields, f"rejected for an extra field: {out.reason}"
        named = set(re.findall(r"\w+", out.reason))  # "field matches.0.time: ...", "must contain ['time']"
        if named & {"a", "b"}:  # "field b: player 'x' cannot play themself" when a was changed to b
            named |= {"a", "b"}
        if "type" not in changed.fields:  # another type: the fields that type needs are named
            assert named & changed.fields, (out.reason, changed.how, changed.fields)


# --- (a) bytes ---------------------------------------------------------------------------------
@st.composite
def mutated_bytes(draw: st.DrawFn) -> bytes:
    raw = bytearray(encode(render(draw(valid_event()))))
    for _ in range(draw(st.integers(1, 4))):
        i = draw(st.integers(0, len(raw)))
        op = draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = draw(st.sampled_from([0x00, 0x22, 0x2C, 0x3A, 0x5B, 0x5D, 0x7B, 0x7D, 0x5C, 0x30, 0x39, 0x2D, 0x2E,
                                     0x65, 0x80, 0xC3, 0xED, 0xFF])) if draw(st.booleans()) else draw(
            st.integers(0, 255))
        if op == "insert" or not raw:
            raw[i:i] = bytes([byte])
        elif op == "flip":
            raw[min(i, len(raw) - 1)] = byte
        else:
            del raw[min(i, len(raw) - 1)]
    return bytes(raw)


@fuzz(1000)
@given(st.binary(max_size=300))
def test_arbitrary_bytes(raw: bytes) -> None:
    decode(raw)


@fuzz(500)
@given(mutated_bytes())
def test_valid_events_with_bytes_changed(raw: bytes) -> None:
    decode(raw)


# --- (b) JSON values ---------------------------------------------------------------------------
json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.integers(-(2**80), 2**80)
    | st.floats(allow_nan=True, allow_infinity=True) | texts,
    lambda children: st.lists(children, max_size=4) | st.dictionaries(texts, children, max_size=4),
    max_leaves=12)
event_shaped = st.dictionaries(st.sampled_from(EVENT_FIELDS), json_values, max_size=8).flatmap(
    lambda d: st.sampled_from(["match", "match_batch", "match_columns", "round", "round_result",
                               "round_completed"]).map(lambda t: {**d, "type": t}) | st.just(d))


@fuzz(400)
@given(json_values)
def test_arbitrary_json_values(value: Any) -> None:
    decode(encode(json.dumps(value, allow_nan=True)))


@fuzz(400)
@given(event_shaped)
def test_objects_with_the_field_names_and_arbitrary_values(value: dict[str, Any]) -> None:
    decode(encode(json.dumps(value, allow_nan=True, ensure_ascii=False)))


# --- (c) near-valid events ---------------------------------------------------------------------
@fuzz(800)
@given(changed_event())
def test_valid_events_with_one_thing_changed(changed: Changed) -> None:
    check_changed(changed)


@fuzz(150)
@given(valid_event(("match", "match_batch", "match_columns")))
def test_plain_valid_matches_take_the_fast_path(event: dict[str, Any]) -> None:
    """Valid matches with int times and numeric scores are all decoded by the hot path."""
    raw = encode(render(event))
    assert fast_matches(parse_json(raw)) is not None
    out = decode(raw)
    assert not isinstance(out, InvalidEvent), out


@fuzz(150)
@given(valid_event())
def test_valid_events_decode(event: dict[str, Any]) -> None:
    out = decode(encode(render(event)))
    assert not isinstance(out, InvalidEvent), out


# --- (d) input files ---------------------------------------------------------------------------
CSV_HEADER = ["date", "home_team", "away_team", "home_score", "away_score"]
CSV_CELLS = ["", " ", "a", "b", "1", "0", "-1", "1.5", "nan", "inf", "1e400", "x" * 129, "x" * 128, "2000-01-02",
             "1872-11-30", "2000-01-02T03:04:05.678", "2000-01-02T00:00:00+05:00", "2000-01-02T00:00:00.001",
             "0001-01-01", "9999-12-31T23:59:59.999999", "99999-01-01", "2000-13-01", "9" * 20, "9" * 5000,
             "123.456", "١٢٣", "²", "1.2.3", '"q"', '"a,b"', '"a\nb"', "a\x00b", "\udcff", "é", "😀", "{", "}:x"]


csv_names = st.text(st.characters(exclude_characters=',"', exclude_categories=("Cs", "Cc", "Zl", "Zp")),
                    min_size=1, max_size=8)
csv_pairs = st.tuples(csv_names, csv_names).map(_distinct)


@st.composite
def csv_file(draw: st.DrawFn) -> bytes:
    header = list(CSV_HEADER)
    if draw(st.integers(0, 9)) == 0:
        del header[draw(st.integers(0, len(header) - 1))]
    rows = []
    for _ in range(draw(st.integers(0, 4))):
        a, b = draw(csv_pairs)
        row = [draw(st.sampled_from(["2000-01-02", "1872-11-30", "1700000000000"])), a, b,
               str(draw(st.integers(0, 9))), str(draw(st.integers(0, 9)))]
        if draw(st.booleans()):
            i = draw(st.integers(0, len(row)))
            cell = draw(st.sampled_from(CSV_CELLS) | st.text(max_size=10))
            if i == len(row):
                row.append(cell)
            elif draw(st.integers(0, 5)) == 0:
                del row[i]
            else:
                row[i] = cell
        rows.append(row)
    text = ",".join(header) + "\n" + "".join(",".join(r) + "\n" for r in rows)
    return encode(text)


@st.composite
def contest_line(draw: st.DrawFn) -> Any:
    n = draw(st.integers(1, 4))
    players = draw(st.lists(names, min_size=n, max_size=n, unique=True))
    los = sorted(draw(st.lists(st.integers(0, n - 1), min_size=n, max_size=n)))
    contest: dict[str, Any] = {"name": draw(names | st.text(max_size=300) | st.integers()),
                               "time_seconds": draw(st.integers(-(10**9), 10**10) | st.floats(0, 1e10)),
                               "standings": [[p, lo, n - 1] for p, lo in zip(players, los, strict=True)]}
    contest.update(draw(st.fixed_dictionaries({}, optional={
        "weight": st.floats(1e-3, 10), "perf_ceiling": st.floats(0, 1e4), "id": st.text(max_size=300)})))
    if draw(st.booleans()):
        path = draw(st.sampled_from(list(_paths(contest))))
        parent = _at(contest, path[:-1])
        if draw(st.integers(0, 4)) == 0:
            del parent[path[-1]]
        else:
            parent[path[-1]] = draw(literals | st.sampled_from([True, False, 2**64 - 1, -1, n, 10**30]))
    return contest


@st.composite
def input_file(draw: st.DrawFn) -> tuple[str, str, bytes]:
    """(kind, suffix, content) of a small input file: event JSONL, contest JSONL or CSV."""
    kind = draw(st.sampled_from(["events", "contests", "csv"]))
    if kind == "csv":
        content, suffix = draw(csv_file()), ".csv"
    else:
        line = (valid_event() | changed_event().map(lambda c: c.event) if kind == "events"
                else contest_line())
        lines = [encode(render(draw(line))) for _ in range(draw(st.integers(1, 3)))]
        if draw(st.booleans()):
            lines.insert(draw(st.integers(0, len(lines))), draw(st.sampled_from([b"", b"  ", b"\r", b"\xef\xbb\xbf"])))
        content, suffix = b"\n".join(lines) + draw(st.sampled_from([b"\n", b"", b"\r\n"])), ".jsonl"
    if draw(st.integers(0, 3)) == 0:  # bytes changed
        i = draw(st.integers(0, max(0, len(content) - 1)))
        content = content[:i] + draw(st.sampled_from([b"\xff", b"\x00", b"\xed\xa0\x80", b"\n", b"\r", b","])) \
            + content[i + draw(st.integers(0, 1)):]
    compression = draw(st.sampled_from(["", "", ".gz", ".xz"]))
    if compression:
        content = gzip.compress(content) if compression == ".gz" else lzma.compress(content)
        if draw(st.booleans()):  # damaged: cut, or a byte changed
            i = draw(st.integers(0, len(content) - 1))
            content = content[:i] if draw(st.booleans()) else content[:i] + bytes([content[i] ^ 0x41]) + content[i + 1:]
    return kind, suffix + compression, content


def check_published(records: list[tuple[str, str, Any]]) -> None:
    """What ``mmr replay --broker`` would publish of these records, the service accepts."""
    from stream.service.config import from_env
    from stream.tools.publish import messages

    for _topic, _pool, raw, _n, _t in messages(records, from_env(), batch_size=3):
        out = decode(raw)
        assert not isinstance(out, InvalidEvent), out


@pytest.fixture(scope="module")
def file_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("fuzz_files")


@fuzz(150)
@given(file=input_file(), pool=st.one_of(st.none(), names, st.sampled_from(["", "x" * 129])))
def test_input_files(file_dir: Path, file: tuple[str, str, bytes], pool: str | None) -> None:
    kind, suffix, content = file
    path = file_dir / f"in{suffix}"
    path.write_bytes(content)
    try:
        records = list(read_records(path, pool))
    except InputError as exc:
        event(f"{kind}{suffix}: InputError")
        assert str(exc).startswith(f"{path}:"), str(exc)
        if pool is None or _name(pool):
            assert re.match(rf"{re.escape(str(path))}:\d+: ", str(exc)), str(exc)
        return
    assert pool is None or _name(pool)
    for where, etype, value in records:
        assert re.fullmatch(rf"{re.escape(str(path))}:\d+", where)
        for m in [value] if etype == "match" else value if etype in MATCH_LISTS else []:
            assert isinstance(m, MatchEvent) and _name(m.pool) and _name(m.a) and _name(m.b) and m.a != m.b
            assert _int64(m.time) and type(m.score) is float and 0 <= m.score <= 1 and _name(m.event_id, 256)
        if etype == "round":
            assert _name(value.round_id, 256) and _name(value.event_id, 256) and _int64(value.time)
            assert all(map(_name, value.players)) and len(set(value.players)) == len(value.players)
    event(f"{kind}{suffix}: " + ("no records" if not records else "records"))
    assume(records)
    check_published(records)


# --- big messages ------------------------------------------------------------------------------
def _big(kind: str, n: int) -> dict[str, Any]:
    items = [{"event_id": f"e{i}", "time": i, "a": f"p{i}", "b": f"q{i}", "score": (i % 3) / 2} for i in range(n)]
    if kind == "match_batch":
        return {"type": kind, "pool": "p", "matches": items}
    if kind == "match_columns":
        columns = {k: [m[k] for m in items] for k in ("event_id", "time", "a", "b", "score")}
        return {"type": kind, "pool": "p", **columns}
    return {"type": "round", "event_id": "r", "pool": "p", "round_id": "r", "time": 1,
            "standings": [{"player": f"p{i}", "rank": i // 7 + 1} for i in range(n)]}


_HOLE = "\x00changed\x00"


@pytest.mark.parametrize(("kind", "field", "literal"), [
    ("match_batch", None, ""), ("match_columns", None, ""), ("round", None, ""),
    ("match_batch", "time", "-9223372036854775809"), ("match_columns", "time", "1.5"),
    ("match_batch", "score", "1.0000001"), ("match_columns", "a", '"' + "x" * 129 + '"'),
    ("round", "rank", "0"), ("round", "player", '"p0"'), ("match_columns", "event_id", "null"),
    ("match_batch", "a", '"q49999"'), ("match_columns", "b", '"p49999"')])
def test_the_last_of_50k_items_changed(kind: str, field: str | None, literal: str) -> None:
    """A 50,000-item message with its last item changed is rejected naming that item (or, unchanged,
    decoded by the fast path for matches)."""
    n = 50_000
    event = _big(kind, n)  # match 49999 is p49999 - q49999
    if field is not None:
        key = {"match_batch": "matches", "round": "standings"}.get(kind)
        if key is not None:
            event[key][-1][field] = _HOLE
        else:
            event[field][-1] = _HOLE
    raw = orjson.dumps(event).replace(orjson.dumps(_HOLE), literal.encode())
    out = decode(raw)
    if field is None:
        assert not isinstance(out, InvalidEvent)
        return
    assert isinstance(out, InvalidEvent), field
    assert re.search(rf"\b{n - 1}\b", out.reason) or "twice" in out.reason, out.reason


# --- (e) chunked reading: the same records as line by line ----------------------------------------
def _records_or_error(path: Path, pool: str | None, chunks: bool) -> tuple[list[Any], str | None]:
    """Every record (a ``MatchRun`` expanded into its ``match`` records, with their lines)
    until the first error, and that error's message."""
    out: list[Any] = []
    try:
        for where, etype, value in read_records(path, pool, chunks=chunks):
            if etype == MATCH_RUN:
                out += [(value.where(i), "match", m) for i, m in enumerate(value.events())]
            else:
                out.append((where, etype, value if etype != "round" else (value.event_id, value.players)))
    except InputError as exc:
        return out, str(exc)
    return out, None


@st.composite
def match_lines(draw: st.DrawFn) -> bytes:
    """Event JSONL: mostly valid plain matches of one or two pools, some lines changed, blank,
    or events of other types."""
    pools = draw(st.sampled_from([["p"], ["p", "q"]]))
    lines = []
    for _ in range(draw(st.integers(1, 12))):
        kind = draw(st.integers(0, 9))
        if kind < 6:
            m = draw(valid_event(("match",)))
            m["pool"] = draw(st.sampled_from(pools))
            lines.append(encode(render(m)))
        elif kind < 8:
            lines.append(encode(render(draw(changed_event()).event)))
        elif kind == 8:
            lines.append(draw(st.sampled_from([b"", b"  ", b"{", b"[1]"])))
        else:
            lines.append(encode(render(draw(valid_event()))))
    return b"\n".join(lines) + b"\n"


@fuzz(300)
@given(content=match_lines(), pool=st.one_of(st.none(), st.just("z")), block=st.integers(1, 5))
@example(content=b'{"type":[],"pool":"0","event_id":"0","time":0,"a":"0","b":"0","score":0}\n', pool=None,
         block=1)  # a type that is no string (unhashable) is an invalid line, not a crash of the chunked path
def test_chunked_reading_gives_the_records_and_errors_of_line_by_line(
        file_dir: Path, content: bytes, pool: str | None, block: int) -> None:
    """``read_records(..., chunks=True)`` (runs of plain matches checked as columns, blocks of
    ``block`` lines) gives the same matches with the same "file:line", and stops with the
    same error at the same line, as reading line by line."""
    import stream.events.inputs as inputs

    path = file_dir / "chunked.jsonl"
    path.write_bytes(content)
    old = inputs.CHUNK_LINES
    inputs.CHUNK_LINES = block
    try:
        chunked = _records_or_error(path, pool, True)
    finally:
        inputs.CHUNK_LINES = old
    plain = _records_or_error(path, pool, False)
    assert chunked == plain
    event("error" if plain[1] else "no error")
