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
    if system not in ("cowan", "elo-mmr"):  # those two word their refusals their own way
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


def test_param_pairs_parse_to_a_dict_of_strings() -> None:
    from stream.params import parse_params

    assert parse_params(["k=20", " scale = 400 ", "k=32", "name=a=b", "empty="]) == {
        "k": "32", "scale": "400", "name": "a=b", "empty": ""}
    assert parse_params([]) == {}


@pytest.mark.parametrize("pair", ["k", "=5", " =5", ""])
def test_a_param_that_is_not_key_value_is_refused_naming_its_source(pair: str) -> None:
    from stream.params import ParamError, parse_params

    with pytest.raises(ParamError) as err:
        parse_params([pair], source="--param")
    assert (err.value.source, err.value.reason) == ("--param", f"expected KEY=VALUE, got {pair!r}")


def test_the_environment_list_is_the_same_pairs_comma_separated() -> None:
    from stream.params import ParamError, parse_param_list, parse_params

    assert parse_param_list("k=20, scale=400,,") == parse_params(["k=20", "scale=400"])
    with pytest.raises(ParamError, match="MMR_PARAMS: expected KEY=VALUE, got 'scale'"):
        parse_param_list("k=20,scale")
