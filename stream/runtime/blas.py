"""numba's check for a BLAS, answered without importing ``scipy.linalg``.

Why: before numba compiles or loads its first function it imports ``numba.np.arraymath``, which
asks whether a BLAS is there by importing ``scipy.linalg.cython_blas``: the whole of
``scipy.linalg`` (and through it ``numpy.f2py``, ``unittest``, ...), a noticeable part of every
start-up, for a flag (``_HAVE_BLAS``) that only matters to a compiled ``np.convolve`` /
``np.correlate``. ``defer_probe`` imports ``arraymath`` with the probe answering "no BLAS", puts
numba's probe back and sets the flag to whether SciPy is installed (what numba would have found).
Whatever really uses a BLAS still calls numba's ``ensure_blas`` when it compiles.

This touches numba's private module attributes: the numba versions are bounded in pyproject.toml
and tests/unit/runtime/test_numba_blas.py checks the behaviour.
"""

from __future__ import annotations

import importlib.util
import sys


def _no_blas() -> None:
    raise ImportError("numba's BLAS probe deferred (stream.runtime.blas)")


def defer_probe() -> bool:
    """Import ``numba.np.arraymath`` without its import of ``scipy.linalg`` (see the module
    docstring); True if done so, False where it is imported already (or ``scipy.linalg`` is:
    the probe then costs nothing)."""
    if "numba.np.arraymath" in sys.modules or "scipy.linalg" in sys.modules:
        return False
    from numba.np import linalg

    probe = linalg.ensure_blas
    linalg.ensure_blas = _no_blas
    try:
        from numba.np import arraymath
    finally:
        linalg.ensure_blas = probe
    arraymath.ensure_blas = probe  # type: ignore[attr-defined]
    arraymath._HAVE_BLAS = importlib.util.find_spec("scipy") is not None  # type: ignore[attr-defined]
    return True
