"""Properties of team rounds of Elo-MMχ and Elo-MMR (docs/teams.md), checked with hypothesis.

Example counts are kept small: every example runs real rounds through the numba kernels.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.ratings.elo_mmr.system import EloMMR, EloMMX, TeamRoundResult, warmup

DAY = 86_400_000
SETTINGS = settings(max_examples=25, deadline=None)
warmup()


def _system(gaussian: bool, split: bool, drift: bool, model: str = "mean") -> EloMMR:
    return (EloMMX if gaussian else EloMMR)({"split_ties": split, "drift_per_day": 30.0 if drift else 0.0,
                                             "team_performance": model})


def _beliefs(system: EloMMR, n: int, seed: int) -> list[np.ndarray]:
    """n beliefs with varied means, σ and round counts (all last rated on day 0)."""
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n):
        b = system.new_belief()
        b[0] = b[2] = 1500.0 + 300.0 * rng.normal()
        b[1] = 50.0 + 300.0 * rng.random()
        b[3] = b[1] ** -2
        b[4] = float(rng.integers(0, 4))
        out.append(b)
    if not system.gaussian:  # logistic histories of past performances, from real rounds (μ their robust average)
        for r in range(3):
            ranks = rng.permutation(n) + 1
            out = system.rate_round(out, ranks, -DAY * (3 - r))
    return out


class _TeamRound(NamedTuple):
    """A team round rated by Elo-MMχ and what the checks of its bookkeeping need, member by member."""

    out: TeamRoundResult  #: the detailed result (beliefs, performances, team performances)
    weights: np.ndarray  #: ω: how much of the round each member played
    mu: np.ndarray  #: μ before the round
    sig2: np.ndarray  #: σ'² after the diffusion
    beta2: np.ndarray  #: β²: the performance noise at the member's weight
    team: np.ndarray  #: each member's team


def _rated_in_teams(case: tuple[list[int], list[int], int], split: bool, partial: bool, model: str) -> _TeamRound:
    """``case`` rated by the Gaussian system with team performance ``model``; with ``partial``, each
    member played half the round or all of it at random."""
    team_of, ranks, seed = case
    system = _system(True, split, False, model)
    n = len(team_of)
    beliefs = _beliefs(system, n, seed)
    weights = np.where(np.random.default_rng(seed).random(n) < 0.5, 0.5, 1.0) if partial else np.ones(n)
    out = system.rate_team_round_detailed(beliefs, team_of, ranks, 2 * DAY, player_weights=weights)
    p = system.params
    w = p.weight_limit * weights
    return _TeamRound(out, weights, np.array([b[0] for b in beliefs]),
                      np.array([b[1] ** 2 for b in beliefs]) + w * p.sig_limit**2, (1 + 1 / w) * p.sig_limit**2,
                      np.asarray(team_of))


@st.composite
def team_rounds(draw: st.DrawFn, max_teams: int = 6, max_size: int = 4) -> tuple[list[int], list[int], int]:
    """(team of each player, rank of each team, seed of the beliefs): at least two teams, not all tied."""
    sizes = draw(st.lists(st.integers(1, max_size), min_size=2, max_size=max_teams))
    ranks = draw(st.lists(st.integers(1, len(sizes)), min_size=len(sizes), max_size=len(sizes)))
    if min(ranks) == max(ranks):
        ranks[0] = max(ranks) + 1
    team_of = [t for t, k in enumerate(sizes) for _ in range(k)]
    return team_of, ranks, draw(st.integers(0, 10_000))


@SETTINGS
@given(n=st.integers(2, 30), seed=st.integers(0, 10_000), split=st.booleans(), drift=st.booleans(),
       weight=st.sampled_from([1.0, 0.4, 2.5]), gaussian=st.booleans())
def test_teams_of_one_are_the_individual_system_bit_for_bit(n: int, seed: int, split: bool, drift: bool,
                                                            weight: float, gaussian: bool) -> None:
    system = _system(gaussian, split, drift)
    beliefs = _beliefs(system, n, seed)
    ranks = np.random.default_rng(seed).integers(1, n + 1, size=n)
    single = system.rate_round_detailed(beliefs, ranks, 3 * DAY, weight)
    teams = system.rate_team_round_detailed(beliefs, np.arange(n), ranks, 3 * DAY, weight)
    assert [b.tobytes() for b in single.beliefs] == [b.tobytes() for b in teams.beliefs]
    assert single.performances.tobytes() == teams.performances.tobytes()


@SETTINGS
@given(case=team_rounds(), order_seed=st.integers(0, 10_000), split=st.booleans(), partial=st.booleans(),
       gaussian=st.booleans())
def test_the_order_of_teams_and_of_members_does_not_matter(case: tuple[list[int], list[int], int],
                                                           order_seed: int, split: bool, partial: bool,
                                                           gaussian: bool) -> None:
    """Listing the players (so the members of a team) and the teams in another order changes
    only the order of the sums: the same results to rounding."""
    team_of, ranks, seed = case
    system = _system(gaussian, split, False)
    n = len(team_of)
    beliefs = _beliefs(system, n, seed)
    rng = np.random.default_rng(order_seed)
    weights = np.where(rng.random(n) < 0.5, 0.5, 1.0) if partial else np.ones(n)
    base = system.rate_team_round_detailed(beliefs, team_of, ranks, 2 * DAY, player_weights=weights)
    players = rng.permutation(n)
    teams = rng.permutation(len(ranks))  # new index of each team
    new_team_of = teams[np.asarray(team_of)[players]]
    new_ranks = np.empty(len(ranks), dtype=np.int64)
    new_ranks[teams] = ranks
    moved = system.rate_team_round_detailed([beliefs[i] for i in players], new_team_of, new_ranks, 2 * DAY,
                                            player_weights=weights[players])
    for i, b in zip(players, moved.beliefs, strict=True):
        np.testing.assert_allclose(b, base.beliefs[i], rtol=1e-12, atol=1e-9)
    np.testing.assert_allclose(moved.team_performances[teams], base.team_performances, rtol=1e-12, atol=1e-9)


@SETTINGS
@given(case=team_rounds(), split=st.booleans(), drift=st.booleans(), gaussian=st.booleans())
def test_winning_never_lowers_a_member_and_losing_never_raises_one(case: tuple[list[int], list[int], int],
                                                                   split: bool, drift: bool, gaussian: bool) -> None:
    """A team ranked alone at the top performs above its mean, so each member's performance
    is above theirs and every member's μ rises; alone at the bottom, symmetrically."""
    team_of, ranks, seed = case
    system = _system(gaussian, split, drift)
    beliefs = _beliefs(system, len(team_of), seed)
    ranks = list(ranks)
    ranks[0], ranks[-1] = 0, len(ranks) + 5  # team 0 wins alone, the last team loses alone
    out = system.rate_team_round_detailed(beliefs, team_of, ranks, 2 * DAY)
    # a sure win (a team of three against one) is a surplus of ~0, lost in the rounding of sums
    for i, t in enumerate(team_of):
        if t == 0:
            assert out.performances[i] >= beliefs[i][0] - 1e-9
            assert out.beliefs[i][0] >= beliefs[i][0] - 1e-9
        elif t == len(ranks) - 1:
            assert out.performances[i] <= beliefs[i][0] + 1e-9
            assert out.beliefs[i][0] <= beliefs[i][0] + 1e-9


