"""Checking an event: its JSON Schema and the rules a schema cannot state. Pure Python.

The schemas (``stream.events.schema``, the wire contract) are compiled once by fastjsonschema. The
rules a schema cannot express (a player twice in a round or playing themself, columns of different
lengths, an integer written as a float beyond 2^53) and the worker's own limits (``check_pool``,
``check_participants``) are checked here too, so a bad event is rejected before anything is applied.
``check_event`` is what every decoder runs, and all a game server's client needs (``stream.client``):
without numpy or numba, what it accepts the worker accepts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Collection
from functools import cache
from typing import Any, NamedTuple

import fastjsonschema
import orjson

from stream.errors import InputError
from stream.events.model import MatchEvent
from stream.events.schema import limits, schema

INPUT_TYPES = ("match", "match_batch", "match_columns", "round", "round_result", "round_completed")
#: event types that carry many matches (decoded to a list of MatchEvent)
MATCH_LISTS = ("match_batch", "match_columns")
#: the five columns every ``match_columns`` event has, in the order of MatchBatch.add's fields (an
#: optional sixth, ``neutral``, is read where one is)
COLUMNS = ("event_id", "time", "a", "b", "score")
ALL_TYPES = (*INPUT_TYPES, "rating")
#: ``maxLength`` of ``event_id`` in the schemas
MAX_EVENT_ID_LENGTH = limits().event_id_length
#: integral floats are integers to JSON Schema, but exact only below 2^53 in magnitude; and orjson
#: reads a JSON integer beyond 64 bits as a float (``-9223372036854775809`` arrives as -2^63)
MAX_EXACT_FLOAT = 2**53
#: how much of an unexpected value a reason quotes (reasons go into dead letters and logs)
_QUOTE_CHARS = 40
_INT = {int}


class InvalidEvent(InputError, ValueError):
    """An event that cannot be applied. ``reason`` is short and names the field."""

    def __init__(self, reason: str, event_id: str | None = None) -> None:
        self.reason = reason
        self.event_id = event_id
        super().__init__(f"event {event_id}: {reason}" if event_id else reason)


@cache
def validator(event_type: str) -> Callable[[Any], Any]:
    """The compiled validator of one event type."""
    return fastjsonschema.compile(schema(event_type))


@cache
def _round_columns_validator() -> Callable[[Any], Any]:
    """The validator of a ``round`` in the column form: the schema's column branch made top-level, so that
    a bad player or rank is named by its field (``players.3``), not as "no branch of oneOf matched"."""
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


def first_repeat(players: list[str]) -> str:
    """The first item of ``players`` that appeared before it (the caller knows there is one)."""
    seen: set[str] = set()
    return next(p for p in players if p in seen or seen.add(p))  # type: ignore[func-returns-value]


class RoundFields(NamedTuple):
    """A checked ``round``'s values as plain lists (``round_fields``): what ``RoundEvent`` holds as arrays."""

    players: list[str]
    ranks: list[int]  #: a player's rank (in a team round: their team's rank)
    time: int
    weight: float
    perf_ceiling: float
    team_of: list[int] | None = None  #: a team round: each player's team (0-based) ...
    team_ranks: list[int] | None = None  #: ... each team's rank ...
    weights: list[float] | None = None  #: ... and the part of the round each player played
    sides: tuple[str | None, ...] | None = None  #: ... and each team's ``side`` (None: no team has one)


def round_fields(obj: dict[str, Any]) -> RoundFields:
    """The values of a schema-valid ``round``, checked: players and ranks of the same length, no player
    twice (a team round: nor in two teams), ``weights`` parallel to a team's players, exact integers."""
    eid = obj["event_id"]
    team_of: list[int] | None = None
    team_ranks: list[int] | None = None
    weights: list[float] | None = None
    sides: tuple[str | None, ...] | None = None
    if "teams" in obj:
        players, team_of, team_ranks, weights = _teams(obj["teams"], eid)
        labels = tuple(team.get("side") for team in obj["teams"])
        sides = None if all(x is None for x in labels) else labels
        if len(set(players)) != len(players):
            raise InvalidEvent(f"field teams: player {first_repeat(players)!r} appears twice in the round", eid)
        ranks = [team_ranks[t] for t in team_of]
    else:
        if "standings" in obj:
            standings = obj["standings"]
            players = [s["player"] for s in standings]
            ranks = [s["rank"] for s in standings]
            field, rank_field = "standings", "standings.{}.rank"
        else:  # the column form
            players, ranks = obj["players"], obj["ranks"]
            if len(ranks) != len(players):
                raise InvalidEvent(f"field ranks: {len(ranks)} ranks for {len(players)} players", eid)
            field, rank_field = "players", "ranks.{}"
        if len(set(players)) != len(players):
            raise InvalidEvent(f"field {field}: player {first_repeat(players)!r} appears twice in the round", eid)
        if set(map(type, ranks)) != _INT:
            ranks = [exact_int(r, rank_field.format(i), eid) for i, r in enumerate(ranks)]
    return RoundFields(players=players, ranks=ranks, time=exact_int(obj["time"], "time", eid),
                       weight=_finite(obj.get("weight", 1.0), "weight", eid),
                       perf_ceiling=float(obj.get("perf_ceiling", math.inf)),
                       team_of=team_of, team_ranks=team_ranks, weights=weights, sides=sides)


