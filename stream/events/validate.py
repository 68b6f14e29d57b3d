"""Decoding of incoming events into the engine's records (``stream.events.model``), after the checks of
``stream.events.check``. The fast paths (``fast_matches``, ``fast_round``) take only events every check
accepts, with the same values, and leave anything unusual (every invalid event included) to
``decode_event``, so dead-letter reasons are the same; their bounds are the schemas' (``limits``).
"""

from __future__ import annotations

import math
import operator
from itertools import repeat
from operator import eq, itemgetter
from typing import Any

import numpy as np

from stream.events.check import (
    ALL_TYPES,
    COLUMNS,
    INPUT_TYPES,
    MATCH_LISTS,
    InvalidEvent,
    RoundFields,
    check_event,
    parse_json,
    validator,
)
from stream.events.model import MatchBatch, RoundEvent, Teams
from stream.events.schema import limits, schema
from stream.ratings.base import IntArray

__all__ = ["ALL_TYPES", "COLUMNS", "INPUT_TYPES", "MATCH_LISTS", "InvalidEvent", "decode_event", "fast_matches",
           "fast_round", "parse_json", "plain_match_rows", "schema", "validator"]

_LIMITS = limits()
#: the schemas' bounds the fast paths check by hand
_ID, _POOL, _PLAYER, _ROUND_ID = _LIMITS.event_id_length, _LIMITS.pool_length, _LIMITS.player_length, \
    _LIMITS.round_id_length
_MIN_TIME, _MAX_TIME = _LIMITS.min_time, _LIMITS.max_time
_MIN_SCORE, _MAX_SCORE = _LIMITS.min_score, _LIMITS.max_score


def round_event(obj: dict[str, Any], f: RoundFields) -> RoundEvent:
    """The RoundEvent of a checked ``round`` (``obj``) from its values (``f``): ranks as arrays."""
    teams = None
    if f.team_of is None:
        ranks = np.array(f.ranks, dtype=np.int64)
    else:
        assert f.team_ranks is not None and f.weights is not None
        team_ranks = np.array(f.team_ranks, dtype=np.int64)
        team_index = np.array(f.team_of, dtype=np.int64)
        ranks = team_ranks[team_index]
        teams = Teams(team_of=team_index, ranks=team_ranks, weights=np.array(f.weights, dtype=np.float64),
                      sides=f.sides)
    return RoundEvent(event_id=obj["event_id"], pool=obj["pool"], round_id=obj["round_id"], time=f.time,
                      players=f.players, ranks=ranks, weight=f.weight, perf_ceiling=f.perf_ceiling, teams=teams)


def decode_event(obj: dict[str, Any]) -> tuple[str, Any]:
    """Validate one parsed event (``check.check_event``): ``(type, value)``, a RoundEvent, a MatchEvent,
    a list of MatchEvent, or the validated dict of a ``round_result``/``round_completed``."""
    etype, value = check_event(obj)
    if etype == "round":
        return etype, round_event(obj, value)
    return etype, value


def _plain_match(m: Any) -> bool:
    """True when ``m`` is certainly a valid match item: exact built-in types (no bools, no integral floats
    for ``time``, no subclasses), bounds of the schema; a strict subset of what the schema accepts."""
    if type(m) is not dict:
        return False
    eid, t, a, b, sc = m.get("event_id"), m.get("time"), m.get("a"), m.get("b"), m.get("score")
    return (type(m.get("neutral", False)) is bool
            and type(eid) is str and 0 < len(eid) <= _ID and type(t) is int and _MIN_TIME <= t <= _MAX_TIME
            and type(a) is str and 0 < len(a) <= _PLAYER and type(b) is str and 0 < len(b) <= _PLAYER and a != b
            and (type(sc) is float or type(sc) is int) and _MIN_SCORE <= sc <= _MAX_SCORE)


def fast_matches(obj: dict[str, Any]) -> MatchBatch | None:
    """A ``match``, ``match_batch`` or ``match_columns`` decoded straight into columns, or None: use
    ``decode_event``. The service's hot path: checked column by column (``_plain_columns``), C-level
    ``map`` passes instead of a Python call per match."""
    etype = obj.get("type")
    pool = obj.get("pool")
    if type(pool) is not str or not 0 < len(pool) <= _POOL:
        return None
    if etype == "match":
        if not _plain_match(obj):
            return None
        return MatchBatch(pool=pool, event_ids=[obj["event_id"]], a=[obj["a"]], b=[obj["b"]],
                          scores=[float(obj["score"])], times=[obj["time"]],
                          neutral=[True] if obj.get("neutral") else None)
    cols: list[Any] | None
    if etype == "match_columns":
        cols = [obj.get(k) for k in COLUMNS]
        if set(map(type, cols)) != _LIST or not cols[0] or len(set(map(len, cols))) != 1:
            return None
        neutral = obj.get("neutral")
        if neutral is not None and not _plain_flags(neutral, len(cols[0])):
            return None
    elif etype == "match_batch":
        cols = _rows_to_columns(obj.get("matches"))
        if cols is None:
            return None
        neutral = cols.pop()
    else:
        return None
    plain = _plain(cols)
    if plain is None:
        return None
    ids, times, a, b, scores = plain
    return MatchBatch(pool=pool, event_ids=ids, a=a, b=b, scores=scores, times=times,
                      neutral=neutral if neutral is not None and True in neutral else None)


