"""Threads that do a step's side work at a lower scheduling priority than the rating thread.

Why: the worker's rating thread (its numba executor) is its critical path: each step is rated
as soon as the step before it has its beliefs, so any time the rating thread waits for a core
adds to the run. Beside it, helper threads make a step's messages, explanations and commit rows
(``mmr-step-end``) and write its commit's frames (``mmr-frames``). Their work has slack: it is
needed when the step's commit is sent, which waits for the commit before it to land anyway. On
a machine whose cores are shared -- two cores with Redis, the broker and a publisher, as in
``mmr bench service --history`` -- the scheduler gave them the same share of a core as the
rating thread. With a higher nice value (``MMR_HELPER_NICE`` more than the process's) they run
on what the rating thread leaves. Measured on the Codeforces history through the worker: the
worker's wall 12.0-13.2 s (median 12.8) against 12.3-14.0 s (13.25), 2 benches of 3 runs
alternated (BENCHMARKS.md, "Service"). On cores with room to spare it changes nothing.

Linux gives each thread its own nice value (``setpriority`` on the thread's id); elsewhere the
threads keep the process's. Raising a nice value needs no privilege.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

log = logging.getLogger(__name__)

_nice = 0  # how much higher a helper thread's nice value is than its creator's (``configure``)


def configure(nice: int) -> None:
    """Helper threads made from now on run ``nice`` steps below their creator's priority (0: the same)."""
    global _nice
    _nice = max(0, nice)


def helper_executor(name: str) -> ThreadPoolExecutor:
    """One thread named ``name`` for a step's side work, at the priority ``configure`` set."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=_lower_priority, initargs=(_nice,))


def _lower_priority(nice: int) -> None:
    if nice <= 0 or sys.platform != "linux":
        return
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + nice))
    except OSError as exc:  # (a sandbox that forbids it: the thread keeps its priority)
        log.warning("could not lower the priority of thread %s: %s", threading.current_thread().name, exc)
