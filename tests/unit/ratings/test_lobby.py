"""Lobby predictions (stream.ratings.lobby): the properties a matchmaker relies on, for every system."""

from __future__ import annotations

import math
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st
from scipy import integrate, stats

from stream.ratings import SYSTEMS, make_system
from stream.ratings.base import Belief, RatingError, RatingSystem
from stream.ratings.lobby import DRAW_MODELS, MEAN_MODELS, SUM_MODELS, _integrate, predict, team
from stream.ratings.team_scores import team_predictor

TEAM_SYSTEMS = sorted(SUM_MODELS | MEAN_MODELS)


@cache
def _system(name: str) -> RatingSystem:
    return make_system(name)


@cache
def _players(name: str, n: int = 8) -> tuple[Belief, ...]:
    """Beliefs of ``n`` players after a seeded series of two-player rounds (spread-out ratings)."""
    system = _system(name)
    rng = np.random.default_rng(7)
    beliefs = [system.new_belief() for _ in range(n)]
    for k in range(40):
        i, j = rng.choice(n, size=2, replace=False)
        a_wins = min(i, j) == i if rng.random() < 0.85 else min(i, j) != i  # lower index mostly wins
        ranks = np.array([1, 2] if a_wins else [2, 1])
        beliefs[i], beliefs[j] = system.rate_round([beliefs[i], beliefs[j]], ranks, 86_400_000 * k)
    return tuple(beliefs)


def _teams(name: str, idx: list[list[int]]) -> list[list[Belief]]:
    players = _players(name)
    return [[players[i] for i in team] for team in idx]


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_two_single_players_get_exactly_the_pairing_prediction(name: str) -> None:
    system = _system(name)
    players = _players(name)
    for a in range(len(players)):
        for b in range(len(players)):
            if a == b:
                continue
            pred = predict(system, [[players[a]], [players[b]]])
            assert pred.expected_score == system.win_probability(players[a], players[b])
            assert np.allclose(pred.expected_rank, (2.0 - pred.expected_score, 1.0 + pred.expected_score),
                               atol=1e-12, rtol=0)
            assert 0.0 <= pred.quality <= 1.0
    # the fixture ratings are spread: the test would not pass on a constant prediction
    assert len({round(predict(system, [[players[0]], [p]]).expected_score or 0, 9) for p in players[1:]}) > 2


team_split = st.permutations(list(range(8))).flatmap(
    lambda perm: st.tuples(st.integers(1, 3), st.integers(1, 3), st.integers(0, 2)).map(
        lambda sizes: [perm[:sizes[0]], perm[sizes[0]:sizes[0] + sizes[1]],
                       *([perm[sizes[0] + sizes[1]:sizes[0] + sizes[1] + sizes[2]]] if sizes[2] else [])]))


@pytest.mark.parametrize("name", TEAM_SYSTEMS)
@settings(max_examples=40, deadline=None)
@given(idx=team_split)
@example(idx=[[0, 1, 2], [6]])  # TrueSkill: one side certain, 1 − win − loss rounds below 0
def test_probabilities_sum_to_one_and_follow_the_teams(name: str, idx: list[list[int]]) -> None:
    system = _system(name)
    pred = predict(system, _teams(name, idx))
    n = len(idx)
    draw = pred.draw or 0.0
    assert all(0.0 <= p <= 1.0 for p in (*pred.win, draw, pred.quality))
    assert math.isclose(sum(pred.win) + draw, 1.0, abs_tol=1e-12)
    assert math.isclose(sum(pred.expected_rank), n * (n + 1) / 2, abs_tol=1e-9)
    assert all(1.0 <= r <= n for r in pred.expected_rank)
    assert (pred.draw is not None) == (name in DRAW_MODELS and n == 2)
    # symmetric: the teams in reverse order (and members shuffled) get the same numbers reversed
    swapped = predict(system, _teams(name, [list(reversed(t)) for t in reversed(idx)]))
    assert np.allclose(swapped.win, pred.win[::-1], atol=1e-9, rtol=0)
    assert np.allclose(swapped.expected_rank, pred.expected_rank[::-1], atol=1e-9, rtol=0)
    assert math.isclose(swapped.quality, pred.quality, abs_tol=1e-9)
    if draw:
        assert math.isclose(swapped.draw or 0.0, draw, abs_tol=1e-12)


