"""Schema validation and decoding of incoming events.

The JSON Schemas in ``stream/schemas/`` (package data; ``schemas/`` at the top of the
repository points there) are the wire contract; they are compiled once
(fastjsonschema generates Python code per schema, ~10x faster than interpreting) and
every event, from a file or from Kafka, goes through ``decode_event``. Rules a schema
cannot express (a player twice in one round, a player playing themself) are checked
here too, so a bad event is rejected *before* anything is applied.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from functools import cache
from importlib import resources
from operator import eq, itemgetter
from typing import Any

import fastjsonschema
import numpy as np
import orjson

from stream.events.model import MAX_INT64, MIN_INT64, MatchBatch, MatchEvent, RoundEvent, Teams
from stream.ratings.base import IntArray

INPUT_TYPES = ("match", "match_batch", "match_columns", "round", "round_result", "round_completed")
#: event types that carry many matches (decoded to a list of MatchEvent)
MATCH_LISTS = ("match_batch", "match_columns")
#: the five columns of a ``match_columns`` event, in the order of MatchBatch.add's fields
COLUMNS = ("event_id", "time", "a", "b", "score")
ALL_TYPES = (*INPUT_TYPES, "rating")
#: ``maxLength`` of ``event_id`` in ``schemas/``
MAX_EVENT_ID_LENGTH = 256
#: integral floats are integers to JSON Schema, but exact only below 2^53 in magnitude; and orjson
#: reads a JSON integer beyond 64 bits as a float (``-9223372036854775809`` arrives as -2^63)
MAX_EXACT_FLOAT = 2**53
#: how much of an unexpected value a reason quotes (reasons go into dead letters and logs)
_QUOTE_CHARS = 40


class InvalidEvent(ValueError):
    """An event that cannot be applied. ``reason`` is short and names the field."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        self.reason = reason
        self.event_id = event_id
        super().__init__(f"event {event_id}: {reason}" if event_id else reason)


def schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of one event type, read from the installed package."""
    text = resources.files("stream").joinpath("schemas", f"{event_type}.json").read_bytes()
    loaded: dict[str, Any] = orjson.loads(text)
    return loaded


@cache
def validator(event_type: str) -> Callable[[Any], Any]:
    """The compiled validator of one event type."""
    return fastjsonschema.compile(schema(event_type))


@cache
def _round_columns_validator() -> Callable[[Any], Any]:
    """The validator of a ``round`` in the column form: the schema's column branch made its
    top-level form, so that a bad player or rank is named by its field (``players.3``), not only
    as "no branch of oneOf matched"."""
    sch = schema("round")
    branch = next(b for b in sch.pop("oneOf") if "players" in b.get("properties", {}))
    sch["properties"] = {**sch["properties"], **branch["properties"]}
    sch["required"] = [*sch["required"], *branch["required"]]
    return fastjsonschema.compile(sch)


def parse_json(raw: bytes | str) -> dict[str, Any]:
    """orjson decode; NaN/Infinity and out-of-range numbers are rejected by orjson itself."""
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise InvalidEvent(f"bad JSON: {exc}") from None
    if not isinstance(obj, dict):
        raise InvalidEvent("an event must be a JSON object")
    return obj


def _quote(value: Any) -> str:
    """``repr(value)``, cut to ``_QUOTE_CHARS`` characters."""
    text = repr(value)
    return text if len(text) <= _QUOTE_CHARS else f"{text[:_QUOTE_CHARS]}..."


def _valid_event_id(obj: dict[str, Any]) -> str | None:
    """The event's ``event_id`` when it is a valid one (what a reason may carry), else None."""
    eid = obj.get("event_id")
    return eid if type(eid) is str and 0 < len(eid) <= MAX_EVENT_ID_LENGTH else None


