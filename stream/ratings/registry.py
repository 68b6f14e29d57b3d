"""The one list of rating systems, name → ``SystemSpec``, from which every table of systems in the
project is read. Adding a system: a package under ``stream/ratings/`` whose ``spec`` module
exports ``SPECS``, and its line below."""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType

from stream.ratings.base import RatingError
from stream.ratings.baselines.spec import SPECS as BASELINES
from stream.ratings.cowan.spec import SPECS as COWAN
from stream.ratings.elo_mmr.spec import SPECS as ELO_MMR
from stream.ratings.spec import SystemSpec

#: docs/interface.md system name -> its spec, in the order ``mmr`` lists them
SPECS: Mapping[str, SystemSpec] = MappingProxyType({
    s.name: s for s in (
        *ELO_MMR,
        *COWAN,
        *BASELINES,
    )
})


def spec(name: str) -> SystemSpec:
    """The spec of a docs/interface.md system name (``RatingError`` naming the choices if unknown)."""
    try:
        return SPECS[name]
    except KeyError:
        raise RatingError(f"unknown system {name!r}; choose one of {', '.join(SPECS)}") from None


def names(*, team_model: str | None = None, draws: bool | None = None) -> frozenset[str]:
    """The names of the systems with this team model and/or draw flag (all when neither is given)."""
    return frozenset(s.name for s in SPECS.values()
                     if (team_model is None or s.team_model == team_model) and (draws is None or s.draws == draws))


__all__ = ["SPECS", "SystemSpec", "names", "spec"]
