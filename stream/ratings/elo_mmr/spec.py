"""Elo-MMR and Elo-MMχ as the registry lists them (``stream.ratings.spec``)."""

from __future__ import annotations

from dataclasses import replace

from stream.ratings.spec import SearchDim, SystemSpec

_PACKAGE = "stream.ratings.elo_mmr"
#: what ``mmr fit`` searches: sig_limit sets the noise of one performance and, with weight_limit,
#: the drift between events (β² = (1 + 1/w)·sig_limit², γ² = w·sig_limit²)
SEARCH_SPACE = (SearchDim("sig_limit", 10.0, 400.0, log=True), SearchDim("weight_limit", 0.01, 5.0, log=True))

ELO_MMR = SystemSpec(
    name="elo-mmr",
    system=f"{_PACKAGE}.system:EloMMR",
    params=f"{_PACKAGE}.system:EloMMRParams",
    fast_path=f"{_PACKAGE}.fastpath:EloMMRFastPath",
    warmups=(f"{_PACKAGE}.system:warmup",),  # both variants, every kernel
    team_rounds=True,
    team_model="sum",
    search_space=SEARCH_SPACE,
)
ELO_MMX = replace(ELO_MMR, name="elo-mmx", system=f"{_PACKAGE}.system:EloMMX")

SPECS = (ELO_MMR, ELO_MMX)