def check_schema(obj: dict[str, Any]) -> str:
    """Validate against the schema named by ``type``; returns the type."""
    etype = obj.get("type")
    event_id = _valid_event_id(obj)
    if etype not in INPUT_TYPES:
        raise InvalidEvent(f"field type: unknown event type {_quote(etype)}", event_id)
    forms = ("standings" in obj) + ("teams" in obj)  # a round's third form, its columns, only without both
    columns = etype == "round" and forms == 0
    if etype == "round" and (forms > 1 or (columns and not ("players" in obj and "ranks" in obj))):
        raise InvalidEvent("field standings: a round carries exactly one of standings, teams, or players "
                           "with ranks", event_id)
    try:
        (_round_columns_validator() if columns else validator(etype))(obj)
    except fastjsonschema.JsonSchemaValueException as exc:
        field = ".".join(str(p) for p in exc.path[1:]) or "event"
        raise InvalidEvent(f"field {field}: {exc.message.replace('data.', '')}", event_id) from None
    return str(etype)


def exact_int(value: int | float, what: str, event_id: str | None) -> int:
    """A schema-valid ``integer`` as an int; rejects floats that may not be the number written."""
    if type(value) is int:
        return value
    if not -MAX_EXACT_FLOAT < value < MAX_EXACT_FLOAT:
        raise InvalidEvent(f"field {what}: {value!r} is not an exact integer (a float of magnitude 2^53 or "
                           "more: an integer beyond 64 bits, or written with a fraction or an exponent)", event_id)
    return int(value)


def _finite(value: float, what: str, event_id: str) -> float:
    if not math.isfinite(value):
        raise InvalidEvent(f"field {what}: not a finite number", event_id)
    return float(value)


def _first_repeat(players: list[str]) -> str:
    seen: set[str] = set()
    return next(p for p in players if p in seen or seen.add(p))  # type: ignore[func-returns-value]


def to_round(obj: dict[str, Any]) -> RoundEvent:
    """A validated ``round`` dict → RoundEvent (rejects a player listed twice)."""
    if "teams" in obj:
        return to_team_round(obj)
    eid = obj["event_id"]
    if "standings" in obj:
        standings = obj["standings"]
        players = [s["player"] for s in standings]
        ranks_in = [s["rank"] for s in standings]
        field, rank_field = "standings", "standings.{}.rank"
    else:  # the column form
        players, ranks_in = obj["players"], obj["ranks"]
        if len(ranks_in) != len(players):
            raise InvalidEvent(f"field ranks: {len(ranks_in)} ranks for {len(players)} players", eid)
        field, rank_field = "players", "ranks.{}"
    if len(set(players)) != len(players):
        raise InvalidEvent(f"field {field}: player {_first_repeat(players)!r} appears twice in the round", eid)
    if set(map(type, ranks_in)) != _INT:
        ranks_in = [exact_int(r, rank_field.format(i), eid) for i, r in enumerate(ranks_in)]
    return _round_event(obj, players, np.array(ranks_in, dtype=np.int64))


def _round_event(obj: dict[str, Any], players: list[str], ranks: IntArray, teams: Teams | None = None) -> RoundEvent:
    """The RoundEvent of a validated ``round`` dict whose players and ranks (and teams) are read already:
    the fields every round has, checked the same way for a round of players and one of teams."""
    eid = obj["event_id"]
    return RoundEvent(
        event_id=eid,
        pool=obj["pool"],
        round_id=obj["round_id"],
        time=exact_int(obj["time"], "time", eid),
        players=players,
        ranks=ranks,
        weight=_finite(obj.get("weight", 1.0), "weight", eid),
        perf_ceiling=float(obj.get("perf_ceiling", math.inf)),
        teams=teams,
    )


