"""CPU used by named processes over a window, from Linux's /proc (for ``mmr bench service``).

Why: on one small machine the worker shares its cores with the broker, Redis and the load
generator, so a latency measured there says little without how busy each of them was. Where
/proc is missing (not Linux, a process that is gone) a figure is left out rather than guessed.
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


def _stat_fields(path: str) -> list[str] | None:
    """The fields of a ``/proc/.../stat`` after the command name, which may hold spaces and parentheses
    (field 3 of proc(5) is the first); None if unreadable."""
    try:
        with open(path) as f:
            stat = f.read()
    except OSError:
        return None
    return stat[stat.rindex(")") + 2:].split()


def _proc_ticks(pid: int) -> int | None:
    fields = _stat_fields(f"/proc/{pid}/stat")
    return None if fields is None else int(fields[11]) + int(fields[12])  # utime, stime (14 and 15 of proc(5))


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
    """``start()``, then ``stop()`` gives the cores each named process used in between (1.0 = one core
    busy all the time; ``stop(seconds=True)``: its CPU seconds) and the share of the whole machine that
    was busy (when a clock tick passed)."""

    def __init__(self, pids: dict[str, int]) -> None:
        self.pids = pids
        self._hz = os.sysconf("SC_CLK_TCK")
        self._t0 = 0.0
        self._start: dict[str, int | None] = {}
        self._machine: tuple[int, int] | None = None

    def start(self) -> None:
        self._t0 = time.monotonic()
        self._start = {name: _proc_ticks(pid) for name, pid in self.pids.items()}
        self._machine = _machine_ticks()

    def stop(self, seconds: bool = False) -> dict[str, float]:
        elapsed = time.monotonic() - self._t0
        out: dict[str, float] = {}
        if elapsed <= 0:
            return out
        for name, pid in self.pids.items():
            before, after = self._start.get(name), _proc_ticks(pid)
            if before is not None and after is not None:
                out[name] = round((after - before) / self._hz / (1.0 if seconds else elapsed), 3)
        end = _machine_ticks()
        if self._machine is not None and end is not None and end[1] > self._machine[1]:
            out["machine_busy_share"] = round((end[0] - self._machine[0]) / (end[1] - self._machine[1]), 3)
        return out


def _thread_times(pid: int) -> dict[int, tuple[str, int, int, float]]:
    """Each live thread of ``pid``: (OS name, ns on a core, ns runnable but waiting for one, start in seconds
    since boot); threads that end while read are left out."""
    out: dict[int, tuple[str, int, int, float]] = {}
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return out
    hz = os.sysconf("SC_CLK_TCK")
    for tid in tids:
        base = f"/proc/{pid}/task/{tid}"
        try:
            with open(f"{base}/comm") as f:
                name = f.read().strip()
            with open(f"{base}/schedstat") as f:
                on, waiting = (int(x) for x in f.read().split()[:2])
        except (OSError, ValueError):
            continue
        fields = _stat_fields(f"{base}/stat")
        if fields is None:
            continue
        out[int(tid)] = (name, on, waiting, int(fields[19]) / hz)  # starttime, field 22 of proc(5)
    return out


class ThreadTimes:
    """``start()``, then ``stop()`` gives, per thread of one process over the window, the seconds it spent
    on a core, runnable but waiting for a core, and asleep (waiting for work, a lock such as the GIL, or
    I/O), by the threads' OS names; the first thread is "main", threads of one name are numbered in the
    order they started ("mmr-numba#2"). A thread that ended within the window is left out.

    Why: the kernels' thread bounds a replay, and waiting for a core (the machine is short of cores) and
    sleeping (its next step is not ready, or the GIL is taken) ask for different remedies; py-spy tells
    neither apart from running. Reads ``/proc/PID/task/*/schedstat``; without it the result is empty."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self._start: dict[int, tuple[str, int, int, float]] = {}
        self._t0 = 0.0

    def start(self) -> None:
        self._t0 = time.clock_gettime(time.CLOCK_BOOTTIME)  # the clock of a thread's start in /proc
        self._start = _thread_times(self.pid)

    def stop(self) -> dict[str, dict[str, float]]:
        end, now = _thread_times(self.pid), time.clock_gettime(time.CLOCK_BOOTTIME)
        out: dict[str, dict[str, float]] = {}
        seen: dict[str, int] = {}
        for tid, (name, on, waiting, started) in sorted(end.items(), key=lambda kv: (kv[1][3], kv[0])):
            _, on0, waiting0, _ = self._start.get(tid, (name, 0, 0, started))
            if tid == self.pid:
                name = "main"
            seen[name] = seen.get(name, 0) + 1
            on_s, waiting_s = (on - on0) / 1e9, (waiting - waiting0) / 1e9
            alive = max(0.0, now - max(self._t0, started))
            out[name if seen[name] == 1 else f"{name}#{seen[name]}"] = {
                "on_core_s": round(on_s, 3), "waiting_for_core_s": round(waiting_s, 3),
                "asleep_s": round(max(0.0, alive - on_s - waiting_s), 3)}
        return out