@pytest.mark.parametrize("name", sorted(SYSTEMS))
def test_equal_teams_are_even_and_a_much_stronger_team_wins(name: str) -> None:
    system = _system(name)
    players = _players(name)
    if name in TEAM_SYSTEMS:
        even = predict(system, [[players[0], players[5]], [players[5], players[0]]])
    else:
        even = predict(system, [[players[3]], [players[3]]])
    assert even.expected_score is not None
    assert math.isclose(even.expected_score, 0.5, abs_tol=1e-12)
    assert math.isclose(even.win[0], even.win[1], abs_tol=1e-12)
    assert math.isclose(even.quality, 1.0, abs_tol=1e-11)
    strong, weak = system.new_belief(), system.new_belief()
    strong[0] = weak[0] + (8.0 if name == "cowan" else 3000.0)  # cowan: natural units on a grid [-7, 7]
    if name == "cowan":
        strong = players[0]
        weak = players[-1]
    teams = [[strong, strong], [weak, weak]] if name in TEAM_SYSTEMS else [[strong], [weak]]
    lopsided = predict(system, teams)
    assert lopsided.win[0] > (0.6 if name == "cowan" else 0.99)
    assert lopsided.quality < (0.8 if name == "cowan" else 0.02)
    if name in TEAM_SYSTEMS:
        three = predict(system, [*teams, [weak, weak]])
        assert three.win[0] > 0.98 and three.expected_rank[0] < 1.02


def test_four_teams_first_place_matches_direct_quadrature() -> None:
    mean = np.array([1500.0, 1600.0, 1450.0, 2400.0])
    sd = np.array([300.0, 250.0, 420.0, 100.0])
    for gaussian in (True, False):
        dist = stats.norm if gaussian else stats.logistic
        scale = sd if gaussian else sd * math.sqrt(3.0) / math.pi
        ref = []
        for t in range(4):
            def f(x: float, t: int = t, dist: Any = dist, scale: Any = scale) -> float:
                others = [u for u in range(4) if u != t]
                return float(dist.pdf(x, mean[t], scale[t]) * np.prod([dist.cdf(x, mean[u], scale[u])
                                                                       for u in others]))
            ref.append(integrate.quad(f, -20000, 20000, points=list(mean), limit=400, epsabs=1e-15)[0])
        assert np.allclose(_integrate(mean, sd, gaussian), ref, atol=1e-9, rtol=0), gaussian
    # two teams: the closed form of a difference of Gaussians
    two = _integrate(mean[:2], sd[:2], True)
    assert math.isclose(two[0], stats.norm.cdf((mean[0] - mean[1]) / math.hypot(sd[0], sd[1])), abs_tol=1e-10)


def test_point_ratings_first_place_is_plackett_luce() -> None:
    elo = _system("elo")
    teams = [[np.array([r, 0.0])] for r in (1500.0, 1700.0, 1300.0, 1500.0)]
    pred = predict(elo, teams)
    strength = np.array([10 ** (r / 400) for r in (1500.0, 1700.0, 1300.0, 1500.0)])
    assert np.allclose(pred.win, strength / strength.sum(), atol=1e-14)
    # the mean of the members: a team of 1400 and 1600 plays as a 1500
    team = predict(elo, [[np.array([1400.0, 3.0]), np.array([1600.0, 9.0])], [np.array([1500.0, 0.0])]])
    assert team.expected_score == 0.5