def to_team_round(obj: dict[str, Any]) -> RoundEvent:
    """A validated team ``round`` dict → RoundEvent with ``teams``: every member in ``players``
    (team by team, members in the event's order), each with their team's rank.

    Rejects a player in two teams (or twice in one) and ``weights`` not parallel to ``players``;
    an empty team is refused by the schema (``minItems``)."""
    eid = obj["event_id"]
    teams = obj["teams"]
    players: list[str] = []
    team_of: list[int] = []
    weights: list[float] = []
    team_ranks: list[int] = []
    for t, team in enumerate(teams):
        members = team["players"]
        players += members
        team_of += [t] * len(members)
        w = team.get("weights")
        if w is None:
            weights += [1.0] * len(members)
        elif len(w) != len(members):
            raise InvalidEvent(f"field teams.{t}.weights: {len(w)} weights for {len(members)} players", eid)
        else:
            weights += map(float, w)
        team_ranks.append(exact_int(team["rank"], f"teams.{t}.rank", eid))
    if len(set(players)) != len(players):
        dup = _first_repeat(players)
        raise InvalidEvent(f"field teams: player {dup!r} appears twice in the round", eid)
    ranks = np.array(team_ranks, dtype=np.int64)
    team_index = np.array(team_of, dtype=np.int64)
    return _round_event(obj, players, ranks[team_index],
                        Teams(team_index, ranks, np.array(weights, dtype=np.float64)))


def to_match(obj: dict[str, Any], pool: str | None = None, field: str = "{1}", index: int = 0) -> MatchEvent:
    """A validated ``match`` (or the ``index``-th match of a ``match_batch`` or ``match_columns``)
    → MatchEvent. A reason names a field ``f`` as ``field.format(index, f)``: "matches.{0}.{1}"
    in a batch, "{1}.{0}" in columns (formatted only then: this runs once per match)."""
    eid = obj["event_id"]
    if obj["a"] == obj["b"]:
        raise InvalidEvent(f"field {field.format(index, 'b')}: player {obj['a']!r} cannot play themself", eid)
    time = obj["time"]
    return MatchEvent(
        event_id=eid,
        pool=pool if pool is not None else obj["pool"],
        time=time if type(time) is int else exact_int(time, field.format(index, "time"), eid),
        a=obj["a"],
        b=obj["b"],
        score=float(obj["score"]),
    )


def decode_event(obj: dict[str, Any]) -> tuple[str, Any]:
    """Validate one parsed event and decode what can be decoded on its own.

    Returns ``(type, value)``: a RoundEvent, a MatchEvent, a list of MatchEvent for a
    ``match_batch`` or ``match_columns``, or the validated dict for ``round_result``/
    ``round_completed`` (those are assembled into rounds by ``stream.events.rounds``).
    """
    etype = check_schema(obj)
    if etype == "round":
        return etype, to_round(obj)
    if etype == "match":
        return etype, to_match(obj)
    if etype == "match_batch":
        return etype, [to_match(m, obj["pool"], "matches.{0}.{1}", i) for i, m in enumerate(obj["matches"])]
    if etype == "match_columns":
        n = len(obj["event_id"])
        for col in COLUMNS[1:]:
            if len(obj[col]) != n:
                raise InvalidEvent(f"field {col}: {len(obj[col])} items, but event_id has {n}")
        rows = zip(*(obj[col] for col in COLUMNS), strict=True)
        return etype, [to_match(dict(zip(COLUMNS, row, strict=True)), obj["pool"], "{1}.{0}", i)
                       for i, row in enumerate(rows)]
    eid = obj["event_id"]
    exact: dict[str, Any] = {k: exact_int(obj[k], k, eid)
                             for k in ("time", "rank" if etype == "round_result" else "participants")}
    # the completion's real-valued fields as the round will use them (an integer literal
    # such as 2**63 - 1 is not carried on as an int that no float equals)
    exact.update((k, float(obj[k])) for k in ("weight", "perf_ceiling") if k in obj)
    return etype, {**obj, **exact}


