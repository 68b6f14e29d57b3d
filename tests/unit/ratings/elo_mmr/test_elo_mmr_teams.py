"""Team rounds of Elo-MMχ and Elo-MMR: the kernel against the dense-Gaussian oracle, and what is refused."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream.ratings import make_system
from stream.ratings.base import RatingError
from stream.ratings.elo_mmr.system import EloMMR, EloMMX
from stream.ratings.elo_mmr.teams_naive import rate_team_round_naive

DAY = 86_400_000


def _beliefs(system: EloMMR, n: int, rng: np.random.Generator) -> list[np.ndarray]:
    """n beliefs with varied means, σ, round counts and last times (and logistic terms for Elo-MMR)."""
    out = []
    for _ in range(n):
        b = system.new_belief()
        b[0] = b[2] = 1500.0 + 300.0 * rng.normal()
        b[1] = 60.0 + 300.0 * rng.random()
        b[3] = b[1] ** -2
        b[4] = float(rng.integers(0, 6))
        b[5] = float(rng.integers(0, 5)) * DAY if b[4] else 0.0
        if not system.gaussian:
            terms = [(b[0] + 200.0 * rng.normal(), 0.004 * rng.random(), 0.01 * rng.random()) for _ in range(int(b[4]))]
            b = np.concatenate([b, np.array(terms).reshape(-1)])
        out.append(b)
    return out


def _round(rng: np.random.Generator, nteams: int, max_size: int) -> tuple[list[int], list[int]]:
    sizes = rng.integers(1, max_size + 1, size=nteams)
    team_of = np.repeat(np.arange(nteams), sizes)
    rng.shuffle(team_of)  # members of a team need not be listed together
    ranks = rng.integers(1, max(2, nteams // 2 + 1), size=nteams)
    if ranks.min() == ranks.max():
        ranks[0] = ranks.max() + 1
    return team_of.tolist(), ranks.tolist()


CASES = [
    # (params, nteams, max team size, partial play, perf_ceiling)
    ({}, 2, 2, False, math.inf),
    ({}, 2, 5, True, math.inf),
    ({"split_ties": True}, 6, 3, False, math.inf),
    ({"drift_per_day": 50.0, "noob_delay": (0.5, 0.8)}, 4, 4, True, math.inf),
    ({"weight_limit": 0.5, "sig_limit": 40.0}, 30, 4, True, 1900.0),
    ({}, 200, 5, False, math.inf),
]


@pytest.mark.parametrize(("params", "nteams", "size", "partial", "ceiling"), CASES)
@pytest.mark.parametrize("seed", [0, 1, 2])
@pytest.mark.parametrize("cls", [EloMMX, EloMMR])
def test_kernel_matches_dense_gaussian_oracle(params: dict, nteams: int, size: int, partial: bool,
                                              ceiling: float, seed: int, cls: type[EloMMR]) -> None:
    rng = np.random.default_rng(seed)
    system = cls({**params, "history_limit": 4} if cls is EloMMR and seed == 1 else params)
    team_of, ranks = _round(rng, nteams, size)
    beliefs = _beliefs(system, len(team_of), rng)
    weights = np.where(rng.random(len(team_of)) < 0.4, rng.uniform(0.2, 1.0, len(team_of)), 1.0) if partial else None
    got = system.rate_team_round_detailed(beliefs, team_of, ranks, 9 * DAY, 1.3, ceiling, weights)
    want, perfs, team_perfs = rate_team_round_naive(beliefs, team_of, ranks, 9 * DAY, system.params, system.gaussian,
                                                    1.3, ceiling, weights)
    # both solvers stop at ~1e-12 relative (team performances are sums: thousands of points)
    np.testing.assert_allclose(got.team_performances, team_perfs, rtol=1e-12, atol=1e-9)
    # a member's performance carries the team's error times their share (≤ 1/ω)
    spread = 1e-12 * float(np.abs(team_perfs).max()) / (1.0 if weights is None else float(weights.min()))
    np.testing.assert_allclose(got.performances, perfs, rtol=1e-12, atol=1e-9 + spread)
    for a, b in zip(got.beliefs, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9 + spread)  # observations: μ_i + (P_t − M_t)/ω_i


@pytest.mark.parametrize(("nteams", "size", "partial"), [(2, 2, False), (5, 3, True), (8, 4, False)])
@pytest.mark.parametrize("cls", [EloMMX, EloMMR])
def test_individual_sigma_kernel_matches_the_oracle(nteams: int, size: int, partial: bool, cls: type[EloMMR]) -> None:
    rng = np.random.default_rng(nteams)
    system = cls({"team_exact_sigma": False, "drift_per_day": 30.0})
    team_of, ranks = _round(rng, nteams, size)
    beliefs = _beliefs(system, len(team_of), rng)
    weights = np.where(rng.random(len(team_of)) < 0.4, rng.uniform(0.2, 1.0, len(team_of)), 1.0) if partial else None
    got = system.rate_team_round_detailed(beliefs, team_of, ranks, 9 * DAY, 1.0, math.inf, weights)
    want, _, _ = rate_team_round_naive(beliefs, team_of, ranks, 9 * DAY, system.params, system.gaussian, 1.0,
                                       math.inf, weights)
    for a, b in zip(got.beliefs, want, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("cls", [EloMMX, EloMMR])
def test_teams_of_one_are_the_individual_round_bit_for_bit(cls: type[EloMMR]) -> None:
    rng = np.random.default_rng(5)
    system = cls({"drift_per_day": 10.0})
    beliefs = _beliefs(system, 12, rng)
    ranks = rng.integers(1, 5, size=12)
    single = system.rate_round_detailed(beliefs, ranks, 9 * DAY, 0.7)
    teams = system.rate_team_round_detailed(beliefs, np.arange(12), ranks, 9 * DAY, 0.7)
    assert all(a.tobytes() == b.tobytes() for a, b in zip(single.beliefs, teams.beliefs, strict=True))
    assert single.performances.tobytes() == teams.performances.tobytes()


def test_a_round_of_one_team_or_all_tied_changes_nothing() -> None:
    system = EloMMX()
    beliefs = [system.new_belief() for _ in range(4)]
    for team_of, ranks in (([0, 0, 0, 0], [1]), ([0, 0, 1, 1], [2, 2])):
        out = system.rate_team_round_detailed(beliefs, team_of, ranks, 0)
        assert all(a is b for a, b in zip(out.beliefs, beliefs, strict=True))
        assert np.isnan(out.performances).all()


@pytest.mark.parametrize("name", ["glicko", "cowan", "codeforces", "topcoder"])
def test_systems_without_a_team_model_refuse_team_rounds(name: str) -> None:
    system = make_system(name, {})
    beliefs = [system.new_belief() for _ in range(4)]
    with pytest.raises(RatingError, match="does not rate team rounds"):
        system.rate_team_round(beliefs, np.array([0, 0, 1, 1]), np.array([1, 2]), 0)


@pytest.mark.parametrize(("team_of", "ranks", "weights", "reason"), [
    ([0, 0, 2], [1, 2, 3], None, "at least one player"),
    ([0, 1, 2], [1, 2], None, "outside"),
    ([0, 1], [1, 2], None, "team indices"),
    ([0, 0, 1], [1, 2], [1.0, 0.0, 1.0], r"\(0, 1\]"),
    ([0, 0, 1], [1, 2], [1.0, 1.5, 1.0], r"\(0, 1\]"),
    ([0, 0, 1], [1, 2], [1.0, 1.0], r"\(0, 1\]"),
])
def test_malformed_team_rounds_are_refused(team_of: list[int], ranks: list[int], weights: list[float] | None,
                                           reason: str) -> None:
    system = EloMMX()
    beliefs = [system.new_belief() for _ in range(3)]
    with pytest.raises(RatingError, match=reason):
        system.rate_team_round(beliefs, np.array(team_of), np.array(ranks), 0,
                                player_weights=None if weights is None else np.array(weights))


@pytest.mark.parametrize("name", ["elo-mmx", "elo-mmr", "elo", "trueskill"])
@pytest.mark.parametrize("bad", [math.nan, math.inf])
def test_non_finite_team_ranks_are_refused_by_every_team_model(name: str, bad: float) -> None:
    """One check of team rounds (``base.check_team_round``) for every system: a RatingError that
    dead-letters the event, never a ValueError from converting the ranks."""
    system = make_system(name)
    beliefs = [system.new_belief() for _ in range(3)]
    with pytest.raises(RatingError, match="non-finite"):
        system.rate_team_round(beliefs, np.array([0, 0, 1]), np.array([1.0, bad]), 0)
