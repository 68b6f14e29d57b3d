"""A ``mmr replay --history`` sink for tests: the lines the replay writes, read back as dicts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from stream.engine.rating_columns import message_lines
from stream.events.model import RatingOutput


def history_lines(rows: list[dict[str, Any]]) -> Callable[[Sequence[RatingOutput]], None]:
    """An ``EmbeddedPipeline`` ``history`` that appends to ``rows`` each message as the replay's
    file has it (``message_lines``, the bytes ``mmr replay --history`` writes), decoded."""

    def sink(outputs: Sequence[RatingOutput]) -> None:
        lines = bytes(message_lines(outputs)).splitlines()
        assert len(lines) == len(outputs)
        rows.extend(map(orjson.loads, lines))

    return sink
