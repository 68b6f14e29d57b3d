"""What the rest of the project knows about a rating system, in one record per system, stated
once in the system package's ``spec`` module (``registry`` lists them): adding a system touches no
other table. Light on purpose: classes are named as ``"module:Name"`` strings, imported on first
use, so reading the registry (``mmr --help``, ``stream.config``) imports no numba.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from stream.ratings.base import Params, RatingSystem

#: the lobby's team model (``stream.ratings.lobby``): "sum" (a team performs the sum of its
#: members' performances), "mean" (a team plays as one player at its members' mean rating),
#: "pair" (no team model: two single players only)
TeamModel = Literal["sum", "mean", "pair"]

#: the codec of every system that does not name its own: lossless float64 with a tag byte
FLOAT64_CODEC = "stream.ratings.codec:Float64Codec"


def load(target: str) -> Any:
    """The object a ``"module:Name"`` string names, importing its module."""
    module_name, attr = target.split(":")
    return getattr(importlib.import_module(module_name), attr)


@dataclass(frozen=True, slots=True)
class SearchDim:
    """One parameter ``mmr fit`` searches, within ``[low, high]`` (``log``: on a log scale). The
    spaces are small: only how fast a rating follows new evidence and how noisy one result is
    differ between games; scale, origin and numerical parameters are never searched."""

    name: str
    low: float
    high: float
    log: bool = False


@dataclass(frozen=True, slots=True)
class SystemSpec:
    """One rating system as the project uses it (module docstring)."""

    #: the system's name in docs/interface.md (``--system``, a pool's ``system``)
    name: str
    #: ``"module:Class"`` of its ``base.RatingSystem``
    system: str
    #: ``"module:Class"`` of its ``base.Params`` (``KEY=VALUE`` parameters)
    params: str
    #: ``"module:Class"`` of its ``fastpath.FastPath`` (None: the generic per-belief one)
    fast_path: str | None = None
    #: ``"module:Class"`` of the codec its beliefs are stored with (the belief byte layout lives there)
    codec: str = FLOAT64_CODEC
    #: ``"module:function"`` of each function that compiles (or loads) every kernel variant the
    #: service and the replay call
    warmups: tuple[str, ...] = ()
    #: rounds of more than two players (False: two-player rounds only, each one match)
    multiplayer_rounds: bool = True
    #: rounds ranked by teams (``RatingSystem.rate_team_round``)
    team_rounds: bool = False
    #: the lobby's team model (``TeamModel``)
    team_model: TeamModel = "pair"
    #: its model gives a two-team match a draw probability
    draws: bool = False
    #: a "mean" team model whose belief's second value is a deviation, a team's the root mean
    #: square of its members' (glicko's RD, topcoder's volatility)
    team_deviation: bool = False
    #: the parameters ``mmr fit`` searches (``SearchDim``); empty: none worth fitting
    search_space: tuple[SearchDim, ...] = ()

    def system_type(self) -> type[RatingSystem]:
        """The system's class (imports its module)."""
        cls: type[RatingSystem] = load(self.system)
        return cls

    def params_type(self) -> type[Params]:
        """The class of its parameters (imports its module)."""
        cls: type[Params] = load(self.params)
        return cls

    def build(self, params: Params | Mapping[str, Any] | None = None) -> RatingSystem:
        """The system with ``params`` (``KEY=VALUE`` strings are parsed)."""
        return self.system_type()(params)

    def warmup_functions(self) -> list[Callable[[], None]]:
        """The functions ``warmups`` names, imported."""
        return [load(target) for target in self.warmups]


__all__ = ["FLOAT64_CODEC", "SearchDim", "SystemSpec", "TeamModel", "load"]