def _plain_match(m: Any) -> bool:
    """True when ``m`` is certainly a valid match item: exact built-in types, bounds of the schema.

    A strict subset of what the schema accepts (no bools, no integral floats for ``time``, no
    subclasses), so a True here means the full validator would accept it too.
    """
    if type(m) is not dict:
        return False
    eid, t, a, b, sc = m.get("event_id"), m.get("time"), m.get("a"), m.get("b"), m.get("score")
    return (type(eid) is str and 0 < len(eid) <= 256 and type(t) is int and MIN_INT64 <= t <= MAX_INT64
            and type(a) is str and 0 < len(a) <= 128 and type(b) is str and 0 < len(b) <= 128 and a != b
            and (type(sc) is float or type(sc) is int) and 0 <= sc <= 1)


def fast_matches(obj: dict[str, Any]) -> MatchBatch | None:
    """A ``match``, ``match_batch`` or ``match_columns`` decoded straight into columns, or None:
    use ``decode_event``.

    The hot path of the service. It only accepts events every check of ``decode_event``
    accepts, with the same decoded values; anything unusual (including every invalid event)
    returns None and goes through the full validator, so dead-letter reasons are unchanged.
    Checked column by column (``_plain_columns``): C-level ``map`` passes instead of a
    Python call per match (``match_batch``: ~0.7 µs a match instead of ~0.9 µs; ``match_columns``,
    which has no object per match to parse or pick apart: ~0.4 µs).
    """
    etype = obj.get("type")
    pool = obj.get("pool")
    if type(pool) is not str or not 0 < len(pool) <= 128:
        return None
    if etype == "match":
        if not _plain_match(obj):
            return None
        return MatchBatch(pool, [obj["event_id"]], [obj["a"]], [obj["b"]], [float(obj["score"])], [obj["time"]])
    cols: list[Any] | None
    if etype == "match_columns":
        cols = [obj.get(k) for k in COLUMNS]
        if set(map(type, cols)) != _LIST or not cols[0] or len(set(map(len, cols))) != 1:
            return None
    elif etype == "match_batch":
        cols = _rows_to_columns(obj.get("matches"))
        if cols is None:
            return None
    else:
        return None
    ids, times, a, b, scores = cols
    score_types = set(map(type, scores))
    if score_types not in _NUMBER or not _plain_columns(ids, times, a, b, scores):
        return None
    floats = scores if score_types == _FLOAT else list(map(float, scores))
    return MatchBatch(pool, ids, a, b, floats, times)


def plain_match_rows(objs: list[Any]) -> list[Any] | None:
    """The five columns (``COLUMNS``; scores as floats) of parsed ``match_batch`` items or
    ``match`` events that are each certainly valid (``_plain_match``, checked column by
    column), or None: something needs the full validator."""
    cols = _rows_to_columns(objs)
    if cols is None:
        return None
    ids, times, a, b, scores = cols
    score_types = set(map(type, scores))
    if score_types not in _NUMBER or not _plain_columns(ids, times, a, b, scores):
        return None
    if score_types != _FLOAT:
        cols[4] = list(map(float, scores))
    return cols


def _rows_to_columns(ms: Any) -> list[Any] | None:
    """The five columns of a ``match_batch``'s items (None: not a plain list of dicts with them)."""
    if type(ms) is not list or not ms or set(map(type, ms)) != _DICT:
        return None
    try:
        return [list(map(itemgetter(k), ms)) for k in COLUMNS]
    except KeyError:
        return None


_STR = {str}
_LIST = {list}
_DICT = {dict}
_FLOAT = {float}
_INT = {int}
_NUMBER = ({float}, {int}, {float, int})


def _plain_columns(ids: list[Any], times: list[Any], a: list[Any], b: list[Any], scores: list[Any]) -> bool:
    """``_plain_match`` of every item, on columns (the caller checked that every score is an
    exact float or int): exact types first (so ``len`` and the comparisons below only meet
    str, int and float), then the schema's bounds."""
    if set(map(type, ids)) != _STR or set(map(type, a)) != _STR or set(map(type, b)) != _STR:
        return False
    if set(map(type, times)) != _INT:
        return False
    id_lens, a_lens, b_lens = list(map(len, ids)), list(map(len, a)), list(map(len, b))
    return (min(id_lens) > 0 and max(id_lens) <= 256 and min(a_lens) > 0 and max(a_lens) <= 128
            and min(b_lens) > 0 and max(b_lens) <= 128 and min(times) >= MIN_INT64 and max(times) <= MAX_INT64
            and min(scores) >= 0 and max(scores) <= 1 and not any(map(eq, a, b)))


