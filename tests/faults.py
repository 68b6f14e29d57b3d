"""Faults the tests install in the worker's code; none of them is reachable from a setting.

In a test process: ``rating_bug(pool)`` (a context manager) makes the rating step of ``pool`` raise,
as a bug in a kernel would. In a worker subprocess: ``python tests/faults.py [--crash-after-batches N]
[--rating-bug-pool POOL] worker [ARGS...]`` installs the faults, then runs the ``mmr`` command line
(``service_utils.WorkerProcess.faults`` builds that command).
"""

from __future__ import annotations

import os
import signal
import sys
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from typing import Any


def _rating_bug(pool: str) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """(the rating step as it is, the same with a bug for ``pool``)."""
    from stream.service import processor

    original = processor.rate_ops

    def buggy(engine: Any, *args: Any, **kwargs: Any) -> Any:
        if engine.pool == pool:
            raise RuntimeError(f"injected bug in the rating step of pool {engine.pool!r} (tests/faults.py)")
        return original(engine, *args, **kwargs)

    return original, buggy


def install_rating_bug(pool: str) -> None:
    """The rating step of ``pool`` raises from now on (this process)."""
    from stream.service import processor

    processor.rate_ops = _rating_bug(pool)[1]


@contextmanager
def rating_bug(pool: str) -> Iterator[None]:
    """The rating step of ``pool`` raises inside the block (a processor built there or before)."""
    from stream.service import processor

    original, buggy = _rating_bug(pool)
    processor.rate_ops = buggy
    try:
        yield
    finally:
        processor.rate_ops = original


def install_crash_after_batches(n: int) -> None:
    """The worker SIGKILLs itself in its ``n``-th batch, once a step of it (or the whole batch) is
    committed to Redis and before its ratings are handed to the producer: the worst moment for
    effectively-once delivery."""
    from stream.service.processor import Processor

    original = Processor.start
    started = [0]

    def die(*_: Any) -> None:
        os.kill(os.getpid(), signal.SIGKILL)

    async def start(self: Processor, msgs: Any, safe: bool = True, hand: Any = None) -> Any:
        started[0] += 1
        if started[0] < n:
            return await original(self, msgs, safe, hand)

        def handing(outputs: Sequence[Any]) -> None:
            die()

        await original(self, msgs, safe, None if hand is None else handing)
        die()  # the batch is committed, and its awaiting task has not resumed to publish

    Processor.start = start  # type: ignore[method-assign]


def main(argv: list[str]) -> None:
    args = list(argv)
    while args and args[0].startswith("--"):
        flag, value = args.pop(0), args.pop(0)
        if flag == "--crash-after-batches":
            install_crash_after_batches(int(value))
        elif flag == "--rating-bug-pool":
            install_rating_bug(value)
        else:
            raise SystemExit(f"faults.py: unknown option {flag}")
    from stream.cli import main as mmr

    sys.argv = ["mmr", *args]
    mmr()


if __name__ == "__main__":
    main(sys.argv[1:])
