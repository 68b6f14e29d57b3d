"""stream.runtime.thread_names: the worker's helper threads carry their names for the OS."""

from __future__ import annotations

import sys
import threading
from pathlib import Path

import pytest

from stream.runtime.thread_names import named_executor

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def _os_name(tid: int) -> str:
    return Path(f"/proc/self/task/{tid}/comm").read_text().strip()


def test_a_named_executor_names_its_thread_then_runs_the_initializer() -> None:
    ran: list[str] = []

    def init(tag: str) -> None:
        ran.append(f"{tag} on {_os_name(threading.get_native_id())}")

    with named_executor("mmr-test-pool", init, ("init",)) as ex:
        tid, py_name = ex.submit(lambda: (threading.get_native_id(), threading.current_thread().name)).result()
        assert _os_name(tid) == "mmr-test-pool"
        assert py_name.startswith("mmr-test-pool")
    assert ran == ["init on mmr-test-pool"]
    assert _os_name(threading.get_native_id()) != "mmr-test-pool"  # the caller's own name is untouched
