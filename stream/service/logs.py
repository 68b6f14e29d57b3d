"""The worker's log: plain text or one JSON object a line, repeated warnings and errors counted.

Why structured: a log collector (Loki, Elasticsearch, CloudWatch) indexes fields, not sentences;
with ``MMR_LOG_FORMAT=json`` each record is one JSON object on one line: ``time`` (ISO 8601, UTC,
milliseconds), ``level``, ``logger``, ``message``, the record's ``extra`` fields, and ``exc``
(the traceback) when it has one.

Why counted: a broker or Redis outage makes the same warning or error at every retry of every
connection, dozens a second, each with its traceback; what the operator needs is the first one and
how often it recurred. ``Repeats`` lets the first record of a kind (logger, level, message as
formatted: one template may say different things, "pausing ..." and "resuming ...") through,
drops the same kind for ``interval`` seconds while counting it, and appends "(repeated N times in
the last T s)" to the next one after that. Records below WARNING are never dropped (the per-batch
INFO line is one a batch by design). A count is written with the next record of its kind: an
outage that ends leaves its last count unwritten (the metrics have it).

Faust configures logging when its worker starts (``mode.utils.logging``): ``logging_config`` is
the ``dictConfig`` the worker hands it (``stream.service.worker.faust_worker``).
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import orjson

from stream.service.config import LogFormat

#: seconds a repeated warning or error is counted, not written
REPEAT_INTERVAL_S = 10.0
#: the attributes every LogRecord has: the others are a call's ``extra`` fields
_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


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
        if record.exc_text:  # formatted already, and masked (stream.redact): never formatted again from exc_info
            out["exc"] = record.exc_text
        elif record.exc_info:
            out["exc"] = self.formatException(record.exc_info)
        if record.stack_info:
            out["stack"] = self.formatStack(record.stack_info)
        return orjson.dumps(out, default=repr).decode()


class Repeats(logging.Filter):
    """Counts, instead of writing, a warning or error repeated within ``interval`` s (module docstring)."""

    def __init__(self, interval: float = REPEAT_INTERVAL_S, clock: Callable[[], float] = time.monotonic) -> None:
        super().__init__()
        self.interval = interval
        self.clock = clock
        #: kind -> (when its window opened, records dropped in it)
        self._windows: dict[tuple[str, int, str], tuple[float, int]] = {}
        self._lock = threading.Lock()

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING:
            return True
        kind = (record.name, record.levelno, record.getMessage())
        now = self.clock()
        with self._lock:
            window = self._windows.get(kind)
            if window is not None and now - window[0] < self.interval:
                self._windows[kind] = (window[0], window[1] + 1)
                return False
            self._windows[kind] = (now, 0)
            if len(self._windows) > 10_000:  # many kinds (messages naming ever new ids): forget the old ones
                self._forget(now)
        if window is not None and window[1]:  # counted since it was last written, ``now - opened`` ago
            record.msg = f"{record.msg} (repeated {window[1]} times in the last {now - window[0]:.0f} s)"
            record.repeated = window[1]
        return True

    def _forget(self, now: float) -> None:
        for kind in [k for k, (opened, _) in self._windows.items() if now - opened >= self.interval]:
            del self._windows[kind]


def logging_config(fmt: LogFormat, level: str) -> dict[str, Any]:
    """The ``dictConfig`` of the worker's log: to stderr, in ``fmt``, at ``level``, repeats counted.

    Merged (``"merge": True``) into the one Faust's worker builds, so the text format stays Faust's."""
    handler: dict[str, Any] = {"level": level.upper(), "filters": ["repeats"]}
    if fmt == "json":
        handler.update({"class": "logging.StreamHandler", "formatter": "json"})
    else:
        handler.update({"class": "colorlog.StreamHandler", "formatter": "colored"})
    return {
        "merge": True,
        "formatters": {"json": {"()": f"{__name__}.JsonFormatter"}},
        "filters": {"repeats": {"()": f"{__name__}.Repeats"}},
        "handlers": {"default": handler},
        "root": {"level": level.upper(), "handlers": ["default"]},
    }


__all__ = ["REPEAT_INTERVAL_S", "JsonFormatter", "Repeats", "logging_config"]
