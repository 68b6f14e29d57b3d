"""The worker's log: plain text or one JSON object a line.

Why structured: a log collector (Loki, Elasticsearch, CloudWatch) indexes fields, not sentences;
with ``MMR_LOG_FORMAT=json`` each record is one JSON object on one line: ``time`` (ISO 8601, UTC,
milliseconds), ``level``, ``logger``, ``message``, the record's ``extra`` fields, and ``exc``
(the traceback) when it has one.

Every string the line carries passes through ``stream.redact.mask``: the record factory
``stream.redact.install`` sets masks a record's message and traceback, but a call's ``extra`` fields
are set on the record after the factory made it, and a value that is not JSON (an exception, a
settings object) is written as its ``repr`` here, so only the formatter sees the final text.

Repeated records are held back by ``stream.service.worker.RepeatLimit`` on the loggers of aiokafka,
Faust and mode (a broker outage's flood), not here: one limiter.

Faust configures logging when its worker starts (``mode.utils.logging``): ``logging_config`` is
the ``dictConfig`` the worker hands it (``stream.service.worker.faust_worker``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

import orjson

from stream import redact
from stream.service.config import LogFormat

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


__all__ = ["JsonFormatter", "logging_config"]