@SETTINGS
@given(case=team_rounds(), split=st.booleans(), partial=st.booleans())
def test_shifts_follow_variance_shares_and_sum_to_the_team_shift(case: tuple[list[int], list[int], int],
                                                                 split: bool, partial: bool) -> None:
    """The conditional Gaussian's bookkeeping (the sum model): within a team, the members' weighted
    performance shifts ω_i·(p_i − μ_i) sum to the team's shift P_t − M_t; each member's μ moves by
    ω_i·σ_i'²/V_t · (P_t − M_t), so the member with the larger σ (and the same ω) moves more."""
    ranks = case[1]
    out, weights, mu, sig2, beta2, team = _rated_in_teams(case, split, partial, "sum")
    for t in range(len(ranks)):
        m = team == t
        team_mu = float(np.sum(weights[m] * mu[m]))
        team_var = float(np.sum(weights[m] ** 2 * (sig2[m] + beta2[m])))
        shift = out.team_performances[t] - team_mu
        perf_shift = weights[m] * (out.performances[m] - mu[m])
        assert float(np.sum(perf_shift)) == pytest.approx(shift, rel=1e-9, abs=1e-7)
        moved = np.array([b[0] for b in out.beliefs])[m] - mu[m]
        np.testing.assert_allclose(moved, weights[m] * sig2[m] / team_var * shift, rtol=1e-9, atol=1e-7)
        # the member with the larger σ moves more (same ω)
        for i in np.flatnonzero(m):
            for j in np.flatnonzero(m):
                if weights[i] == weights[j] and sig2[i] > sig2[j] and abs(shift) > 1e-6:
                    assert abs(out.beliefs[i][0] - mu[i]) > abs(out.beliefs[j][0] - mu[j])


