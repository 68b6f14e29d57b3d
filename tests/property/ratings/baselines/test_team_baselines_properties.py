"""Properties of the baselines' team rounds (TrueSkill teams, team Elo), checked with hypothesis:
the order of teams and of members does not matter, a lone winning team's members never lose,
and team Elo's members move together."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.ratings import make_system
from stream.ratings.base import RatingSystem

SETTINGS = settings(max_examples=30, deadline=None)


@st.composite
def team_rounds(draw: st.DrawFn) -> tuple[list[int], list[int], int, bool]:
    sizes = draw(st.lists(st.integers(1, 4), min_size=2, max_size=6))
    ranks = draw(st.lists(st.integers(1, 4), min_size=len(sizes), max_size=len(sizes)))
    return sizes, ranks, draw(st.integers(0, 2**31)), draw(st.booleans())


def _setup(system: RatingSystem, sizes: list[int], seed: int, partial: bool):  # type: ignore[no-untyped-def]
    rng = np.random.default_rng(seed)
    n = sum(sizes)
    beliefs = []
    for _ in range(n):
        b = system.new_belief()
        b[0] = 1500.0 + 300.0 * rng.normal()
        if system.name == "trueskill":
            b[1] = 50.0 + 300.0 * rng.random()
        beliefs.append(b)
    team_of = np.repeat(np.arange(len(sizes)), sizes)
    weights = np.where(rng.random(n) < 0.5, rng.uniform(0.1, 1.0, n), 1.0) if partial else None
    return rng, beliefs, team_of, weights


@SETTINGS
@given(team_rounds(), st.sampled_from(["trueskill", "elo"]))
def test_order_of_teams_and_members_does_not_matter(case: tuple[list[int], list[int], int, bool], name: str) -> None:
    sizes, ranks, seed, partial = case
    if name == "trueskill":  # the chain links tied teams to different neighbours by their order, as the package does
        ranks = (np.argsort(np.argsort(ranks, kind="stable")) + 1).tolist()
    system = make_system(name)
    rng, beliefs, team_of, weights = _setup(system, sizes, seed, partial)
    out = system.rate_team_round(beliefs, team_of, np.array(ranks), 0, player_weights=weights)
    tperm = rng.permutation(len(sizes))  # new team t is old team tperm[t]
    new_index = np.argsort(tperm)
    pperm = rng.permutation(len(beliefs))  # players listed in another order
    out2 = system.rate_team_round([beliefs[i] for i in pperm], new_index[team_of[pperm]],
                                  np.array(ranks)[tperm], 0,
                                  player_weights=None if weights is None else weights[pperm])
    for k, i in enumerate(pperm.tolist()):
        np.testing.assert_allclose(out2[k], out[i], rtol=1e-9, atol=1e-9)


@SETTINGS
@given(team_rounds(), st.sampled_from(["trueskill", "elo"]))
def test_a_lone_winner_team_never_loses_and_a_lone_last_never_gains(case: tuple[list[int], list[int], int, bool],
                                                                    name: str) -> None:
    sizes, ranks, seed, partial = case
    ranks = [r + 1 for r in ranks]
    ranks[0] = 1  # team 0 alone first
    ranks[-1] = 10  # the last team alone last
    system = make_system(name)
    _, beliefs, team_of, weights = _setup(system, sizes, seed, partial)
    out = system.rate_team_round(beliefs, team_of, np.array(ranks), 0, player_weights=weights)
    for i, t in enumerate(team_of.tolist()):
        ulps = 1e-12 * abs(beliefs[i][0])  # a sure win moves μ by nothing, up to rounding
        if t == 0:
            assert out[i][0] >= beliefs[i][0] - ulps
        if t == len(sizes) - 1:
            assert out[i][0] <= beliefs[i][0] + ulps


@SETTINGS
@given(team_rounds())
def test_team_elo_members_move_by_the_team_change_times_their_part(case: tuple[list[int], list[int], int, bool],
                                                                   ) -> None:
    sizes, ranks, seed, partial = case
    system = make_system("elo")
    _, beliefs, team_of, weights = _setup(system, sizes, seed, partial)
    w = np.ones(len(beliefs)) if weights is None else weights
    out = system.rate_team_round(beliefs, team_of, np.array(ranks), 0, player_weights=weights)
    shift = np.array([o[0] - b[0] for o, b in zip(out, beliefs, strict=True)]) / w
    for t in range(len(sizes)):
        np.testing.assert_allclose(shift[team_of == t], shift[team_of == t][0], rtol=1e-9, atol=1e-9)
