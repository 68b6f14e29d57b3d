"""The publishing client without a broker: validation before sending, ids, topics, lightness."""

from __future__ import annotations

import asyncio
import re
import subprocess
import sys
import uuid

import orjson
import pytest
from repo_paths import ROOT

from stream.client import InvalidEvent, Publisher, deterministic_id
from stream.events.validate import INPUT_TYPES, decode_event, validator
from stream.service.config import PoolConfig, from_env

S = from_env({})


def publisher(**kw: object) -> Publisher:
    return Publisher("127.0.0.1:1", settings=S, **kw)  # type: ignore[arg-type]


def test_importing_the_client_loads_neither_numba_nor_faust() -> None:
    code = ("import sys; from stream.client import Publisher; "
            "print(sorted({m.split('.')[0] for m in sys.modules} & {'numba', 'faust', 'mode', 'llvmlite', 'redis'}))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_deterministic_ids_depend_on_content_only() -> None:
    pub = publisher(deterministic_ids=True)
    m = {"type": "match", "pool": "p", "time": 5, "a": "x", "b": "y", "score": 1.0}
    _, first = pub.prepare(m)
    _, again = pub.prepare({**m, "event_id": None})
    _, other = pub.prepare({**m, "time": 6})
    assert first["event_id"] == again["event_id"] == deterministic_id(m) != other["event_id"]
    assert first["event_id"].startswith("match-") and len(first["event_id"]) == len("match-") + 32
    # key order does not matter; a given id is kept
    assert deterministic_id(dict(reversed(list(m.items())))) == deterministic_id(m)
    assert pub.prepare({**m, "event_id": "mine"})[1]["event_id"] == "mine"


def test_random_ids_by_default() -> None:
    pub = publisher()
    m = {"type": "round_result", "pool": "p", "round_id": "r", "time": 1, "player": "x", "rank": 1}
    ids = {pub.prepare(m)[1]["event_id"] for _ in range(3)}
    assert len(ids) == 3 and all(uuid.UUID(i).version == 4 for i in ids)


def test_batches_get_one_id_per_match_same_as_single_matches() -> None:
    pub = publisher(deterministic_ids=True)
    rows = [{"time": 1, "a": "x", "b": "y", "score": 1}, {"time": 2, "a": "y", "b": "x", "score": 0.5}]
    _, batch = pub.prepare({"type": "match_batch", "pool": "p", "matches": rows})
    _, cols = pub.prepare({"type": "match_columns", "pool": "p", **{k: [r[k] for r in rows] for k in rows[0]}})
    singles = [pub.prepare({"type": "match", "pool": "p", **r})[1]["event_id"] for r in rows]
    assert [m["event_id"] for m in batch["matches"]] == cols["event_id"] == singles
    assert len(set(singles)) == 2
    # a neutral match's id is its id as a neutral ``match``, whichever form carries it
    sided = [{**rows[0], "neutral": True}, {**rows[1], "neutral": False}]
    _, batch = pub.prepare({"type": "match_batch", "pool": "p", "matches": sided})
    _, cols = pub.prepare({"type": "match_columns", "pool": "p", **{k: [r[k] for r in sided] for k in sided[0]}})
    singles = [pub.prepare({"type": "match", "pool": "p", **r})[1]["event_id"] for r in rows]
    neutral_one = pub.prepare({"type": "match", "pool": "p", **sided[0]})[1]["event_id"]
    assert cols["event_id"] == [neutral_one, singles[1]] and neutral_one != singles[0]
    assert batch["matches"][0]["event_id"] == neutral_one


@pytest.mark.parametrize(("event", "field"), [
    ({"type": "match", "pool": "p", "time": 1, "a": "x", "b": "y", "score": 2}, "field score"),
    ({"type": "match", "pool": "p", "time": 1, "a": "x", "b": "x", "score": 1}, "field b"),
    ({"type": "match", "pool": "", "time": 1, "a": "x", "b": "y", "score": 1}, "field pool"),
    ({"type": "round", "pool": "p", "round_id": "r", "time": 1,
      "standings": [{"player": "x", "rank": 1}, {"player": "x", "rank": 2}]}, "field standings"),
    ({"type": "round", "pool": "p", "round_id": "r", "time": 1,
      "teams": [{"players": ["x", "y"], "rank": 1}, {"players": ["y"], "rank": 2}]}, "field teams"),
    ({"type": "round", "pool": "p", "round_id": "r", "time": 1, "teams": [{"players": [], "rank": 1}]},
     "field teams.0.players"),
    ({"type": "round_completed", "pool": "p", "round_id": "r", "time": 1, "participants": 0}, "field participants"),
    ({"type": "rating", "pool": "p"}, "field type"),
    ({"type": "match_columns", "pool": "p", "time": [1, 2], "a": ["x"], "b": ["y"], "score": [1]}, "field time"),
    ({"type": "match_columns", "pool": "p", "time": 1, "a": ["x"], "b": ["y"], "score": [1]}, "field "),
    ({"type": "match_batch", "pool": "p", "matches": ["x"]}, "field matches.0"),
    ({"type": "match", "pool": "p", "time": object(), "a": "x", "b": "y", "score": 1}, "field event: not JSON"),
])
def test_invalid_events_name_the_field(event: dict[str, object], field: str) -> None:
    with pytest.raises(InvalidEvent) as exc:
        publisher(deterministic_ids=True).prepare(event)
    assert exc.value.reason.startswith(field), exc.value.reason


def test_an_invalid_event_is_refused_before_anything_is_sent() -> None:
    asyncio.run(_refused_before_sending())


async def _refused_before_sending() -> None:
    pub = publisher()  # never started: sending would raise RuntimeError
    with pytest.raises(InvalidEvent, match="field score"):
        await pub.match("p", "x", "y", 1.5, time=1)
    with pytest.raises(InvalidEvent, match="match 1: field b"):
        await pub.matches("p", [{"a": "x", "b": "y", "score": 1, "time": 1},
                                {"a": "x", "b": "x", "score": 1, "time": 2}])
    with pytest.raises(InvalidEvent, match="field standings"):
        await pub.round("p", "r", time=1, standings={"x": 1}, teams=[{"players": ["y"], "rank": 1}])
    with pytest.raises(RuntimeError, match="not started"):
        await pub.match("p", "x", "y", 1.0, time=1)


def test_prepared_events_are_what_the_worker_decodes() -> None:
    pub = publisher(deterministic_ids=True)
    _, obj = pub.prepare({"type": "round", "pool": "p", "round_id": "r", "time": 3, "weight": 0.5,
                          "teams": [{"players": ["a", "b"], "rank": 1, "weights": [1, 0.5]},
                                    {"players": ["c"], "rank": 2}]})
    etype, ev = decode_event(orjson.loads(orjson.dumps(obj)))
    assert etype == "round" and ev.players == ["a", "b", "c"] and ev.ranks.tolist() == [1, 1, 2]
    assert ev.teams is not None and ev.teams.weights.tolist() == [1.0, 0.5, 1.0] and ev.weight == 0.5


def test_topics_by_type() -> None:
    pub = publisher()
    kinds = ("match", "match_batch", "match_columns", "round", "round_result", "round_completed")
    assert [pub.topic_for(t) for t in kinds] == [S.topic_matches] * 3 + [S.topic_rounds] + [S.topic_results] * 2
    assert pub.settings.kafka_bootstrap == "127.0.0.1:1"
    assert Publisher(settings=S).settings.kafka_bootstrap == S.kafka_bootstrap


def test_every_example_payload_in_the_docs_is_valid() -> None:
    text = (ROOT / "docs" / "publisher.md").read_text()
    examples = [orjson.loads(block) for block in re.findall(r"```json\n(.*?)```", text, re.DOTALL)]
    kinds = []
    for obj in examples:
        if obj["type"] == "rating":
            validator("rating")(obj)
            kinds.append("rating")
        else:
            etype, ev = decode_event(obj)
            kinds.append("team round with sides" if etype == "round" and ev.teams is not None and ev.teams.sides
                         else "team round" if etype == "round" and ev.teams is not None
                         else "round by columns" if etype == "round" and "standings" not in obj
                         else "neutral match" if etype == "match" and ev.neutral
                         else "columns with neutral" if etype == "match_columns" and "neutral" in obj else etype)
    assert sorted(kinds) == sorted([*INPUT_TYPES, "team round", "round by columns", "rating", "neutral match",
                                    "team round with sides", "columns with neutral"])


def test_the_settings_limits_of_the_worker_apply() -> None:
    small = Publisher("127.0.0.1:1", settings=S.with_(max_participants=2, pools={"chess": PoolConfig("elo-mmr", {})}))
    with pytest.raises(InvalidEvent, match="field standings: 3 participants exceed the maximum 2"):
        small.prepare({"type": "round", "pool": "chess", "round_id": "r", "time": 1,
                       "standings": [{"player": p, "rank": r} for r, p in enumerate("xyz", 1)]})
    with pytest.raises(InvalidEvent, match="unknown pool 'go'"):
        small.prepare({"type": "match", "pool": "go", "time": 1, "a": "x", "b": "y", "score": 1})
    assert small.prepare({"type": "match", "pool": "chess", "time": 1, "a": "x", "b": "y", "score": 1})[0] == "match"
