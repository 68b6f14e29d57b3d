"""``stream.helper_threads``: a step's side work runs below the rating thread's priority (``MMR_HELPER_NICE``)."""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Iterator

import pytest

from stream import helper_threads
from stream.service.config import from_env


def _nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.fixture
def restored() -> Iterator[None]:
    yield
    helper_threads.configure(0)


@pytest.mark.skipif(sys.platform != "linux", reason="a nice value per thread is Linux's")
def test_a_helper_thread_runs_at_its_creators_nice_value_plus_the_setting(restored: None) -> None:
    own = _nice()
    helper_threads.configure(5)
    with helper_threads.helper_executor("t-low") as ex:
        low, name = ex.submit(lambda: (_nice(), threading.current_thread().name)).result()
    assert low == min(19, own + 5) and name.startswith("t-low")
    assert _nice() == own  # the creating thread keeps its own
    helper_threads.configure(0)
    with helper_threads.helper_executor("t-same") as ex:
        assert ex.submit(_nice).result() == own


def test_the_helper_nice_setting_is_0_to_19() -> None:
    assert from_env({}).helper_nice == 10
    assert from_env({"MMR_HELPER_NICE": "0"}).helper_nice == 0
    for bad in ("-1", "20"):
        with pytest.raises(ValueError, match=f"MMR_HELPER_NICE={bad}"):
            from_env({"MMR_HELPER_NICE": bad})
