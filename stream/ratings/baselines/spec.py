"""The baseline systems as the registry lists them (``stream.ratings.spec``). Their kernels
compile on the first rating (``mmr warm`` rates stored bytes with each), so none names a warm-up."""

from __future__ import annotations

from stream.ratings.spec import SystemSpec

_PACKAGE = "stream.ratings.baselines"

ELO = SystemSpec(
    name="elo",
    system=f"{_PACKAGE}.elo:Elo",
    params=f"{_PACKAGE}.elo:EloParams",
    fast_path=f"{_PACKAGE}.fastpath:EloFastPath",
    team_rounds=True,
    team_model="mean",
)
GLICKO = SystemSpec(
    name="glicko",
    system=f"{_PACKAGE}.glicko:Glicko",
    params=f"{_PACKAGE}.glicko:GlickoParams",
    fast_path=f"{_PACKAGE}.fastpath:GlickoFastPath",
    team_model="mean",
    team_deviation=True,  # its RD
)
TRUESKILL = SystemSpec(
    name="trueskill",
    system=f"{_PACKAGE}.trueskill:TrueSkill",
    params=f"{_PACKAGE}.trueskill:TrueSkillParams",
    fast_path=f"{_PACKAGE}.fastpath:TrueSkillFastPath",
    team_rounds=True,
    team_model="sum",
    draws=True,  # its draw margin
)
CODEFORCES = SystemSpec(
    name="codeforces",
    system=f"{_PACKAGE}.codeforces:Codeforces",
    params=f"{_PACKAGE}.codeforces:CodeforcesParams",
    fast_path=f"{_PACKAGE}.fastpath:CodeforcesFastPath",
    team_model="mean",
)
TOPCODER = SystemSpec(
    name="topcoder",
    system=f"{_PACKAGE}.topcoder:TopCoder",
    params=f"{_PACKAGE}.topcoder:TopCoderParams",
    fast_path=f"{_PACKAGE}.fastpath:TopCoderFastPath",
    team_model="mean",
    team_deviation=True,  # its volatility
)

SPECS = (ELO, GLICKO, TRUESKILL, CODEFORCES, TOPCODER)
