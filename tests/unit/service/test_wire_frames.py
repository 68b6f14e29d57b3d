"""Wire frames that need no broker and no Redis: the publisher's messages, dead letters."""

from __future__ import annotations

import base64

import numpy as np
import orjson

from stream.events.model import MatchEvent, RoundEvent, rating_key
from stream.events.validate import decode_event
from stream.service.config import from_env
from stream.service.processor import DeadLetter
from stream.tools.publish import match_batch_json, match_columns_json, messages, round_json


def test_publisher_frames_round_trip_through_validation() -> None:
    s = from_env({})
    ev = RoundEvent(event_id="e1", pool="p", round_id="r1", time=5, players=["a", "b", "c"],
                    ranks=np.array([1, 2, 2]), weight=0.5)
    etype, back = decode_event(orjson.loads(round_json(ev)))
    assert etype == "round" and back.players == ev.players and back.ranks.tolist() == [1, 2, 2] and back.weight == 0.5
    ms = [MatchEvent(event_id=f"m{i}", pool="p", time=i, a="a", b="b", score=1.0) for i in range(5)]
    mixed = [MatchEvent(event_id=f"n{i}", pool="p", time=i, a="a", b="b", score=0.5, neutral=i % 2 == 1)
             for i in range(5)]
    for form, to_json in (("match_batch", match_batch_json), ("match_columns", match_columns_json)):
        for matches in (ms, mixed):
            obj = orjson.loads(to_json("p", matches))
            etype, batch = decode_event(obj)
            assert etype == form and batch == matches
    # the column only where some match is neutral
    assert "neutral" not in orjson.loads(match_columns_json("p", ms))
    assert orjson.loads(match_columns_json("p", mixed))["neutral"] == [False, True, False, True, False]
    # matches held per pool until batch_size or a round of the same pool; order kept per pool
    records = [("f:1", "match", ms[0]), ("f:2", "match", ms[1]), ("f:3", "round", ev), ("f:4", "match", ms[2]),
               ("f:5", "match", ms[3]), ("f:6", "match", ms[4])]
    out = list(messages(records, s, batch_size=2))
    assert [(t, n) for t, _, _, n, _ in out] == [(s.topic_matches, 2), (s.topic_rounds, 1), (s.topic_matches, 2),
                                                 (s.topic_matches, 1)]


def test_dead_letter_envelope_keeps_the_original_bytes() -> None:
    d = DeadLetter("bad JSON: x", "t", 3, 42, b"\xff{oops", None, "p")
    obj = orjson.loads(d.encode())
    assert obj["original"] is None and base64.b64decode(obj["original_b64"]) == b"\xff{oops"
    assert (obj["topic"], obj["partition"], obj["offset"], obj["reason"]) == ("t", 3, 42, "bad JSON: x")
    assert rating_key("a:b", "c") != rating_key("a", "b:c")
