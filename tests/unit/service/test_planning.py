"""Each input topic takes its own event types (stream.service.planning), as the batch plan applies it."""

from __future__ import annotations

from typing import Any

import orjson
import pytest

from stream.service.config import Settings
from stream.service.messages import DeadLetter, Message
from stream.service.planning import MATCH_TYPES, RESULT_TYPES, ROUND_TYPES, TopicRule, plan_batch

S = Settings()
EVENTS: dict[str, dict[str, Any]] = {
    "match": {"type": "match", "event_id": "m", "pool": "p", "time": 1, "a": "x", "b": "y", "score": 1.0},
    "match_batch": {"type": "match_batch", "pool": "p", "matches": [
        {"event_id": "mb", "time": 1, "a": "x", "b": "y", "score": 0.0}]},
    "match_columns": {"type": "match_columns", "pool": "p", "event_id": ["mc"], "time": [1], "a": ["x"], "b": ["y"],
                      "score": [0.5]},
    "round": {"type": "round", "event_id": "r", "pool": "p", "round_id": "R", "time": 1,
              "standings": [{"player": "x", "rank": 1}, {"player": "y", "rank": 2}]},
    "round_result": {"type": "round_result", "event_id": "rr", "pool": "p", "round_id": "R2", "time": 1,
                     "player": "x", "rank": 1},
    "round_completed": {"type": "round_completed", "event_id": "rc", "pool": "p", "round_id": "R3", "time": 1,
                        "participants": 2},
}
HOME = {**dict.fromkeys(MATCH_TYPES, S.topic_matches), **dict.fromkeys(ROUND_TYPES, S.topic_rounds),
        **dict.fromkeys(RESULT_TYPES, S.topic_results)}


def _dead(msg: Message, reason: str, event_id: str | None = None, pool: str | None = None) -> DeadLetter:
    return DeadLetter(reason, msg.topic, msg.partition, msg.offset, msg.value, event_id, pool)


@pytest.mark.parametrize("etype", list(EVENTS))
@pytest.mark.parametrize("topic", sorted(set(HOME.values())))
def test_an_event_is_planned_on_its_own_topic_and_dead_lettered_on_another(etype: str, topic: str) -> None:
    plan = plan_batch([Message(topic, 0, 7, orjson.dumps(EVENTS[etype]))], S, None, _dead)
    if HOME[etype] == topic:
        assert plan.out.dead == [] and (plan.ops or plan.results)
        return
    assert not plan.ops and not plan.results
    [d] = plan.out.dead
    assert d.reason.startswith(f"field type: a {etype!r} event on topic {topic!r}, which takes ")
    assert d.reason.endswith(f"send it to {HOME[etype]!r}")
    assert (d.pool, d.topic, d.offset) == ("p", topic, 7)
    assert d.event_id == {"match_batch": "mb", "match_columns": "mc"}.get(etype, EVENTS[etype].get("event_id"))


def test_one_topic_for_several_kinds_takes_each_and_other_topics_are_not_checked() -> None:
    one = S.with_(topic_matches="all", topic_rounds="all", topic_results="results")
    plan = plan_batch([Message("all", 0, 0, orjson.dumps(EVENTS["round"])),
                       Message("all", 0, 1, orjson.dumps(EVENTS["match"])),
                       Message("elsewhere", 0, 0, orjson.dumps(EVENTS["round_result"]))], one, None, _dead)
    assert plan.out.dead == [] and len(plan.ops["p"]) == 2 and len(plan.results["p"]) == 1
    rule = TopicRule("all", "all", "results")
    assert rule.misplaced("all", "round_completed") == ("field type: a 'round_completed' event on topic 'all', which "
                                                        "takes match, match_batch, match_columns, round only; "
                                                        "send it to 'results'")
