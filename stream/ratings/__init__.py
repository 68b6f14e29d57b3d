"""Pure rating math: one package per rating system behind ``base.RatingSystem``.

``make_system(name, params)`` is how the rest of the project builds a system, so the CLI, the
evaluation and the worker accept the same names; systems are imported lazily (``mmr --help`` pays
for no numba). The modules: docs/ARCHITECTURE.md.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from stream.ratings.base import Belief, Params, Rating, RatingError, RatingSystem
from stream.ratings.registry import SPECS, SystemSpec, spec

#: docs/interface.md system name -> its ``SystemSpec`` (``stream.ratings.registry.SPECS``)
SYSTEMS: Mapping[str, SystemSpec] = SPECS


def make_system(name: str, params: Mapping[str, Any] | None = None) -> RatingSystem:
    """Build a system from its name and ``KEY=VALUE`` parameters (strings are parsed)."""
    return spec(name).build(params)


__all__ = ["SYSTEMS", "Belief", "Params", "Rating", "RatingError", "RatingSystem", "SystemSpec", "make_system"]
