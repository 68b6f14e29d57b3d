"""numba's BLAS probe answered without importing ``scipy.linalg`` (``stream.runtime.blas``)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from repo_paths import ROOT

#: loads a Cowan kernel from numba's cache (or compiles it), then reports what was imported,
#: numba's BLAS flag, and a compiled ``np.dot`` and ``np.convolve``
_RUN = """
import json, sys
import numpy as np
from numba import njit
from stream.ratings.cowan.system import Cowan
Cowan().new_belief()
loaded = "scipy.linalg" in sys.modules
from numba.np import arraymath, linalg
flag, same = arraymath._HAVE_BLAS, arraymath.ensure_blas is linalg.ensure_blas
dot = njit(lambda x, y: np.dot(x, y))(np.arange(3.0), np.ones(3))
conv = njit(lambda x, y: np.convolve(x, y))(np.arange(3.0), np.ones(2)).tolist()
print(json.dumps([loaded, flag, same, dot, conv, "scipy.linalg" in sys.modules]))
"""


def _run(code: str) -> list[object]:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    return list(json.loads(out.stdout.strip().splitlines()[-1]))


def test_a_kernel_loads_without_scipy_linalg_and_numba_keeps_its_blas() -> None:
    """Loading a kernel does not import ``scipy.linalg``; numba's flag is the one its probe sets
    where SciPy is installed (True), its probe is its own again, and what uses a BLAS still
    compiles and runs (importing ``scipy.linalg`` then)."""
    loaded, flag, same, dot, conv, later = _run(_RUN)
    assert loaded is False
    assert flag is True and same is True
    assert dot == 3.0 and conv == [0.0, 1.0, 3.0, 2.0]
    assert later is True


def test_the_probe_is_left_alone_once_numba_ran_it() -> None:
    """Where ``numba.np.arraymath`` (or ``scipy.linalg``) is imported already, nothing changes."""
    code = ("import numba.np.arraymath, json; from stream.runtime.blas import defer_probe; "
            "print(json.dumps([defer_probe()]))")
    assert _run(code) == [False]
