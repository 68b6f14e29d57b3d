"""mmr-stream: a streaming skill-rating service (Elo-MMR, Cowan's system, baselines)."""

from stream import _numba_cache

_numba_cache.configure()  # before any kernel module is imported (see its docstring)

__version__ = "0.1.0"
