"""stream.tools.bench.cpu_meter: what it reports and what it leaves out (no timing is asserted)."""

from __future__ import annotations

import os
import sys
import time

import pytest

from stream.tools.bench.cpu_meter import CpuMeter

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads Linux's /proc")


def test_reports_live_processes_and_leaves_out_gone_ones() -> None:
    gone = 2**22 + 12345  # above the default pid_max: no such process
    meter = CpuMeter({"me": os.getpid(), "gone": gone})
    meter.start()
    # Busy for a while of our own: /proc counts in clock ticks (10 ms), and a window in which
    # no tick passed on any CPU has no machine share to report (left out, not guessed).
    t0 = time.monotonic()
    while time.monotonic() - t0 < 0.2:
        sum(i * i for i in range(10_000))
    out = meter.stop()
    assert "gone" not in out
    assert out["me"] >= 0
    assert 0 <= out["machine_busy_share"] <= 1


def test_a_process_that_ends_during_the_window_is_left_out() -> None:
    import subprocess

    child = subprocess.Popen([sys.executable, "-c", "pass"])
    meter = CpuMeter({"child": child.pid})
    meter.start()
    child.wait()
    assert "child" not in meter.stop()


def test_thread_times_by_os_name_with_the_busy_thread_on_a_core() -> None:
    from stream.runtime.thread_names import named_executor
    from stream.tools.bench.cpu_meter import ThreadTimes

    def spin() -> None:
        t0 = time.monotonic()
        while time.monotonic() - t0 < 0.2:
            sum(i * i for i in range(10_000))

    times = ThreadTimes(os.getpid())
    times.start()
    with named_executor("mmr-test-gone") as gone:
        gone.submit(lambda: None).result()
    with named_executor("mmr-test-busy") as busy:
        busy.submit(spin).result()
        out = times.stop()
    assert "main" in out and "mmr-test-busy" in out
    assert "mmr-test-gone" not in out  # it ended within the window
    for row in out.values():
        assert set(row) == {"on_core_s", "waiting_for_core_s", "asleep_s"}
        assert min(row.values()) >= 0
    assert out["mmr-test-busy"]["on_core_s"] > 0


def test_thread_times_tells_threads_of_one_name_apart() -> None:
    from stream.runtime.thread_names import named_executor
    from stream.tools.bench.cpu_meter import ThreadTimes

    times = ThreadTimes(os.getpid())
    times.start()
    with named_executor("mmr-test-twin") as a, named_executor("mmr-test-twin") as b:
        a.submit(lambda: None).result()
        b.submit(lambda: None).result()
        out = times.stop()
    assert {"mmr-test-twin", "mmr-test-twin#2"} <= set(out)
