"""How numba's parallel kernels' threads wait, and how many there are.

Waiting: numba's OpenMP layer (GNU libgomp) lets an idle worker poll its core for a while after
every parallel region (each wave of Cowan's matches, each kernel call). On a machine with few cores
that takes the core the read-ahead thread, the main thread or another process needs: more CPU time
and a longer replay. ``OMP_WAIT_POLICY=PASSIVE`` makes them sleep at once, for a wake-up of
microseconds per region.

How many: numba starts one thread per CPU it may run on, but a container limited by a CPU quota
(``limits.cpu``, ``docker run --cpus``) still sees every core of its node, and a region split 32 ways
spends a 2-CPU quota in bursts the kernel then throttles. So, unless ``NUMBA_NUM_THREADS`` is set,
the number is the quota rounded up (``cpu_quota``) where that is fewer than the CPUs.

Both variables are read when libgomp and numba load, after ``stream.runtime.configure`` set them
(values already in the environment are kept).
"""

from __future__ import annotations

import math
import os
from collections.abc import MutableMapping
from pathlib import Path, PurePosixPath

WAIT_POLICY = "PASSIVE"

CGROUP_ROOT = Path("/sys/fs/cgroup")


def configure(environ: MutableMapping[str, str] = os.environ, root: Path = CGROUP_ROOT,
              self_cgroup: Path = Path("/proc/self/cgroup")) -> None:
    """``OMP_WAIT_POLICY`` to ``PASSIVE`` unless the environment sets it; ``NUMBA_NUM_THREADS`` to the CPU
    quota, rounded up, where the process has one below its CPUs and the environment does not set it."""
    environ.setdefault("OMP_WAIT_POLICY", WAIT_POLICY)
    if "NUMBA_NUM_THREADS" in environ:
        return
    try:
        quota = cpu_quota(root, self_cgroup)
    except (OSError, ValueError, IndexError):  # a cgroup file not as documented: numba's own default
        quota = None
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    if quota is not None and math.ceil(quota) < cpus:
        environ["NUMBA_NUM_THREADS"] = str(max(1, math.ceil(quota)))


def cpu_quota(root: Path = CGROUP_ROOT, self_cgroup: Path = Path("/proc/self/cgroup")) -> float | None:
    """The CPUs this process's cgroup may use per period, the smallest over it and its ancestors (None: no
    quota, or no cgroup file to read). cgroup v2 (``root/cpu.max``: "QUOTA PERIOD" or "max PERIOD") or v1
    (``root/cpu/cpu.cfs_quota_us``, −1 for none, and ``cpu.cfs_period_us``). The process's cgroup is found
    from ``self_cgroup``; where a container shows its own cgroup as the root, the root's files are read."""
    try:
        lines = self_cgroup.read_text().splitlines()
    except OSError:
        lines = []
    if (root / "cpu.max").exists() or not (root / "cpu").is_dir():  # v2 (unified)
        path = next((ln[3:] for ln in lines if ln.startswith("0::")), "/")
        mount, read = root, _v2
    else:  # v1: the ``cpu`` controller's hierarchy
        fields = [ln.split(":", 2) for ln in lines]
        path = next((f[2] for f in fields if len(f) == 3 and "cpu" in f[1].split(",")), "/")
        mount, read = root / "cpu", _v1
    found = [q for d in _dirs(mount, path) if (q := read(d)) is not None]
    return min(found) if found else None


def _dirs(mount: Path, path: str) -> list[Path]:
    """``mount`` joined with ``path`` and each of its ancestors up to ``mount`` itself, those that exist."""
    rel = PurePosixPath("/", path.strip()).relative_to("/")
    out = [mount / p for p in (rel, *rel.parents)]
    return [d for d in dict.fromkeys(out) if d.is_dir()]


def _v2(d: Path) -> float | None:
    try:
        quota, period = (d / "cpu.max").read_text().split()[:2]
        if quota == "max" or int(period) <= 0:
            return None
        return int(quota) / int(period)
    except (OSError, ValueError):
        return None


def _v1(d: Path) -> float | None:
    try:
        quota = int((d / "cpu.cfs_quota_us").read_text())
        period = int((d / "cpu.cfs_period_us").read_text())
    except (OSError, ValueError):
        return None
    return None if quota <= 0 or period <= 0 else quota / period
