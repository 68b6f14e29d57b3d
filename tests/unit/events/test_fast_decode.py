"""The service's fast path for match events decodes exactly what the full validator does."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from stream.events.model import MatchBatch
from stream.events.validate import InvalidEvent, decode_event, fast_matches


def _full(obj: dict[str, Any]) -> MatchBatch:
    etype, value = decode_event(copy.deepcopy(obj))
    batch = MatchBatch(obj["pool"])
    for m in [value] if etype == "match" else value:
        batch.add(m)
    return batch


MATCH = {"type": "match", "event_id": "e1", "pool": "p", "time": 5, "a": "x", "b": "y", "score": 1}
BATCH: dict[str, Any] = {"type": "match_batch", "pool": "p", "extra": True, "matches": [
    {"event_id": "e1", "time": 0, "a": "x", "b": "y", "score": 0.5, "more": [1]},
    {"event_id": "é" * 256, "time": 2**40, "a": "y" * 128, "b": "x", "score": 0}]}


@pytest.mark.parametrize("obj", [MATCH, BATCH])
def test_same_columns_as_the_validator(obj: dict[str, Any]) -> None:
    fast = fast_matches(obj)
    assert fast is not None and fast == _full(obj)
    assert all(type(s) is float for s in fast.scores) and all(type(t) is int for t in fast.times)


@pytest.mark.parametrize("change", [
    {"score": True}, {"score": 1.5}, {"score": -0.0001}, {"score": "1"}, {"time": 5.0},
    {"time": 2**63}, {"time": -(2**63) - 1},
    {"time": False}, {"a": ""}, {"a": "z" * 129}, {"a": "same", "b": "same"}, {"event_id": "e" * 257}, {"event_id": 3},
    {"pool": ""}, {"pool": "q" * 129}, {"pool": None}, {"type": "round"},
])
def test_anything_unusual_takes_the_full_path(change: dict[str, Any]) -> None:
    """None means: use decode_event (which then accepts or rejects with its usual reason)."""
    assert fast_matches({**MATCH, **change}) is None
    items = [dict(BATCH["matches"][0]), {**BATCH["matches"][1], **{k: v for k, v in change.items()
                                                                 if k not in ("pool", "type")}}]
    if set(change) & {"pool", "type"}:
        assert fast_matches({**BATCH, **change}) is None
    else:
        assert fast_matches({**BATCH, "matches": items}) is None


def test_missing_fields_and_empty_batches() -> None:
    for field in ("event_id", "time", "a", "b", "score"):
        obj = {k: v for k, v in MATCH.items() if k != field}
        assert fast_matches(obj) is None
        with pytest.raises(InvalidEvent):
            decode_event(obj)
    assert fast_matches({**BATCH, "matches": []}) is None
    assert fast_matches({**BATCH, "matches": [1]}) is None
    assert fast_matches({**BATCH, "matches": "x"}) is None


def test_published_history_before_1970_is_accepted_by_the_service(tmp_path: Any) -> None:
    """`replay --broker` of a CSV from 1872 (the football file) published negative times the
    schemas rejected, so the service dead-lettered what `replay --embedded` rated."""
    import orjson

    from stream.events.inputs import read_records
    from stream.service.config import from_env
    from stream.tools.publish import messages

    path = tmp_path / "old.csv"
    path.write_text("date,home_team,away_team,home_score,away_score\n"
                    "1872-11-30,Scotland,England,0,0\n1873-03-08,England,Scotland,4,2\n")
    msgs = list(messages(read_records(path), from_env(), batch_size=10))
    assert msgs
    for _topic, _pool, raw, _n, _t in msgs:
        obj = orjson.loads(raw)
        etype, value = decode_event(copy.deepcopy(obj))
        assert etype == "match_columns" and value[0].time < 0
        assert fast_matches(obj) == _full(obj)


def _columns(obj: dict[str, Any]) -> dict[str, Any]:
    """The ``match_columns`` form of a ``match_batch`` dict."""
    ms = obj["matches"]
    return {"type": "match_columns", "pool": obj["pool"],
            **{k: [m[k] for m in ms] for k in ("event_id", "time", "a", "b", "score")}}


def test_columns_decode_like_rows() -> None:
    cols = _columns(BATCH)
    fast = fast_matches(cols)
    assert fast is not None and fast == _full(BATCH) == _full(cols)
    assert all(type(s) is float for s in fast.scores)


@pytest.mark.parametrize("change", [
    {"score": [True, 1]}, {"score": [0.5, 1.5]}, {"time": [0, 2**63]}, {"a": ["x", ""]},
    {"a": ["x", "x"]}, {"event_id": ["e1", 3]}, {"event_id": "e1"}, {"b": ["y"]}, {"score": None},
])
def test_unusual_columns_take_the_full_path(change: dict[str, Any]) -> None:
    obj = {**_columns(BATCH), **change}
    assert fast_matches(obj) is None
    with pytest.raises(InvalidEvent):
        decode_event(copy.deepcopy(obj))


def test_integral_float_time_in_columns_is_valid_but_not_plain() -> None:
    obj = {**_columns(BATCH), "time": [0, 5.0]}
    assert fast_matches(obj) is None
    etype, value = decode_event(copy.deepcopy(obj))
    assert etype == "match_columns" and value[1].time == 5 and type(value[1].time) is int


def test_columns_of_different_lengths_name_the_field() -> None:
    obj = {**_columns(BATCH), "b": ["y", "x", "z"]}
    with pytest.raises(InvalidEvent, match="field b: 3 items, but event_id has 2"):
        decode_event(obj)
    with pytest.raises(InvalidEvent, match="field event_id"):
        decode_event({**_columns(BATCH), "event_id": [], "time": [], "a": [], "b": [], "score": []})


ROUND = {"type": "round", "event_id": "r1", "pool": "p", "round_id": "x", "time": 7, "extra": {"a": 1},
         "standings": [{"player": "a", "rank": 1, "score": 3}, {"player": "é" * 128, "rank": 1},
                       {"player": "c", "rank": 2**63 - 1}]}
STANDINGS: list[dict[str, Any]] = ROUND["standings"]  # type: ignore[assignment]
COLUMNS_ROUND = {key: value for key, value in ROUND.items() if key != "standings"} | {
    "players": [s["player"] for s in STANDINGS], "ranks": [s["rank"] for s in STANDINGS]}


@pytest.mark.parametrize("obj", [ROUND, {**ROUND, "weight": 0.5, "perf_ceiling": 3000},
                                 {**ROUND, "weight": 2, "perf_ceiling": -1.5}])
def test_rounds_decode_as_the_validator_does(obj: dict[str, Any]) -> None:
    from stream.events.validate import fast_round

    fast = fast_round(obj)
    etype, full = decode_event(copy.deepcopy(obj))
    assert etype == "round" and fast is not None
    assert (fast.event_id, fast.pool, fast.round_id, fast.time, fast.players, fast.teams) == (
        full.event_id, full.pool, full.round_id, full.time, full.players, full.teams)
    assert fast.ranks.dtype == full.ranks.dtype and fast.ranks.tolist() == full.ranks.tolist()
    assert (type(fast.weight), fast.weight, type(fast.perf_ceiling), fast.perf_ceiling) == (
        type(full.weight), full.weight, type(full.perf_ceiling), full.perf_ceiling)


@pytest.mark.parametrize("change", [
    {"time": 7.0}, {"time": 2**63}, {"time": True}, {"event_id": ""}, {"event_id": "e" * 257}, {"pool": "q" * 129},
    {"round_id": 5}, {"type": "match"}, {"weight": 0}, {"weight": -1.0}, {"weight": True}, {"weight": "1"},
    {"perf_ceiling": None}, {"standings": []}, {"standings": [{"player": "a"}]}, {"standings": [{"rank": 1}]},
    {"standings": [{"player": "a", "rank": 1.0}]}, {"standings": [{"player": "a", "rank": 0}]},
    {"standings": [{"player": "a", "rank": False}]}, {"standings": [{"player": "", "rank": 1}]},
    {"standings": [{"player": "a", "rank": 2**63}]}, {"standings": [{"player": "a", "rank": -(2**63) - 1}]},
    {"standings": [{"player": "z" * 129, "rank": 1}]}, {"standings": [{"player": 3, "rank": 1}]},
    {"standings": [{"player": "a", "rank": 1}, {"player": "a", "rank": 2}]}, {"standings": [["a", 1]]},
    {"teams": [{"players": ["a"], "rank": 1}]},
])
def test_unusual_rounds_take_the_full_path(change: dict[str, Any]) -> None:
    """None: the worker decodes with decode_event, which accepts or rejects with its usual reason."""
    from stream.events.validate import fast_round

    assert fast_round({**ROUND, **change}) is None


@pytest.mark.parametrize("form", [ROUND, COLUMNS_ROUND], ids=["standings", "columns"])
def test_the_worker_decodes_rounds_on_the_fast_path(monkeypatch: pytest.MonkeyPatch, form: dict[str, Any]) -> None:
    """The service's decoder takes the column path for a plain round, its standings or its column form
    (and the same event results)."""
    import orjson

    from stream.events import check
    from stream.service.config import from_env
    from stream.service.messages import Message
    from stream.service.planning import decode_message

    calls: list[int] = []
    real = check.check_schema

    def counting(obj: dict[str, Any]) -> str:
        calls.append(1)
        return real(obj)

    monkeypatch.setattr(check, "check_schema", counting)
    etype, ev = decode_message(Message("t", 0, 0, orjson.dumps(form)), from_env())
    assert etype == "round" and ev.players == ["a", "é" * 128, "c"] and not calls
    decode_message(Message("t", 0, 1, orjson.dumps({**form, "time": 7.0})), from_env())
    assert calls



@pytest.mark.parametrize("extra", [{}, {"weight": 0.5, "perf_ceiling": 3000}])
def test_a_round_by_columns_is_the_round_of_its_standings(extra: dict[str, Any]) -> None:
    """``players`` and ``ranks`` instead of ``standings``: the same event, on the fast path and the full one."""
    from stream.events.validate import fast_round

    by_rows = decode_event(copy.deepcopy({**ROUND, **extra}))[1]
    for event in (fast_round({**COLUMNS_ROUND, **extra}), decode_event(copy.deepcopy({**COLUMNS_ROUND, **extra}))[1]):
        assert event is not None
        assert (event.event_id, event.pool, event.round_id, event.time, event.players, event.teams, event.weight,
                event.perf_ceiling) == (by_rows.event_id, by_rows.pool, by_rows.round_id, by_rows.time,
                                        by_rows.players, by_rows.teams, by_rows.weight, by_rows.perf_ceiling)
        assert event.ranks.dtype == by_rows.ranks.dtype and event.ranks.tolist() == by_rows.ranks.tolist()


@pytest.mark.parametrize(("change", "reason"), [
    ({"ranks": [1, 2]}, "field ranks: 2 ranks for 3 players"),
    ({"players": ["a", "b", "a"]}, "field players: player 'a' appears twice"),
    ({"ranks": [1, 0, 2]}, "field ranks.1"),
    ({"players": ["a", "", "c"]}, "field players.1"),
    ({"players": ["a", 3, "c"]}, "field players.1"),
    ({"ranks": [1, 1.5, 2]}, "field ranks.1"),
    ({"ranks": [1, 2**63, 2]}, "field ranks.1"),
    ({"players": [], "ranks": []}, "field players"),
    ({"ranks": None}, "field ranks"),
])
def test_a_bad_round_by_columns_takes_the_full_path_and_is_named_by_its_field(change: dict[str, Any],
                                                                             reason: str) -> None:
    from stream.events.validate import fast_round

    bad = {**COLUMNS_ROUND, **change}
    assert fast_round(bad) is None
    with pytest.raises(InvalidEvent, match=reason.replace(".", r"\.")):
        decode_event(bad)


def test_a_round_with_standings_ignores_extra_players_and_ranks_fields() -> None:
    """Extra fields are ignored: a round with standings (or teams) and a top-level ``players`` or
    ``ranks`` of any kind is the round of its standings, as before the column form."""
    from stream.events.validate import fast_round

    odd = {**ROUND, "players": "not a list", "ranks": [0]}
    assert decode_event(copy.deepcopy(odd))[1].players == [s["player"] for s in STANDINGS]
    fast = fast_round(odd)
    assert fast is not None and fast.players == [s["player"] for s in STANDINGS]
    with pytest.raises(InvalidEvent, match="exactly one of standings, teams, or players with ranks"):
        decode_event({key: value for key, value in COLUMNS_ROUND.items() if key != "ranks"})