@SETTINGS
@given(case=team_rounds(max_teams=4, max_size=3), split=st.booleans(), gaussian=st.booleans())
def test_a_member_who_barely_played_barely_moves(case: tuple[list[int], list[int], int], split: bool,
                                                 gaussian: bool) -> None:
    """Partial play: a member with ω → 0 contributes nothing to the team's sum and their round
    weight (ω times the round's) vanishes, so their belief stays where it was (but for the
    round count), while their teammates are rated as usual."""
    team_of, ranks, seed = case
    team_of = [0, *team_of]  # member 0 has at least one teammate
    system = _system(gaussian, split, False)
    n = len(team_of)
    beliefs = _beliefs(system, n, seed)
    weights = np.ones(n)
    weights[0] = 1e-7
    part = system.rate_team_round_detailed(beliefs, team_of, ranks, 2 * DAY, player_weights=weights)
    without = system.rate_team_round_detailed(beliefs[1:], team_of[1:], ranks, 2 * DAY)
    assert part.beliefs[0][0] == pytest.approx(beliefs[0][0], abs=1e-3)
    assert part.beliefs[0][1] == pytest.approx(beliefs[0][1], abs=1e-3)
    assert part.beliefs[0][4] == beliefs[0][4] + 1
    for a, b in zip(part.beliefs[1:], without.beliefs, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-6, atol=1e-3)


@SETTINGS
@given(case=team_rounds(), split=st.booleans(), partial=st.booleans())
def test_mean_model_moves_follow_the_members_coefficients(case: tuple[list[int], list[int], int], split: bool,
                                                          partial: bool) -> None:
    """The mean model (docs/teams.md, "Large teams"): with a_i = ω_i/Σω, V_t = Σ a_i² σ_i'² + 1/Σ(a_i/β_i²),
    each member's μ moves by a_i·σ_i'²/V_t · (P_t − M_t) and its σ² becomes σ_i'² − a_i² σ_i'⁴/V_t."""
    ranks = case[1]
    out, weights, mu, sig2, beta2, team = _rated_in_teams(case, split, partial, "mean")
    for t in range(len(ranks)):
        m = team == t
        if m.sum() == 1:
            continue  # a team of one is the individual round (tested elsewhere)
        a = weights[m] / weights[m].sum()
        team_mu = float(np.sum(a * mu[m]))
        team_var = float(np.sum(a * a * sig2[m]) + 1.0 / np.sum(a / beta2[m]))
        shift = out.team_performances[t] - team_mu
        moved = np.array([b[0] for b in out.beliefs])[m] - mu[m]
        np.testing.assert_allclose(moved, a * sig2[m] / team_var * shift, rtol=1e-9, atol=1e-7)
        new_var = np.array([b[1] ** 2 for b in out.beliefs])[m]
        np.testing.assert_allclose(new_var, sig2[m] - a * a * sig2[m] ** 2 / team_var, rtol=1e-9)
