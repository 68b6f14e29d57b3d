"""The worker's log (stream.service.logs, stream.service.batch_log): JSON lines, repeats counted, a line a batch."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from stream.service import batch_log, logs


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO, logs.Repeats, Clock]]:
    """A logger writing JSON lines to a buffer through the worker's handler setup, with a settable clock."""
    out, clock = io.StringIO(), Clock()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    repeats = logs.Repeats(clock=clock)
    handler.addFilter(repeats)
    log = logging.getLogger("test.logs")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, out, repeats, clock
    log.handlers.clear()


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_carry_time_level_logger_message_extra_and_traceback(capture: tuple) -> None:
    log, out, _, _ = capture
    log.info("rated %d events", 5, extra={"pool": "chess", "events": 5})
    try:
        raise KeyError("x")
    except KeyError:
        log.exception("a step failed\nover two lines")
    info, error = _lines(out)
    assert out.getvalue().count("\n") == 2  # one object a line, a traceback included
    assert info["message"] == "rated 5 events" and info["level"] == "INFO" and info["logger"] == "test.logs"
    assert (info["pool"], info["events"]) == ("chess", 5)
    assert str(info["time"]).endswith("Z") and str(info["time"])[:4].isdigit()
    assert error["level"] == "ERROR" and "KeyError: 'x'" in str(error["exc"])
    assert error["message"] == "a step failed\nover two lines"


def test_repeated_errors_are_written_once_an_interval_with_their_count(capture: tuple) -> None:
    log, out, repeats, clock = capture
    for i in range(459):  # a broker outage: the same error many a second
        log.error("connection to node %d failed", 1)
        log.info("batch %d", i)  # below WARNING: never held back
        clock.now += 0.01
    log.warning("another warning")
    assert [r["message"] for r in _lines(out) if r["level"] == "ERROR"] == ["connection to node 1 failed"]
    clock.now += repeats.interval
    log.error("connection to node %d failed", 1)
    lines = _lines(out)
    errors = [r for r in lines if r["level"] == "ERROR"]
    assert errors[-1]["message"] == "connection to node 1 failed (repeated 458 times in the last 15 s)"
    assert errors[-1]["repeated"] == 458
    assert sum(r["level"] == "INFO" for r in lines) == 459
    assert [r["message"] for r in lines if r["level"] == "WARNING"] == ["another warning"]
    clock.now += 0.5  # a new interval began with the line just written: the next one is held again
    log.error("connection to node %d failed", 1)
    assert len([r for r in _lines(out) if r["level"] == "ERROR"]) == 2
    # one template, another message: written (a "resuming" right after its "pausing")
    log.error("connection to node %d failed", 2)
    log.warning("%s fetching", "pausing")
    log.warning("%s fetching", "resuming")
    lines = _lines(out)
    assert [r["message"] for r in lines[-3:]] == ["connection to node 2 failed", "pausing fetching",
                                                  "resuming fetching"]


def test_the_worker_config_builds_the_json_handler_with_the_filter() -> None:
    config = logs.logging_config("json", "info")
    assert config.pop("merge") is True
    handler = config["handlers"]["default"]
    assert handler["formatter"] == "json" and handler["filters"] == ["repeats"] and handler["level"] == "INFO"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False, **config})
        [h] = root.handlers
        assert isinstance(h.formatter, logs.JsonFormatter) and any(isinstance(f, logs.Repeats) for f in h.filters)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_batch_is_one_info_line_with_its_numbers(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="stream.service.batches"):
        batch_log.batch_done(12, {"match_batch": 2, "match": 10, "round": 1}, 25, 1, 3, 0.0123)
    [rec] = caplog.records
    assert rec.getMessage() == "batch: 12 messages, 11 events, 25 ratings, 1 dead letters, 3 pools in 0.012 s"
    assert (rec.events, rec.ratings, rec.pools, rec.duration_s) == (11, 25, 3, 0.0123)  # type: ignore[attr-defined]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stream.service.batches"):
        batch_log.batch_done(1, {}, 0, 0, 0, 0.0)
    assert caplog.records == []


def test_a_traceback_formatted_already_is_written_as_it_is() -> None:
    """stream.redact masks a record's traceback into ``exc_text``: the JSON line takes that one, never
    the traceback formatted again from ``exc_info``."""
    try:
        raise ValueError("password hunter2")
    except ValueError as exc:
        record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", (), (type(exc), exc, exc.__traceback__))
    record.exc_text = "ValueError: password **********"
    line = json.loads(logs.JsonFormatter().format(record))
    assert line["exc"] == "ValueError: password **********" and "hunter2" not in json.dumps(line)
