"""A ``mmr replay --history`` sink for tests: the lines the replay writes, read back as dicts."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import orjson

from stream.events.model import RatingOutput, rating_value


def history_lines(rows: list[dict[str, Any]]) -> Callable[[Sequence[RatingOutput]], None]:
    """An ``EmbeddedPipeline`` ``history`` that appends to ``rows`` each message as the replay's
    file has it (``rating_value``, the bytes ``mmr replay --history`` writes), decoded."""

    def sink(outputs: Sequence[RatingOutput]) -> None:
        rows.extend(orjson.loads(rating_value(o)) for o in outputs)

    return sink