def test_sum_models_add_members_and_trueskill_draw_margin_is_the_packages() -> None:
    trueskill = pytest.importorskip("trueskill")
    ts = _system("trueskill")
    p = ts.params
    env = trueskill.TrueSkill(mu=p.mu, sigma=p.sigma, beta=p.beta, tau=p.tau,  # type: ignore[attr-defined]
                              draw_probability=p.draw_probability)  # type: ignore[attr-defined]
    a, b = [ts.new_belief(), ts.new_belief()], [ts.new_belief(), ts.new_belief()]
    pred = predict(ts, [a, b])
    # even teams: P(draw) = P(|d| ≤ ε) with d ~ N(0, Σ σ² + 4 (β² + τ²)) and the package's margin for 4 players
    c = math.sqrt(4 * (p.sigma**2 + p.beta**2 + p.tau**2))  # type: ignore[attr-defined]
    eps = trueskill.calc_draw_margin(p.draw_probability, 4, env)  # type: ignore[attr-defined]
    # (the package's own inverse normal cdf is an approximation good to ~1e-9)
    assert math.isclose(pred.draw or 0.0, 2 * stats.norm.cdf(eps / c) - 1, rel_tol=1e-6)
    # Elo-MMχ with team_performance=sum: a team of two new players against one with their summed
    # mean is even only if the means add up (the sum model of docs/teams.md)
    mmx = make_system("elo-mmx", {"team_performance": "sum"})
    pair = [mmx.new_belief(), mmx.new_belief()]
    solo = mmx.new_belief()
    solo[0] = 2 * pair[0][0]
    assert math.isclose(predict(mmx, [pair, [solo]]).win[0], 0.5, abs_tol=1e-12)
    # the default mean model: a pair against one player of their mean skill is even
    mean = _system("elo-mmx")
    solo[0] = pair[0][0]
    assert math.isclose(predict(mean, [pair, [solo]]).win[0], 0.5, abs_tol=1e-12)


@pytest.mark.parametrize("teams", [[[0, 1], [2]], [[0], [1], [2]]])
def test_cowan_refuses_teams_and_more_than_two_players(teams: list[list[int]]) -> None:
    with pytest.raises(RatingError, match="cowan predicts only two single players"):
        predict(_system("cowan"), _teams("cowan", teams))


def test_a_hopeless_trueskill_lobby_has_no_negative_draw() -> None:
    pred = predict(_system("trueskill"), _teams("trueskill", [[0, 1, 2], [6]]))
    assert pred.draw is not None and 0.0 <= pred.draw < 1e-12 and pred.win[0] == 1.0


def test_a_lobby_needs_two_non_empty_teams() -> None:
    elo = _system("elo")
    with pytest.raises(RatingError, match="at least two teams"):
        predict(elo, [[elo.new_belief()]])
    with pytest.raises(RatingError, match="team 1 has no players"):
        predict(elo, [[elo.new_belief()], []])


@pytest.mark.parametrize("name", ["elo", "trueskill", "elo-mmr", "elo-mmx"])
def test_lobby_and_evaluation_predict_with_one_team_model(name: str) -> None:
    """``mmr eval``'s team predictor and the lobby give the same numbers bit for bit (members at full
    weight), and partial play (ω < 1) keeps the eval's probabilities in (0, 1)."""
    system = _system(name)
    pred = team_predictor(system)
    for idx in ([[0, 1], [2, 3]], [[0], [1, 2, 3]], [[4, 5, 6], [7]], [[3], [5]], [[1, 6], [0, 2]]):
        a, b = _teams(name, idx)
        wa, wb = np.ones(len(a)), np.ones(len(b))
        assert predict(system, [a, b]).expected_score == pred.win_probability(a, wa, b, wb)
        assert team(system, a).mean == pred.strength(a, wa)
    a, b = _teams(name, [[0], [1, 2]])
    for w in (0.05, 0.5, 1.0):
        p = pred.win_probability(a, np.array([w]), b, np.array([1.0, w]))
        assert 0.0 < p < 1.0
