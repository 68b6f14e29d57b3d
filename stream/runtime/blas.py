"""numba's check for a BLAS, answered without importing ``scipy.linalg``.

Why
---
Before numba compiles or loads its first function it loads its registries of
implementations, among them ``numba.np.arraymath``, which on import asks whether a BLAS is
there by importing ``scipy.linalg.cython_blas``. That imports the whole of ``scipy.linalg``
(through SciPy's array-API layer also ``numpy.f2py``, ``charset_normalizer`` and ``unittest``):
a noticeable part of the start-up of every process that
loads a kernel, for a flag (``arraymath._HAVE_BLAS``) that only chooses how a
compiled ``np.convolve`` / ``np.correlate`` takes its inner products. None of the cached
kernels needs it to load.

So, when ``numba.np.arraymath`` is not imported yet, ``defer_probe`` imports it with the probe
answering "no BLAS", puts numba's probe back in both modules, and sets the flag to whether
SciPy can be found (``find_spec`` of the top-level package, which numba imports anyway): the
flag numba would have set wherever SciPy is installed whole (its wheels always carry
``scipy.linalg``). Whatever really uses a BLAS (a compiled ``np.dot``, ``np.linalg``) still
calls numba's own ``ensure_blas`` when it is compiled, which imports ``scipy.linalg`` then.

This touches numba's private module attributes: the supported numba versions are bounded in
pyproject.toml and tests/unit/runtime/test_numba_blas.py checks the behaviour.
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
