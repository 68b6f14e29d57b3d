"""numba's OpenMP workers sleep when idle unless the environment says otherwise (``stream.runtime.threads``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from stream.runtime.threads import configure, cpu_quota

#: a module that compiles kernels: importing it configures numba (``stream.runtime.configured``)
_SHOW = "import os, stream.runtime.copies; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy_after_import(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_importing_a_kernel_module_makes_idle_workers_sleep() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _policy_after_import(env) == "PASSIVE"


def test_a_wait_policy_of_the_environment_is_kept() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    assert _policy_after_import({**env, "OMP_WAIT_POLICY": "ACTIVE"}) == "ACTIVE"


def test_the_policy_is_set_before_numba_loads_its_threading_layer() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    code = ("import stream, sys; from stream.ratings import cowan; "
            "print(any('omppool' in m or 'workqueue' in m or 'tbbpool' in m for m in sys.modules))")
    done = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"


def _cgroup(tmp_path: Path, files: dict[str, str], self_cgroup: str) -> tuple[Path, Path]:
    root = tmp_path / "cgroup"
    for rel, text in files.items():
        (root / rel).parent.mkdir(parents=True, exist_ok=True)
        (root / rel).write_text(text)
    root.mkdir(parents=True, exist_ok=True)
    proc = tmp_path / "self-cgroup"
    proc.write_text(self_cgroup)
    return root, proc


def test_a_cgroup_v2_quota_is_read_from_the_process_cgroup_and_its_ancestors(tmp_path: Path) -> None:
    root, proc = _cgroup(tmp_path, {"cpu.max": "max 100000\n", "pods/cpu.max": "250000 100000\n",
                                    "pods/worker/cpu.max": "max 100000\n"}, "0::/pods/worker\n")
    assert cpu_quota(root, proc) == 2.5  # the parent's quota bounds the child without one
    root, proc = _cgroup(tmp_path / "b", {"cpu.max": "max 100000\n"}, "0::/\n")
    assert cpu_quota(root, proc) is None


def test_a_cgroup_v1_quota_is_read_from_the_cpu_controllers_hierarchy(tmp_path: Path) -> None:
    files = {"cpu/cpu.cfs_quota_us": "-1\n", "cpu/cpu.cfs_period_us": "100000\n",
             "cpu/docker/abc/cpu.cfs_quota_us": "150000\n", "cpu/docker/abc/cpu.cfs_period_us": "100000\n"}
    root, proc = _cgroup(tmp_path, files, "5:cpuset:/\n4:cpu,cpuacct:/docker/abc\n")
    assert cpu_quota(root, proc) == 1.5
    # a container that shows its own cgroup as the mount's root, under a path that does not exist there
    files = {"cpu/cpu.cfs_quota_us": "200000\n", "cpu/cpu.cfs_period_us": "100000\n"}
    root, proc = _cgroup(tmp_path / "b", files, "4:cpu,cpuacct:/docker/abc\n")
    assert cpu_quota(root, proc) == 2.0


def test_numba_threads_follow_a_quota_below_the_cpus_unless_the_environment_sets_them(tmp_path: Path) -> None:
    cpus = len(os.sched_getaffinity(0))
    root, proc = _cgroup(tmp_path, {"cpu.max": f"{100000 * cpus - 50000} 100000\n"}, "0::/\n")
    env: dict[str, str] = {}
    configure(env, root, proc)
    assert env["OMP_WAIT_POLICY"] == "PASSIVE"
    assert "NUMBA_NUM_THREADS" not in env  # rounded up, all the CPUs: numba's default
    root, proc = _cgroup(tmp_path / "b", {"cpu.max": "50000 100000\n"}, "0::/\n")
    env = {}
    configure(env, root, proc)
    assert env.get("NUMBA_NUM_THREADS") == (None if cpus == 1 else "1")
    env = {"NUMBA_NUM_THREADS": "7"}
    configure(env, root, proc)
    assert env["NUMBA_NUM_THREADS"] == "7"
    env = {}
    configure(env, tmp_path / "none", tmp_path / "none-cgroup")  # no cgroup files: numba's default
    assert "NUMBA_NUM_THREADS" not in env


def test_cgroup_files_not_as_documented_leave_numbas_default(tmp_path: Path) -> None:
    """Odd lines, a relative path, a quota that is not a number: no quota read, and importing goes on."""
    for files, self_cgroup in (({"cpu.max": "lots 100000\n"}, "0::/\n"),
                               ({"cpu.max": "max\n"}, "garbage\n\n0::relative/path\n"),
                               ({"cpu/cpu.cfs_quota_us": "x\n", "cpu/cpu.cfs_period_us": "100000\n"}, "oops\n4:cpu\n")):
        root, proc = _cgroup(tmp_path / str(len(self_cgroup)), files, self_cgroup)
        assert cpu_quota(root, proc) is None
        env: dict[str, str] = {}
        configure(env, root, proc)
        assert "NUMBA_NUM_THREADS" not in env
    root, proc = _cgroup(tmp_path / "rel", {"pods/cpu.max": "100000 100000\n"}, "0::pods\n")
    assert cpu_quota(root, proc) == 1.0  # a path without its leading slash is taken from the root
