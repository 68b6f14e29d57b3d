"""``mmr bench``: benchmarks measured side by side in one run (``command`` holds the command and
the table of benches; one module a bench), and the timing they share."""

from __future__ import annotations

import math
import os
import subprocess
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any, NamedTuple

import click
import orjson


def best_times(fn: Callable[[], Any], repeat: int) -> tuple[float, float]:
    """The shortest wall and the shortest CPU time (all threads of the process) of ``repeat`` runs of
    ``fn``, in seconds: the runs least disturbed by other work. On a shared machine the CPU time is
    the honest per-core measure: wall time also counts waiting for a core."""
    wall = cpu = math.inf
    for _ in range(repeat):
        t, c = time.perf_counter(), time.process_time()
        fn()
        wall = min(wall, time.perf_counter() - t)
        cpu = min(cpu, time.process_time() - c)
    return wall, cpu


class Run(NamedTuple):
    """One process: wall and CPU seconds, peak resident memory (MiB)."""

    wall: float
    cpu: float
    max_rss_mib: float


def timed(argv: list[str], env: Mapping[str, str] | None = None) -> Run:
    """Run ``argv`` to completion (its output discarded); a failure raises ClickException. The CPU
    time and peak memory are the process's own, from ``wait4`` (not the largest of all children)."""
    t = time.perf_counter()
    with subprocess.Popen(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE) as proc:
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - t
        proc.returncode = os.waitstatus_to_exitcode(status)
        err = proc.stderr.read().decode(errors="replace") if proc.stderr else ""
    if proc.returncode:
        raise click.ClickException(f"{' '.join(argv[:4])} ... exited with {proc.returncode}: {err[-2000:]}")
    return Run(wall, usage.ru_utime + usage.ru_stime, usage.ru_maxrss / 1024)


def alternated(sides: Sequence[tuple[str, list[str]]], pairs: int) -> Iterator[dict[str, Run]]:
    """Each program of ``sides`` (label, argv) as a whole process, ``pairs`` times, the order flipped
    every pair so that a shared machine's load falls on both alike: each pair's runs by label."""
    for pair in range(pairs):
        yield {label: timed(argv) for label, argv in (sides[::-1] if pair % 2 else sides)}


def load_average() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def openskill_loop(path: str) -> int:
    """Rate every match of an event JSONL with openskill's PlackettLuce, one call per match: the
    program ``mmr bench cowan`` runs beside the embedded replay. Here, not in ``cowan``, so that its
    process imports no numba."""
    from openskill.models import PlackettLuce

    model = PlackettLuce()
    ratings: dict[str, Any] = {}
    new = model.rating
    n = 0
    with open(path, "rb") as fh:
        for line in fh:
            m = orjson.loads(line)
            a, b, score = m["a"], m["b"], m["score"]
            ra = ratings.get(a) or new()
            rb = ratings.get(b) or new()
            ranks = [1.0, 2.0] if score == 1.0 else [2.0, 1.0] if score == 0.0 else [1.0, 1.0]
            (na,), (nb,) = model.rate([[ra], [rb]], ranks=ranks)
            ratings[a] = na
            ratings[b] = nb
            n += 1
    return n
