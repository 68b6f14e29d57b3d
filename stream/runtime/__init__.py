"""Runtime plumbing shared by the tools and the service: numba's cache, its threads and BLAS probe,
the notice while kernels compile, the copy loop of numba code and the names of the worker's threads.

``configure()`` points numba's cache at this package's directory (``numba_cache``) and sets its
threads (``threads``), through environment variables numba and OpenMP read when they load. So
importing ``stream`` does none of it (``stream.client`` loads neither numba nor numpy and leaves
the environment alone); it is done by every module that imports numba, through
``import stream.runtime.configured`` before its numba import (tests/unit/runtime/test_runtime.py
checks each does), and by the entry points. Calling it again does nothing.
"""

from __future__ import annotations

import functools

_configured = False


def configure() -> None:
    """Set numba's cache directory and threads (``numba_cache.configure``, ``threads.configure``), once."""
    global _configured
    if _configured:
        return
    from stream.runtime import numba_cache, threads

    numba_cache.configure()  # before any kernel is defined (numba_cache's docstring)
    threads.configure()  # before numba and its OpenMP layer load (threads' docstring)
    _configured = True


@functools.cache
def parallel_min_players() -> int:
    """Rounds of fewer players run the Elo-MMR kernels and the baselines' logistic sums on one thread:
    the setting ``MMR_ELO_PARALLEL_MIN`` (``stream.config.EngineSettings``), read at the first round
    that asks, not when a rating module is imported."""
    from stream.config import engine_settings

    return engine_settings().elo_parallel_min