def plain_match_rows(objs: list[Any]) -> tuple[list[Any], list[bool] | None] | None:
    """The five columns (``COLUMNS``; scores as floats) of parsed ``match_batch`` items or ``match``
    events that are each certainly valid (``_plain_match``, by columns) and their ``neutral`` flags
    (None: none is neutral), or None: something needs the full validator."""
    cols = _rows_to_columns(objs)
    if cols is None:
        return None
    neutral = cols.pop()
    plain = _plain(cols)
    return None if plain is None else (plain, neutral if neutral is not None and True in neutral else None)


def _plain(cols: list[Any]) -> list[Any] | None:
    """``cols`` (``COLUMNS``) with the scores as floats when every match is certainly valid
    (``_plain_columns``), else None."""
    ids, times, a, b, scores = cols
    score_types = set(map(type, scores))
    if score_types not in _NUMBER or not _plain_columns(ids, times, a, b, scores):
        return None
    if score_types != _FLOAT:
        cols[4] = list(map(float, scores))
    return cols


def _rows_to_columns(ms: Any) -> list[Any] | None:
    """The five columns of a ``match_batch``'s items, then their ``neutral`` flags (None when no item
    has one), or None: not a plain list of dicts with them, or a ``neutral`` that is not a bool."""
    if type(ms) is not list or not ms or set(map(type, ms)) != _DICT:
        return None
    neutral = None
    if any(map(operator.contains, ms, repeat("neutral"))):
        neutral = list(map(dict.get, ms, repeat("neutral"), repeat(False)))
        if set(map(type, neutral)) != _BOOL:
            return None
    try:
        return [*(list(map(itemgetter(k), ms)) for k in COLUMNS), neutral]
    except KeyError:
        return None


def _plain_flags(flags: Any, n: int) -> bool:
    """``flags`` is a ``neutral`` column the schema accepts for ``n`` matches: a list of n bools."""
    return type(flags) is list and len(flags) == n and set(map(type, flags)) == _BOOL


_STR = {str}
_LIST = {list}
_DICT = {dict}
_FLOAT = {float}
_BOOL = {bool}
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
    return (min(id_lens) > 0 and max(id_lens) <= _ID and min(a_lens) > 0 and max(a_lens) <= _PLAYER
            and min(b_lens) > 0 and max(b_lens) <= _PLAYER and min(times) >= _MIN_TIME and max(times) <= _MAX_TIME
            and min(scores) >= _MIN_SCORE and max(scores) <= _MAX_SCORE and not any(map(eq, a, b)))


def fast_round(obj: dict[str, Any]) -> RoundEvent | None:
    """A ``round`` with standings (or ``players`` and ``ranks``) decoded by columns, or None: use
    ``decode_event`` (team rounds, integral floats, a player listed twice, anything invalid). The
    worker's hot path for rounds: the generated validator walks standings one item at a time (more
    than the Elo-MMR kernel spends on them); here each column is checked by C-level ``map`` passes."""
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


def _plain_round(obj: dict[str, Any]) -> bool:
    """A round's own fields (not its standings) are of the plain form ``fast_round`` takes."""
    if obj.get("type") != "round" or "teams" in obj:
        return False
    eid, pool, rid, t = (obj.get(k) for k in ("event_id", "pool", "round_id", "time"))
    return (type(eid) is str and 0 < len(eid) <= _ID and type(pool) is str
            and 0 < len(pool) <= _POOL and type(rid) is str and 0 < len(rid) <= _ROUND_ID
            and type(t) is int and _MIN_TIME <= t <= _MAX_TIME)


def _plain_round_event(obj: dict[str, Any], players: list[str], ranks: IntArray) -> RoundEvent | None:
    lens = np.fromiter(map(len, players), dtype=np.int64, count=len(players))
    if int(lens.min()) < 1 or int(lens.max()) > _PLAYER or len(set(players)) != len(players):
        return None
    weight = obj.get("weight", 1.0)
    ceiling = obj.get("perf_ceiling", math.inf)
    if type(weight) not in (float, int) or not (0 < weight < math.inf) or type(ceiling) not in (float, int):
        return None
    return RoundEvent(event_id=obj["event_id"], pool=obj["pool"], round_id=obj["round_id"], time=obj["time"],
                      players=players, ranks=ranks, weight=float(weight), perf_ceiling=float(ceiling))
