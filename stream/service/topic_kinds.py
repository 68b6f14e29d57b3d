"""Which event types each input topic takes (docs/interface.md, "Events and topics").

A ``round`` sent to the matches topic would be rated out of order with its pool's events on their
own topic, so each input topic takes its own types only, and anything else is dead-lettered with a
reason naming the topic it belongs on (a topic configured for several kinds takes each one's types).
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import lru_cache
from typing import Any

MATCH_TYPES = ("match", "match_batch", "match_columns")
ROUND_TYPES = ("round",)
RESULT_TYPES = ("round_result", "round_completed")


class TopicRule:
    """The types each input topic takes, and where each type belongs."""

    def __init__(self, matches: str, rounds: str, results: str) -> None:
        self.takes: dict[str, frozenset[str]] = {}
        self.home: dict[str, str] = {}
        for topic, types in ((matches, MATCH_TYPES), (rounds, ROUND_TYPES), (results, RESULT_TYPES)):
            self.takes[topic] = self.takes.get(topic, frozenset()) | frozenset(types)
            self.home.update(dict.fromkeys(types, topic))

    def misplaced(self, topic: str, etype: str) -> str | None:
        """The dead letter's reason for an event of type ``etype`` read from ``topic``; None when it belongs there."""
        takes = self.takes.get(topic)
        if takes is None or etype in takes:
            return None
        return (f"field type: a {etype!r} event on topic {topic!r}, which takes {', '.join(sorted(takes))} only; "
                f"send it to {self.home[etype]!r}")


@lru_cache(maxsize=8)
def rule(matches: str, rounds: str, results: str) -> TopicRule:
    """The rule of these input topics (``Settings.input_topics()``), built once."""
    return TopicRule(matches, rounds, results)


def event_of(etype: str, value: Any) -> tuple[str | None, str | None]:
    """(event id, pool) of a decoded event (``planning.decode_message``'s value), for its dead letter:
    a match list is named by its first match."""
    if isinstance(value, Mapping):
        return value.get("event_id"), value.get("pool")
    ids = getattr(value, "event_ids", None)
    if ids is not None:
        return (ids[0] if len(ids) else None), value.pool
    return getattr(value, "event_id", None), getattr(value, "pool", None)
