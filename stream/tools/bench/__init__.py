"""``mmr bench``: benchmarks measured side by side in one run (``command`` holds the command and
the table of benches; one module a bench)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any


def best_of(fn: Callable[[], Any], repeat: int) -> float:
    """The shortest of ``repeat`` runs of ``fn``, in seconds: the run least disturbed by other work."""
    best = math.inf
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best
