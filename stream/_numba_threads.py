"""How numba's parallel kernels' worker threads wait between parallel regions.

Why
---
numba runs ``prange`` loops on its OpenMP threading layer here (GNU libgomp). Left to its
default, libgomp's idle worker keeps its core busy polling for a while after every parallel
region: at the end of each conflict-free wave of Cowan's matches while the other thread
finishes its share, and after each kernel call while the Python side of the pipeline
reads the next batch, looks up its players and stores the results. On a machine with few
cores that polling takes the core the history's read-ahead thread, the main thread or another
process needs: it costs an embedded Cowan replay about a quarter more CPU time than idle
workers that sleep, and the wall time grows with it (BENCHMARKS.md, Cowan).
``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at once; the cost is a wake-up
(microseconds) per parallel region, a wave of thousands of matches.

libgomp reads the variable when it is loaded, which numba does at the first parallel
kernel call, after ``stream`` is imported; a value already in the environment is kept.
"""

from __future__ import annotations

import os

WAIT_POLICY = "PASSIVE"


def configure() -> None:
    """``OMP_WAIT_POLICY`` to ``PASSIVE`` unless the environment sets it."""
    os.environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
