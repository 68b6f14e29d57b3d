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
