"""Elo-MMR (Ebtekar & Liu, WWW'21) and Elo-MMχ: the system (``system``), its numba kernels
(``kernels``, teams in ``teams``), the plain oracles they are tested against (``naive``,
``teams_naive``) and the engine's batched forms (``fastpath``)."""

from __future__ import annotations

import importlib
from typing import Any


def __getattr__(name: str) -> Any:
    """The system's public names (``EloMMR``, ...) without importing its kernels until asked."""
    return getattr(importlib.import_module(f"{__name__}.system"), name)
