"""The worker's helper threads named for the operating system, not only for Python.

Why: before Python 3.14 a ``threading`` name stays inside the interpreter, and the kernel calls every
thread of the worker by the process's name ("mmr"). ``top -H``, ``ps -L``, py-spy's native view and
``/proc/PID/task/*/comm`` then cannot tell the kernels' thread from a step's end or a commit's frames,
and neither can ``mmr bench service``, which reports each thread's time on a core, waiting for one and
asleep by these names (``stream.tools.bench.cpu_meter.ThreadTimes``). Linux keeps the first 15 bytes of a
name; where the platform has no thread names the call does nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from setproctitle import setthreadtitle

#: the OS names of the worker's threads (at most 15 bytes each)
NUMBA = "mmr-numba"
FRAMES = "mmr-frames"
HEALTH = "mmr-health"
HTTP = "mmr-http"


def name_os_thread(name: str) -> None:
    """Give the calling thread ``name`` for the operating system."""
    setthreadtitle(name)


def named_executor(name: str, initializer: Callable[..., object] | None = None,
                   initargs: tuple[Any, ...] = ()) -> ThreadPoolExecutor:
    """An executor of one thread called ``name`` by Python (``name_0``) and by the OS, which then
    runs ``initializer(*initargs)``."""
    return ThreadPoolExecutor(1, thread_name_prefix=name, initializer=_start, initargs=(name, initializer, initargs))


def _start(name: str, initializer: Callable[..., object] | None, initargs: tuple[Any, ...]) -> None:
    name_os_thread(name)
    if initializer is not None:
        initializer(*initargs)
