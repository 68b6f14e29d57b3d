"""mmr-stream: a streaming skill-rating service (Elo-MMR, Cowan's system, baselines)."""

from stream.runtime import numba_cache as _numba_cache
from stream.runtime import threads as _numba_threads

_numba_cache.configure()  # before any kernel module is imported (see its docstring)
_numba_threads.configure()  # before numba loads its OpenMP layer (see its docstring)

__version__ = "0.1.0"
