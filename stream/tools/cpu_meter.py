"""CPU used by named processes over a window, from Linux's /proc (for ``mmr bench service``).

Why: on one small machine the worker shares its cores with the broker, Redis and the load
generator, so a latency measured there says little without how busy each of them was. The
test broker's (Tansu's in-memory storage) own CPU grows with the records its partitions hold
(BENCHMARKS.md, "Service", entry 05fc931). Reads ``/proc/<pid>/stat`` (utime + stime,
children not included) and ``/proc/stat``; where they are missing (not Linux, a process that
is gone) the figure is left out rather than guessed.
"""

from __future__ import annotations

import os
import time


def peak_rss_mib(pid: int) -> float | None:
    """The peak resident memory of a live process so far (``VmHWM``), MiB; None if unreadable."""
    try:
        with open(f"/proc/{pid}/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 1024  # kB
    except (OSError, ValueError, IndexError):
        return None
    return None


def _proc_ticks(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rindex(")") + 2:].split()  # the command name may hold spaces and parentheses
    return int(fields[11]) + int(fields[12])  # utime, stime (fields 14 and 15 of proc(5))


def _machine_ticks() -> tuple[int, int] | None:
    """(busy, total) clock ticks of all CPUs since boot."""
    try:
        with open("/proc/stat") as f:
            cpu = [int(x) for x in f.readline().split()[1:]]
    except (OSError, ValueError):
        return None
    idle = cpu[3] + (cpu[4] if len(cpu) > 4 else 0)  # idle + iowait
    return sum(cpu) - idle, sum(cpu)


class CpuMeter:
    """``start()``, then ``stop()`` gives the cores each named process used in between
    (1.0 = one core busy all the time) and the share of the whole machine that was busy
    (left out when no clock tick passed in the window: there is nothing to divide by)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._hz = os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 100
        self._t0 = 0.0
        self._start: dict[str, int | None] = {}
        self._machine: tuple[int, int] | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = {name: _proc_ticks(pid) for name, pid in self.pids.items()}
        self._machine = _machine_ticks()

    def stop(self) -> dict[str, float]:
        elapsed = time.monotonic() - self._t0
        out: dict[str, float] = {}
        if elapsed <= 0:
            return out
        for name, pid in self.pids.items():
            before, after = self._start.get(name), _proc_ticks(pid)
            if before is not None and after is not None:
                out[name] = round((after - before) / self._hz / elapsed, 3)
        end = _machine_ticks()
        if self._machine is not None and end is not None and end[1] > self._machine[1]:
            out["machine_busy_share"] = round((end[0] - self._machine[0]) / (end[1] - self._machine[1]), 3)
        return out
