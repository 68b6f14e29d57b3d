"""The worker's Faust logging: the root logger keeps the configured level (``worker.faust_worker``).

Faust's own worker, at WARNING or above, sets the root logger to DEBUG to drive a terminal spinner,
so every ``log.debug`` in aiokafka, Faust and the worker would build a record for nothing."""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Iterator

import faust
import pytest

from stream.service.worker import faust_worker


@pytest.fixture
def root_logging() -> Iterator[None]:
    root = logging.getLogger()
    level, handlers = root.level, list(root.handlers)
    try:
        yield
    finally:
        root.handlers[:] = handlers
        root.setLevel(level)


def _setup(worker: faust.Worker) -> None:
    worker.redirect_stdouts = False  # (it would leave sys.stdout a logger for the rest of the session)
    worker._setup_logging()  # what ``execute_from_commandline`` does first (mode.Worker)


@pytest.mark.parametrize("level", ["warning", "error", "info"])
def test_the_root_logger_keeps_the_configured_level(root_logging: None, level: str) -> None:
    loop = asyncio.new_event_loop()
    try:
        _setup(faust_worker(faust.App("log-level-test", broker="kafka://127.0.0.1:1"), level, loop))
        assert logging.getLogger().getEffectiveLevel() == logging.getLevelName(level.upper())
        assert not logging.getLogger("aiokafka.conn").isEnabledFor(logging.DEBUG)
    finally:
        loop.close()


def test_faust_alone_would_log_everything_at_warning(root_logging: None) -> None:
    """Why ``faust_worker`` exists: if Faust stops doing this, the guard can go."""
    loop = asyncio.new_event_loop()
    try:
        _setup(faust.Worker(faust.App("log-level-test", broker="kafka://127.0.0.1:1"), loglevel="warning", loop=loop))
        assert logging.getLogger().getEffectiveLevel() == logging.DEBUG
    finally:
        loop.close()


def test_repeated_records_are_limited_per_template_and_counted() -> None:
    from stream.service.worker import RepeatLimit

    limit = RepeatLimit(interval=10.0, burst=2)

    def record(msg: str, at: float, name: str = "aiokafka.conn") -> logging.LogRecord:
        r = logging.LogRecord(name, logging.ERROR, __file__, 1, msg, ("x",), None)
        r.created = at
        return r

    passed = [limit.filter(record("Unable connect to %s", t)) for t in (0.0, 0.1, 0.2, 0.3, 0.4)]
    assert passed == [True, True, False, False, False]
    assert limit.filter(record("Another message %s", 0.5))  # another template: its own count
    assert limit.filter(record("Unable connect to %s", 0.6, "aiokafka.client"))  # another logger too
    later = record("Unable connect to %s", 10.5)
    assert limit.filter(later)
    assert later.getMessage() == "Unable connect to x (3 more like it in the last 10 s left out)"


def test_the_limit_goes_on_each_library_logger() -> None:
    from stream.service.worker import limit_repeats

    logging.getLogger("aiokafka.mmr-test-child")
    limit = limit_repeats()
    try:
        assert limit in logging.getLogger("aiokafka.mmr-test-child").filters
        assert limit not in logging.getLogger("stream.service.app").filters
    finally:
        for name in list(logging.Logger.manager.loggerDict):
            logger = logging.getLogger(name)
            if limit in logger.filters:
                logger.removeFilter(limit)
