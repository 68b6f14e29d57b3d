"""Say on stderr when numba compiles kernels, and how long that took.

Why: a fresh install or an edit of the kernels' sources compiles every kernel a command needs at
its first use, a long silent wait otherwise (``mmr warm`` compiles them all ahead). numba
broadcasts ``numba:compile`` only when a dispatcher really compiles (its cache missed), so the
notice appears exactly then and never with a warm cache. stderr: stdout may carry data.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, TextIO

import numba
from numba.core import event

PREFIX = "mmr: "
WARM_HINT = "; `mmr warm` compiles them all ahead"


def cache_location() -> str:
    """Where numba keeps what it compiles: its configured directory, else beside each module."""
    where: str = getattr(numba.config, "CACHE_DIR", "") or "__pycache__ beside each module"
    return where


class CompileTimer(event.Listener):  # type: ignore[misc]
    """Counts and times top-level compilations (a kernel compiles its callees inside its own
    event); announces the first one on ``out``. numba holds its compiler lock around each
    event, so the calls never overlap."""

    def __init__(self, out: TextIO, hint: str = "") -> None:
        self.out = out
        self.hint = hint
        self.kernels = 0
        self.seconds = 0.0
        self._depth = 0
        self._started = 0.0

    def on_start(self, ev: Any) -> None:
        if self._depth == 0:
            if self.kernels == 0:
                print(f"{PREFIX}compiling rating kernels for this machine (once; cached in "
                      f"{cache_location()}{self.hint})", file=self.out, flush=True)
            self._started = time.perf_counter()
        self._depth += 1

    def on_end(self, ev: Any) -> None:
        self._depth -= 1
        if self._depth == 0:
            self.kernels += 1
            self.seconds += time.perf_counter() - self._started

    def summary(self) -> str:
        return f"{PREFIX}compiling rating kernels: done in {self.seconds:.1f} s ({self.kernels} kernels)"


@contextmanager
def compile_notice(out: TextIO | None = None, hint: str = WARM_HINT) -> Iterator[CompileTimer]:
    """While inside: the first compilation prints a notice on ``out`` (stderr), ending with
    ``hint``, and leaving prints how long all of them took (nothing at all when every kernel
    came from the cache)."""
    timer = CompileTimer(sys.stderr if out is None else out, hint)
    event.register("numba:compile", timer)
    try:
        yield timer
    finally:
        event.unregister("numba:compile", timer)
        if timer.kernels:
            print(timer.summary(), file=timer.out, flush=True)
