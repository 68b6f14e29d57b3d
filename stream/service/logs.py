"""The worker's log: plain text or one JSON object a line, and one INFO line per batch.

Why structured: a log collector indexes fields, not sentences; with ``MMR_LOG_FORMAT=json`` each
record is one JSON object on one line: ``time`` (ISO 8601, UTC, milliseconds), ``level``, ``logger``,
``message``, the record's ``extra`` fields, and ``exc`` (the traceback) when it has one. Every string
of the line passes through ``stream.redact.mask`` here, since a call's ``extra`` fields are set on the
record after ``stream.redact``'s record factory made it. ``logging_config`` is the ``dictConfig`` the
worker hands Faust (``stream.service.worker.faust_worker``); repeated records of the libraries are
held back by ``stream.service.worker.RepeatLimit``.

Why a line per batch and not per event (``batch_done``): the operator sees the worker's pace at one
record a take, a few dozen a second at most, while events run at tens of thousands a second.
"""

from __future__ import annotations

import logging
from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any

import orjson

from stream import redact
from stream.events.validate import MATCH_LISTS
from stream.service.config import LogFormat

batches = logging.getLogger("stream.service.batches")

#: the attributes every LogRecord has: the others are a call's ``extra`` fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def _masked(value: Any) -> Any:
    """``value`` with every secret in its strings masked, containers walked, anything else as its masked
    ``repr`` (what ``orjson`` would write for it otherwise)."""
    if isinstance(value, str):
        return redact.mask(value)
    if value is None or isinstance(value, bool | int | float):
        return value
    if isinstance(value, dict):
        return {redact.mask(str(k)): _masked(v) for k, v in value.items()}
    if isinstance(value, list | tuple | set | frozenset):
        return [_masked(v) for v in value]
    return redact.mask(repr(value))


class JsonFormatter(logging.Formatter):
    """A record as one JSON object on one line (module docstring)."""

    def format(self, record: logging.LogRecord) -> str:
        out: dict[str, Any] = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00",
                                                                                                          "Z"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        for key, value in vars(record).items():
            if key not in _STANDARD and key not in out:
                out[key] = value
        if record.exc_text:  # formatted already (stream.redact): never formatted again from exc_info
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(_masked(out)).decode()


def logging_config(fmt: LogFormat, level: str) -> dict[str, Any]:
    """The ``dictConfig`` of the worker's log: to stderr, in ``fmt``, at ``level``.

    Merged (``"merge": True``) into the one Faust's worker builds, so the text format stays Faust's."""
    handler: dict[str, Any] = {"level": level.upper()}
    if fmt == "json":
        handler.update({"class": "logging.StreamHandler", "formatter": "json"})
    else:
        handler.update({"class": "colorlog.StreamHandler", "formatter": "colored"})
    return {
        "merge": True,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "handlers": {"default": handler},
        "root": {"level": level.upper(), "handlers": ["default"]},
    }


def batch_done(messages: int, types: Mapping[str, int], ratings: int, dead_letters: int, pools: int,
               seconds: float) -> None:
    """Log one rated batch, its numbers also as ``extra`` fields; ``types``: its valid events per type, a
    match list counted once as itself and its matches once each as ``match`` (``planning.Plan.types``).
    ``MMR_LOG_LEVEL=warning`` turns it off (nothing is formatted then)."""
    if not batches.isEnabledFor(logging.INFO):
        return
    events = sum(n for t, n in types.items() if t not in MATCH_LISTS)
    batches.info("batch: %d messages, %d events, %d ratings, %d dead letters, %d pools in %.3f s", messages, events,
                 ratings, dead_letters, pools, seconds,
                 extra={"messages": messages, "events": events, "ratings": ratings, "dead_letters": dead_letters,
                        "pools": pools, "duration_s": round(seconds, 6)})
