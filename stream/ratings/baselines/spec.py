"""The baseline systems as the registry lists them (``stream.ratings.spec``). Their kernels
compile on the first rating (``mmr warm`` rates stored bytes with each), so none names a warm-up."""

from __future__ import annotations

from typing import Any

from stream.ratings.spec import SearchDim, SystemSpec

_PACKAGE = "stream.ratings.baselines"


def _spec(name: str, cls: str, **rest: Any) -> SystemSpec:
    """Baseline ``name``: class ``cls`` and ``clsParams`` in the module ``name``, its summaries by
    columns ``clsFastPath`` (``baselines.fastpath``)."""
    module = f"{_PACKAGE}.{name}"
    return SystemSpec(name=name, system=f"{module}:{cls}", params=f"{module}:{cls}Params",
                      fast_path=f"{_PACKAGE}.fastpath:{cls}FastPath", **rest)


ELO = _spec("elo", "Elo", team_rounds=True, team_model="mean",
            search_space=(SearchDim("k", 2.0, 100.0, log=True),))  # the step: how far one result moves a rating
GLICKO = _spec(
    "glicko", "Glicko", team_model="mean",
    team_deviation=True,  # its RD
    # the RD growth between periods (the dynamics) and a newcomer's RD (how fast a new player moves)
    search_space=(SearchDim("c", 1.0, 200.0, log=True), SearchDim("rd_init", 60.0, 700.0, log=True)),
)
TRUESKILL = _spec(
    "trueskill", "TrueSkill", team_rounds=True, team_model="sum",
    draws=True,  # its draw margin
    # the dynamics, the noise of one performance and how often the game draws
    search_space=(SearchDim("tau", 0.1, 100.0, log=True), SearchDim("beta", 20.0, 1000.0, log=True),
                  SearchDim("draw_probability", 0.0, 0.5)),
)
CODEFORCES = _spec("codeforces", "Codeforces", team_model="mean",  # k: the fraction of the gap to the needed rating
                   search_space=(SearchDim("k", 0.05, 1.0, log=True),))
TOPCODER = _spec("topcoder", "TopCoder", team_model="mean",
                 team_deviation=True,  # its volatility
                 search_space=(SearchDim("weight_scale", 0.1, 10.0, log=True),))  # the weight of one round

SPECS = (ELO, GLICKO, TRUESKILL, CODEFORCES, TOPCODER)
