"""Runtime plumbing shared by the tools and the service: numba's cache, its threads and BLAS probe,
the notice while kernels compile, the copy loop of numba code and the names of the worker's threads.

Configuring numba
-----------------
``configure()`` points numba's cache at this package's directory (``numba_cache``) and sets how its
threads wait and how many there are (``threads``). Both work through environment variables that numba
and its OpenMP layer read when they are loaded, so they must be set before numba is imported; that is
why importing ``stream`` does none of it (a game server importing ``stream.client`` loads neither numba
nor numpy and keeps its environment as it was). It is done where kernels are needed:

* by every module that imports numba, through ``import stream.runtime.configured`` placed before its
  numba import (``tests/unit/runtime/test_runtime.py`` checks that each does), so no entry path can define a
  kernel in an unconfigured numba;
* explicitly by the entry points (the ``mmr`` CLI, the worker, the tools) before they import anything.

Calling it again does nothing.
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
