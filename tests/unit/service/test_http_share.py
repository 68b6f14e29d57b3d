"""The HTTP thread's CPU share (stream.service.http.CpuShare): a thread that calls ``tick`` between
pieces of work takes at most its share of a CPU, resting (GIL released) for the rest."""

from __future__ import annotations

import threading
import time

from stream.service.http import CpuShare


def _burn(share: float, seconds: float) -> tuple[float, float, float]:
    """(CPU seconds, wall seconds, seconds rested) of a thread that computes for ``seconds``, ticking every
    millisecond of work."""
    out: list[float] = []

    def run() -> None:
        cpu = CpuShare(share)
        t0, c0 = time.monotonic(), time.thread_time()
        while time.monotonic() - t0 < seconds:
            end = time.thread_time() + 0.001
            while time.thread_time() < end:
                pass
            cpu.tick()
        out.extend((time.thread_time() - c0, time.monotonic() - t0, cpu.rested))

    thread = threading.Thread(target=run)
    thread.start()
    thread.join()
    return out[0], out[1], out[2]


def test_a_busy_thread_takes_at_most_its_share() -> None:
    used, wall, rested = _burn(0.25, 1.0)
    # an upper bound: a machine short of CPU gives the thread less, never more
    assert used / wall <= 0.25 + 0.05, (used, wall)
    assert rested > 0  # by resting (how long depends on how much CPU the machine gave it meanwhile)


def test_a_thread_under_its_share_never_rests() -> None:
    cpu = CpuShare(0.5)
    for _ in range(20):
        time.sleep(0.01)  # idle: no CPU
        cpu.tick()
    assert cpu.rested == 0.0
