"""The baseline systems as the registry lists them (``stream.ratings.spec``). Their kernels
compile on the first rating (``mmr warm`` rates stored bytes with each), so none names a warm-up."""

from __future__ import annotations

from stream.ratings.spec import SearchDim, SystemSpec

_PACKAGE = "stream.ratings.baselines"

ELO = SystemSpec(
    name="elo",
    system=f"{_PACKAGE}.elo:Elo",
    params=f"{_PACKAGE}.elo:EloParams",
    fast_path=f"{_PACKAGE}.fastpath:EloFastPath",
    team_rounds=True,
    team_model="mean",
    search_space=(SearchDim("k", 2.0, 100.0, log=True),),  # the step: how far one result moves a rating
)
GLICKO = SystemSpec(
    name="glicko",
    system=f"{_PACKAGE}.glicko:Glicko",
    params=f"{_PACKAGE}.glicko:GlickoParams",
    fast_path=f"{_PACKAGE}.fastpath:GlickoFastPath",
    team_model="mean",
    team_deviation=True,  # its RD
    # the RD growth between periods (the dynamics) and a newcomer's RD (how fast a new player moves)
    search_space=(SearchDim("c", 1.0, 200.0, log=True), SearchDim("rd_init", 60.0, 700.0, log=True)),
)
TRUESKILL = SystemSpec(
    name="trueskill",
    system=f"{_PACKAGE}.trueskill:TrueSkill",
    params=f"{_PACKAGE}.trueskill:TrueSkillParams",
    fast_path=f"{_PACKAGE}.fastpath:TrueSkillFastPath",
    team_rounds=True,
    team_model="sum",
    draws=True,  # its draw margin
    # the dynamics, the noise of one performance and how often the game draws
    search_space=(SearchDim("tau", 0.1, 100.0, log=True), SearchDim("beta", 20.0, 1000.0, log=True),
                  SearchDim("draw_probability", 0.0, 0.5)),
)
CODEFORCES = SystemSpec(
    name="codeforces",
    system=f"{_PACKAGE}.codeforces:Codeforces",
    params=f"{_PACKAGE}.codeforces:CodeforcesParams",
    fast_path=f"{_PACKAGE}.fastpath:CodeforcesFastPath",
    team_model="mean",
    search_space=(SearchDim("k", 0.05, 1.0, log=True),),  # the fraction of the gap to the needed rating taken
)
TOPCODER = SystemSpec(
    name="topcoder",
    system=f"{_PACKAGE}.topcoder:TopCoder",
    params=f"{_PACKAGE}.topcoder:TopCoderParams",
    fast_path=f"{_PACKAGE}.fastpath:TopCoderFastPath",
    team_model="mean",
    team_deviation=True,  # its volatility
    search_space=(SearchDim("weight_scale", 0.1, 10.0, log=True),),  # the weight of one round
)

SPECS = (ELO, GLICKO, TRUESKILL, CODEFORCES, TOPCODER)
