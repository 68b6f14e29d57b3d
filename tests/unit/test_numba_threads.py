"""numba's OpenMP workers sleep when idle unless the environment says otherwise (``stream._numba_threads``)."""

from __future__ import annotations

import os
import subprocess
import sys

_SHOW = "import os, stream; print(os.environ.get('OMP_WAIT_POLICY'))"


def _policy_after_import(env: dict[str, str]) -> str:
    done = subprocess.run([sys.executable, "-c", _SHOW], env=env, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def test_importing_stream_makes_idle_workers_sleep() -> None:
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
