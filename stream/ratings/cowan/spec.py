"""Cowan's system as the registry lists it (``stream.ratings.spec``)."""

from __future__ import annotations

from stream.ratings.spec import SearchDim, SystemSpec

_PACKAGE = "stream.ratings.cowan"

COWAN = SystemSpec(
    name="cowan",
    system=f"{_PACKAGE}.system:Cowan",
    params=f"{_PACKAGE}.system:CowanParams",
    fast_path=f"{_PACKAGE}.fastpath:CowanFastPath",
    codec=f"{_PACKAGE}.codec:CowanCodec",  # quantised beliefs
    warmups=(f"{_PACKAGE}.system:warmup",),
    multiplayer_rounds=False,  # its luck function compares two players
    # the drift of a skill between events and the weight of skill against luck in one result
    search_space=(SearchDim("sigma_kernel", 0.003, 0.3, log=True), SearchDim("beta", 0.3, 1.0)),
)

SPECS = (COWAN,)