def _teams(teams: list[dict[str, Any]], eid: str) -> tuple[list[str], list[int], list[int], list[float]]:
    """A team round's members (team by team, in the event's order), each one's team, each team's rank
    and each member's weight (1.0 where the event gives none); an empty team is refused by the schema."""
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
    return players, team_of, team_ranks, weights


def to_match(obj: dict[str, Any], pool: str | None = None, field: str = "{1}", index: int = 0) -> MatchEvent:
    """A validated ``match`` (or the ``index``-th match of a ``match_batch`` or ``match_columns``)
    → MatchEvent. A reason names a field ``f`` as ``field.format(index, f)``: "matches.{0}.{1}"
    in a batch, "{1}.{0}" in columns (formatted only then: this runs once per match)."""
    eid = obj["event_id"]
    if obj["a"] == obj["b"]:
        raise InvalidEvent(f"field {field.format(index, 'b')}: player {obj['a']!r} cannot play themself", eid)
    time = obj["time"]
    return MatchEvent(event_id=eid, pool=pool if pool is not None else obj["pool"],
                      time=time if type(time) is int else exact_int(time, field.format(index, "time"), eid),
                      a=obj["a"], b=obj["b"], score=float(obj["score"]), neutral=obj.get("neutral", False))


def check_event(obj: dict[str, Any]) -> tuple[str, Any]:
    """Validate one parsed event: its schema and the rules a schema cannot state.

    Returns ``(type, value)``: ``RoundFields`` for a round, a MatchEvent, a list of MatchEvent for
    a ``match_batch`` or ``match_columns``, or the validated dict for ``round_result``/
    ``round_completed`` (their integers exact, their real-valued fields floats)."""
    etype = check_schema(obj)
    if etype == "round":
        return etype, round_fields(obj)
    if etype == "match":
        return etype, to_match(obj)
    if etype == "match_batch":
        return etype, [to_match(m, obj["pool"], "matches.{0}.{1}", i) for i, m in enumerate(obj["matches"])]
    if etype == "match_columns":
        n = len(obj["event_id"])
        cols = (*COLUMNS, "neutral") if "neutral" in obj else COLUMNS
        for col in cols[1:]:
            if len(obj[col]) != n:
                raise InvalidEvent(f"field {col}: {len(obj[col])} items, but event_id has {n}")
        rows = zip(*(obj[col] for col in cols), strict=True)
        return etype, [to_match(dict(zip(cols, row, strict=True)), obj["pool"], "{1}.{0}", i)
                       for i, row in enumerate(rows)]
    eid = obj["event_id"]
    exact: dict[str, Any] = {k: exact_int(obj[k], k, eid)
                             for k in ("time", "rank" if etype == "round_result" else "participants")}
    # the completion's real-valued fields as the round will use them (an integer literal
    # such as 2**63 - 1 is not carried on as an int that no float equals)
    exact.update((k, float(obj[k])) for k in ("weight", "perf_ceiling") if k in obj)
    return etype, {**obj, **exact}


def check_pool(pool: str, pools: Collection[str], event_id: str | None) -> None:
    """Refuse a pool the worker is not configured for (``pools`` empty: every pool is)."""
    if pools and pool not in pools:
        raise InvalidEvent(f"unknown pool {pool!r}", event_id)


def check_participants(etype: str, n: int, teams: bool, most: int, event_id: str | None) -> None:
    """Refuse a round (or a ``round_completed``) of more than ``most`` participants (``MMR_MAX_PARTICIPANTS``)."""
    if n <= most:
        return
    if etype == "round_completed":
        raise InvalidEvent(f"field participants: {n} exceed the maximum {most}", event_id)
    raise InvalidEvent(f"field {'teams' if teams else 'standings'}: {n} participants exceed the maximum {most}",
                       event_id)
