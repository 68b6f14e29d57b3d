"""Elo-MMR and Elo-MMχ as the registry lists them (``stream.ratings.spec``)."""

from __future__ import annotations

from stream.ratings.spec import SystemSpec

_PACKAGE = "stream.ratings.elo_mmr"

ELO_MMR = SystemSpec(
    name="elo-mmr",
    system=f"{_PACKAGE}.system:EloMMR",
    params=f"{_PACKAGE}.system:EloMMRParams",
    fast_path=f"{_PACKAGE}.fastpath:EloMMRFastPath",
    warmups=(f"{_PACKAGE}.system:warmup",),  # both variants, every kernel
    team_rounds=True,
    team_model="sum",
)
ELO_MMX = SystemSpec(
    name="elo-mmx",
    system=f"{_PACKAGE}.system:EloMMX",
    params=f"{_PACKAGE}.system:EloMMRParams",
    fast_path=f"{_PACKAGE}.fastpath:EloMMRFastPath",
    warmups=(f"{_PACKAGE}.system:warmup",),
    team_rounds=True,
    team_model="sum",
)

SPECS = (ELO_MMR, ELO_MMX)
