"""Parameter checks of every rating system: values that would rate into NaN or infinity are
refused when the system is built (``mmr worker`` at start, ``mmr replay`` with exit 2)."""

from __future__ import annotations

import pytest

from stream.ratings import SYSTEMS, RatingError, make_system

BAD = [
    ("elo", {"k": "inf"}), ("elo", {"k": "-1"}), ("elo", {"scale": "0"}), ("elo", {"init": "-inf"}),
    ("glicko", {"c": "inf"}), ("glicko", {"rd_init": "0"}), ("glicko", {"period_days": "0"}),
    ("glicko", {"rd_min": "400"}),  # above rd_init: the floor would exceed the cap
    ("trueskill", {"sigma": "inf"}), ("trueskill", {"beta": "0"}), ("trueskill", {"tau": "-1"}),
    ("trueskill", {"draw_probability": "1"}), ("trueskill", {"max_iter": "0"}),
    ("codeforces", {"k": "inf"}), ("codeforces", {"grid": "1"}), ("codeforces", {"init": "inf"}),
    ("topcoder", {"vol_init": "inf"}), ("topcoder", {"weight_scale": "0"}),
    ("cowan", {"M": "inf"}), ("cowan", {"sigma_kernel": "inf"}), ("cowan", {"laplace_scale": "inf"}),
    ("elo-mmr", {"sig_init": "inf"}), ("elo-mmr", {"mu_init": "inf"}),
]


@pytest.mark.parametrize(("system", "params"), BAD, ids=[f"{s}-{next(iter(p))}={next(iter(p.values()))}"
                                                          for s, p in BAD])
def test_parameters_that_cannot_rate_are_refused_by_name(system: str, params: dict[str, str]) -> None:
    with pytest.raises(RatingError) as err:
        make_system(system, params)
    if system not in ("cowan", "elo-mmr"):  # those two keep their own (older) messages
        assert f"{next(iter(params))}=" in str(err.value)


@pytest.mark.parametrize("system", sorted(SYSTEMS))
def test_every_system_builds_with_its_defaults(system: str) -> None:
    make_system(system, {})


def test_elo_mmr_keeps_rho_infinite() -> None:
    """ρ = ∞ is a variant of the paper (no robust weighting): finite checks must not refuse it."""
    assert make_system("elo-mmr", {"rho": "inf"}).params.rho == float("inf")  # type: ignore[attr-defined]


def test_the_worker_refuses_such_parameters_before_it_connects() -> None:
    from click.testing import CliRunner

    from stream.service.worker import worker

    res = CliRunner().invoke(worker, ["--system", "elo", "--param", "k=inf"])
    assert res.exit_code == 2, res.output
    assert "invalid EloParams parameter(s): k=inf" in res.output