def fast_round(obj: dict[str, Any]) -> RoundEvent | None:
    """A ``round`` with standings (or in the column form, ``players`` and ``ranks``) decoded by
    columns, or None: use ``decode_event``.

    The worker's hot path for rounds. The generated validator walks a round's standings one
    item at a time (~35 µs per 1,000 players, more than the Elo-MMR kernel spends on them);
    here the players and ranks are picked out and checked column by column with C-level
    ``map`` passes. It only accepts rounds every check of ``decode_event`` accepts, with the
    same decoded values; anything unusual (team rounds, integral floats, a player listed twice,
    every invalid round) returns None and goes through the full validator, so dead-letter
    reasons are unchanged."""
    if not _plain_round(obj):
        return None
    standings = obj.get("standings")
    if standings is None:  # the column form (``players``, ``ranks``)
        players, ranks_in = obj.get("players"), obj.get("ranks")
        if not (type(players) is list and type(ranks_in) is list and players and len(players) == len(ranks_in)):
            return None
    elif not (type(standings) is list and standings and set(map(type, standings)) == _DICT):
        return None
    else:
        try:
            players = list(map(itemgetter("player"), standings))
            ranks_in = list(map(itemgetter("rank"), standings))
        except KeyError:
            return None
    if set(map(type, players)) != _STR or set(map(type, ranks_in)) != _INT:
        return None
    try:  # ints all: numpy refuses one beyond int64, and finds the least in C
        ranks = np.array(ranks_in, dtype=np.int64)
    except OverflowError:
        return None
    if int(ranks.min()) < 1:
        return None
    return _plain_round_event(obj, players, ranks)


def round_of_columns(obj: dict[str, Any], players: list[str], ranks: IntArray) -> RoundEvent | None:
    """``fast_round`` of a round whose standings were read as columns (``players``, ``ranks``) from its
    bytes, ``obj`` being the rest of it (``stream.events._standings_scan.scan_round``): the same checks
    of the same values, so the same event or None."""
    if not _plain_round(obj) or not players or int(ranks.min()) < 1:
        return None
    return _plain_round_event(obj, players, ranks)


def _plain_round(obj: dict[str, Any]) -> bool:
    """A round's own fields (not its standings) are of the plain form ``fast_round`` takes."""
    if obj.get("type") != "round" or "teams" in obj:
        return False
    eid, pool, rid, t = (obj.get(k) for k in ("event_id", "pool", "round_id", "time"))
    return (type(eid) is str and 0 < len(eid) <= MAX_EVENT_ID_LENGTH and type(pool) is str
            and 0 < len(pool) <= 128 and type(rid) is str and 0 < len(rid) <= 256
            and type(t) is int and MIN_INT64 <= t <= MAX_INT64)


def _plain_round_event(obj: dict[str, Any], players: list[str], ranks: IntArray) -> RoundEvent | None:
    lens = np.fromiter(map(len, players), dtype=np.int64, count=len(players))
    if int(lens.min()) < 1 or int(lens.max()) > 128 or len(set(players)) != len(players):
        return None
    weight = obj.get("weight", 1.0)
    ceiling = obj.get("perf_ceiling", math.inf)
    if type(weight) not in (float, int) or not (0 < weight < math.inf) or type(ceiling) not in (float, int):
        return None
    return RoundEvent(event_id=obj["event_id"], pool=obj["pool"], round_id=obj["round_id"], time=obj["time"],
                      players=players, ranks=ranks, weight=float(weight), perf_ceiling=float(ceiling))
