"""Cowan's paired comparisons for games of chance: the system (``system``), the general algorithm
on any finite support (``naive``, exported as ``posterior_naive``), numba kernels, the quantised
codec (``quant``, ``codec``), a replay's arena (``arena``) and the engine's fast path."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """The system's public names (``Cowan``, ...) without importing its kernels until asked."""
    return getattr(importlib.import_module(f"{__name__}.system"), name)
