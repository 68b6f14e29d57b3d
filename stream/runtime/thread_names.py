"""The worker's helper threads named for the operating system, not only for Python.

Why: before Python 3.14 a ``threading`` name stays inside the interpreter, and the kernel calls every
thread by the process's name, so ``top -H``, py-spy and ``mmr bench service`` (which reports each
thread's time by these names) cannot tell the threads apart. Linux keeps the first 15 bytes of a name.
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
