"""The worker's log (stream.service.logs): JSON lines, a line a batch."""

from __future__ import annotations

import io
import json
import logging
import logging.config
from collections.abc import Iterator

import pytest

from stream.service import logs


@pytest.fixture
def capture() -> Iterator[tuple[logging.Logger, io.StringIO]]:
    """A logger writing JSON lines to a buffer, as the worker's handler does."""
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.setFormatter(logs.JsonFormatter())
    log = logging.getLogger("test.logs")
    log.handlers[:] = [handler]
    log.setLevel(logging.INFO)
    log.propagate = False
    yield log, out
    log.handlers.clear()


def _lines(out: io.StringIO) -> list[dict[str, object]]:
    return [json.loads(line) for line in out.getvalue().splitlines()]


def test_json_lines_carry_time_level_logger_message_extra_and_traceback(capture: tuple) -> None:
    log, out = capture
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


def test_the_worker_config_builds_the_json_handler() -> None:
    config = logs.logging_config("json", "info")
    assert config.pop("merge") is True
    handler = config["handlers"]["default"]
    assert handler["formatter"] == "json" and handler["level"] == "INFO"
    root = logging.getLogger()
    handlers, level = root.handlers[:], root.level
    try:
        logging.config.dictConfig({"version": 1, "disable_existing_loggers": False, **config})
        [h] = root.handlers
        assert isinstance(h.formatter, logs.JsonFormatter)
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def test_a_batch_is_one_info_line_with_its_numbers(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.INFO, logger="stream.service.batches"):
        logs.batch_done(12, {"match_batch": 2, "match": 10, "round": 1}, 25, 1, 3, 0.0123)
    [rec] = caplog.records
    assert rec.getMessage() == "batch: 12 messages, 11 events, 25 ratings, 1 dead letters, 3 pools in 0.012 s"
    assert (rec.events, rec.ratings, rec.pools, rec.duration_s) == (11, 25, 3, 0.0123)  # type: ignore[attr-defined]
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="stream.service.batches"):
        logs.batch_done(1, {}, 0, 0, 0, 0.0)
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


class _Settings:
    def __repr__(self) -> str:
        return "Settings(redis_url='redis://:json-extra-secret@h/0')"


def test_secrets_in_extra_fields_and_exception_text_are_masked(capture: tuple) -> None:
    """The record factory of stream.redact masks a record's message and traceback; the ``extra`` fields
    are set on the record after it, and a non-JSON value is written as its ``repr``: the formatter masks
    every string of the line."""
    from stream import redact

    redact.install(["json-extra-secret"])
    log, out = capture
    log.warning("connecting", extra={"url": "redis://:json-extra-secret@h/0", "settings": _Settings(),
                                     "nested": {"tries": [1, "json-extra-secret"]}, "n": 3})
    err = ConnectionError("AUTH json-extra-secret refused")
    log.error("failed", extra={"error": err})
    record = logging.LogRecord("x", logging.ERROR, "f", 1, "failed", (), (type(err), err, None))
    out.write(logs.JsonFormatter().format(record) + "\n")  # a record made before install(): exc_info only
    text = out.getvalue()
    assert "json-extra-secret" not in text
    warn, error, raw = _lines(out)
    assert warn["url"] == f"redis://:{redact.MASK}@h/0" and warn["n"] == 3
    assert warn["nested"] == {"tries": [1, redact.MASK]} and redact.MASK in str(warn["settings"])
    assert error["error"] == f"ConnectionError('AUTH {redact.MASK} refused')"
    assert redact.MASK in str(raw["exc"])
