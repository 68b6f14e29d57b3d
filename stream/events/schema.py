"""The JSON Schemas of the events (``stream/schemas/``, package data) and the limits read from them.

The schemas are the wire contract (docs/interface.md). The limits the decoders' fast paths check
by hand (string lengths, the range of ``time`` and ``rank``, a score's bounds) are read here from
the schemas, so that a change of a schema changes every check of it. Pure Python: the client
(``stream.client``) validates with it without numpy or numba.
"""

from __future__ import annotations

from functools import cache
from importlib import resources
from typing import Any, NamedTuple

import orjson


def schema(event_type: str) -> dict[str, Any]:
    """The JSON Schema of one event type, read from the installed package."""
    text = resources.files("stream").joinpath("schemas", f"{event_type}.json").read_bytes()
    loaded: dict[str, Any] = orjson.loads(text)
    return loaded


class Limits(NamedTuple):
    """Bounds the schemas set on the fields of the input events."""

    event_id_length: int  #: ``maxLength`` of an ``event_id``
    pool_length: int  #: ... of a ``pool``
    player_length: int  #: ... of a player id (``a``, ``b``, ``standings.*.player``, ...)
    round_id_length: int  #: ... of a ``round_id``
    min_time: int  #: ``time``'s range (ms since the epoch: stored as int64)
    max_time: int
    min_score: float  #: ``score``'s range (A's score)
    max_score: float


@cache
def limits() -> Limits:
    """The ``Limits`` of ``match.json`` and ``round.json`` (the other input schemas repeat them: a test
    checks that every schema states the same bounds for the same field)."""
    match, rnd = schema("match")["properties"], schema("round")["properties"]
    return Limits(
        event_id_length=match["event_id"]["maxLength"],
        pool_length=match["pool"]["maxLength"],
        player_length=match["a"]["maxLength"],
        round_id_length=rnd["round_id"]["maxLength"],
        min_time=match["time"]["minimum"],
        max_time=match["time"]["maximum"],
        min_score=float(match["score"]["minimum"]),
        max_score=float(match["score"]["maximum"]),
    )
