"""Pure rating math: one module per rating system behind ``base.RatingSystem``.

``make_system(name, params)`` is the only way the rest of the project builds a system,
so the CLI, the evaluation harness and the worker accept exactly the same names.
Modules are imported lazily: ``mmr --help`` must not pay for numba compilation.

Layout: ``base`` (the interface), one module per system (``elo_mmr``, ``cowan``, ``elo``,
``glicko``, ``trueskill``, ``codeforces``, ``topcoder``), ``fastpath`` (the batched and packed
forms the pipeline engine uses, per system, in the private ``_*_fastpath`` modules), ``lobby``
(predictions of a match of teams, for matchmakers), and
private numba kernels and model tables (``_*_kernels``, ``_cowan_*``).
"""

from __future__ import annotations

import importlib
from collections.abc import Mapping
from typing import Any

from stream.ratings.base import Belief, Params, Rating, RatingError, RatingSystem

#: docs/interface.md system name -> "module:Class"
SYSTEMS: dict[str, str] = {
    "elo-mmr": "stream.ratings.elo_mmr.system:EloMMR",
    "elo-mmx": "stream.ratings.elo_mmr.system:EloMMX",
    "cowan": "stream.ratings.cowan.system:Cowan",
    "elo": "stream.ratings.baselines.elo:Elo",
    "glicko": "stream.ratings.baselines.glicko:Glicko",
    "trueskill": "stream.ratings.baselines.trueskill:TrueSkill",
    "codeforces": "stream.ratings.baselines.codeforces:Codeforces",
    "topcoder": "stream.ratings.baselines.topcoder:TopCoder",
}


def system_class(name: str) -> type[RatingSystem]:
    """The class registered under a docs/interface.md system name."""
    try:
        target = SYSTEMS[name]
    except KeyError:
        raise RatingError(f"unknown system {name!r}; choose one of {', '.join(SYSTEMS)}") from None
    module_name, cls_name = target.split(":")
    cls: type[RatingSystem] = getattr(importlib.import_module(module_name), cls_name)
    return cls


def make_system(name: str, params: Mapping[str, Any] | None = None) -> RatingSystem:
    """Build a system from its name and ``KEY=VALUE`` parameters (strings are parsed)."""
    return system_class(name)(params)


__all__ = ["SYSTEMS", "Belief", "Params", "Rating", "RatingError", "RatingSystem", "make_system", "system_class"]
