"""One INFO line per batch the worker rates: what it took, what it gave, how long it took.

Why a line per batch and not per event: an operator reading the log (or a collector counting its
JSON fields, ``MMR_LOG_FORMAT=json``) sees the worker's pace and where it stalls at one record a
take, a few dozen a second at most under load, while events run at tens of thousands a second. The
line's numbers are also its ``extra`` fields: ``messages``, ``events``, ``ratings``, ``dead_letters``,
``pools``, ``duration_s``. ``MMR_LOG_LEVEL=warning`` turns it off (nothing is formatted then).
"""

from __future__ import annotations

import logging
from collections.abc import Mapping

from stream.events.validate import MATCH_LISTS

log = logging.getLogger("stream.service.batches")


def batch_done(messages: int, types: Mapping[str, int], ratings: int, dead_letters: int, pools: int,
               seconds: float) -> None:
    """Log one rated batch (module docstring); ``types``: its valid events per type, a match list counted
    once as itself and its matches once each as ``match`` (``planning.Plan.types``)."""
    if not log.isEnabledFor(logging.INFO):
        return
    events = sum(n for t, n in types.items() if t not in MATCH_LISTS)
    log.info("batch: %d messages, %d events, %d ratings, %d dead letters, %d pools in %.3f s", messages, events,
             ratings, dead_letters, pools, seconds,
             extra={"messages": messages, "events": events, "ratings": ratings, "dead_letters": dead_letters,
                    "pools": pools, "duration_s": round(seconds, 6)})


__all__ = ["batch_done"]
