"""Team rounds of the baselines: TrueSkill against the ``trueskill`` package, team Elo by hand,
teams of one against the individual systems, and the evaluation's team predictions."""

from __future__ import annotations

import math

import numpy as np
import pytest

from stream.ratings import RatingError, make_system
from stream.ratings.baselines.elo import Elo
from stream.ratings.baselines.trueskill import TrueSkill
from stream.ratings.team_scores import team_predictor


def _ts_params() -> dict[str, float]:
    return {"mu": 25.0, "sigma": 25.0 / 3, "beta": 25.0 / 6, "tau": 25.0 / 300, "draw_probability": 0.1}


def _random_teams(rng: np.random.Generator, sizes: list[int]) -> tuple[list[np.ndarray], np.ndarray]:
    n = sum(sizes)
    beliefs = [np.array([m, s, 3.0]) for m, s in zip(rng.normal(25.0, 4.0, n), rng.uniform(1.0, 8.0, n),
                                                      strict=True)]
    team_of = np.repeat(np.arange(len(sizes)), sizes)
    return beliefs, team_of


@pytest.mark.parametrize(("sizes", "ranks", "weighted"), [
    ([2, 2], [1, 2], False),
    ([2, 2, 2], [1, 1, 2], False),  # a tie
    ([1, 3], [2, 1], False),
    ([5, 5], [2, 1], True),
    ([2, 3, 1, 2], [3, 1, 3, 2], False),  # ties between non-adjacent teams in the listing
    ([4, 4, 4, 4, 4], [1, 2, 3, 4, 5], True),
])
def test_trueskill_teams_match_package(sizes: list[int], ranks: list[int], weighted: bool) -> None:
    ts = pytest.importorskip("trueskill")
    env = ts.TrueSkill(**_ts_params())
    ours = TrueSkill(_ts_params())
    rng = np.random.default_rng(sum(sizes) * 10 + len(sizes))
    beliefs, team_of = _random_teams(rng, sizes)
    w = rng.uniform(0.2, 1.0, len(beliefs)) if weighted else None
    out = ours.rate_team_round(beliefs, team_of, np.array(ranks), 0, player_weights=w)
    groups = [tuple(ts.Rating(float(beliefs[i][0]), float(beliefs[i][1])) for i in np.flatnonzero(team_of == t))
              for t in range(len(sizes))]
    weights = None if w is None else [tuple(w[team_of == t]) for t in range(len(sizes))]
    ref = env.rate(groups, ranks=[r - 1 for r in ranks], weights=weights, min_delta=1e-10)
    flat = [r for g in ref for r in g]
    assert len(flat) == len(out)
    for o, r in zip(out, flat, strict=True):
        assert o[0] == pytest.approx(r.mu, abs=1e-5)
        assert o[1] == pytest.approx(r.sigma, abs=1e-5)
        assert o[2] == 4.0


@pytest.mark.parametrize("name", ["trueskill", "elo"])
def test_team_round_where_all_tie_changes_nothing(name: str) -> None:
    """As for rounds of players (the interface's rule, and Elo-MMR's team rounds)."""
    system = make_system(name)
    beliefs = [system.new_belief() for _ in range(4)]
    out = system.rate_team_round(beliefs, np.array([0, 0, 1, 1]), np.array([2, 2]), 0)
    assert all(a is b for a, b in zip(out, beliefs, strict=True))


@pytest.mark.parametrize("name", ["trueskill", "elo"])
def test_teams_of_one_are_the_individual_round_bit_for_bit(name: str) -> None:
    system = make_system(name)
    rng = np.random.default_rng(5)
    n = 9
    beliefs = [system.new_belief() for _ in range(n)]
    for k in range(6):  # different beliefs, ties included
        ranks = rng.integers(1, 6, n)
        one = system.rate_round(beliefs, ranks, k)
        two = system.rate_team_round(beliefs, np.arange(n), ranks, k)
        assert all(np.array_equal(a, b) for a, b in zip(one, two, strict=True))
        beliefs = one


def test_team_elo_by_hand() -> None:
    elo = Elo({"k": 32.0})
    r = [1600.0, 1400.0, 1450.0, 1500.0, 1700.0]
    beliefs = [np.array([x, 2.0]) for x in r]
    team_of = np.array([0, 0, 1, 1, 2])
    w = np.array([1.0, 0.5, 1.0, 1.0, 1.0])
    out = elo.rate_team_round(beliefs, team_of, np.array([1, 3, 2]), 0, player_weights=w)
    ta = (1600.0 + 0.5 * 1400.0) / 1.5
    tb, tc = 1475.0, 1700.0
    e = lambda x, y: 1.0 / (1.0 + 10.0 ** ((y - x) / 400.0))  # noqa: E731
    step_a = 32.0 * ((1 - e(ta, tb)) + (1 - e(ta, tc))) / 2
    step_b = 32.0 * ((0 - e(tb, ta)) + (0 - e(tb, tc))) / 2
    step_c = 32.0 * ((0 - e(tc, ta)) + (1 - e(tc, tb))) / 2
    want = [1600 + step_a, 1400 + 0.5 * step_a, 1450 + step_b, 1500 + step_b, 1700 + step_c]
    assert [o[0] for o in out] == pytest.approx(want, rel=1e-12)
    assert [o[1] for o in out] == [3.0] * 5


def test_trueskill_team_winners_rise_and_uncertain_members_move_more() -> None:
    ts = TrueSkill()
    beliefs = [np.array([1500.0, 100.0, 0.0]), np.array([1500.0, 300.0, 0.0]),
               np.array([1500.0, 200.0, 0.0]), np.array([1500.0, 200.0, 0.0])]
    out = ts.rate_team_round(beliefs, np.array([0, 0, 1, 1]), np.array([1, 2]), 0)
    assert out[0][0] > 1500.0 and out[1][0] > out[0][0]
    assert out[2][0] < 1500.0 and out[3][0] == pytest.approx(out[2][0])


@pytest.mark.parametrize("name", ["glicko", "codeforces", "topcoder"])
def test_systems_without_a_team_model_refuse(name: str) -> None:
    system = make_system(name)
    beliefs = [system.new_belief() for _ in range(4)]
    with pytest.raises(RatingError, match="does not rate team rounds"):
        system.rate_team_round(beliefs, np.array([0, 0, 1, 1]), np.array([1, 2]), 0)
    with pytest.raises(RatingError, match="does not rate team rounds"):
        team_predictor(system)


@pytest.mark.parametrize("name", ["elo", "trueskill", "elo-mmr", "elo-mmx"])
def test_team_predictions_of_teams_of_one_are_the_individual_ones(name: str) -> None:
    system = make_system(name)
    pred = team_predictor(system)
    rng = np.random.default_rng(1)
    beliefs = [system.new_belief() for _ in range(4)]
    beliefs = system.rate_round(beliefs, np.array([1, 2, 3, 4]), 0)
    beliefs = system.rate_round(beliefs, rng.permutation(4) + 1, 86_400_000)
    one = np.ones(1)
    for a in beliefs:
        assert pred.strength([a], one) == pytest.approx(system.ranking_score(a), rel=1e-15)
        for b in beliefs:
            assert pred.win_probability([a], one, [b], one) == pytest.approx(system.win_probability(a, b), rel=1e-12)


def test_trueskill_team_win_probability_by_hand() -> None:
    ts = TrueSkill(_ts_params())
    a = [np.array([30.0, 3.0, 0.0]), np.array([20.0, 4.0, 0.0])]
    b = [np.array([26.0, 2.0, 0.0])]
    wa, wb = np.array([1.0, 0.5]), np.ones(1)
    p = ts.params
    dm = 30.0 + 10.0 - 26.0
    c = math.sqrt(9 + 0.25 * 16 + 4 + (1 + 0.25 + 1) * (p.tau**2 + p.beta**2))
    eps = 0.12566134685507402 * math.sqrt(3) * p.beta  # Φ⁻¹(0.55)
    phi = lambda x: 0.5 * math.erfc(-x / math.sqrt(2))  # noqa: E731
    win, loss = phi((dm - eps) / c), phi((-dm - eps) / c)
    assert team_predictor(ts).win_probability(a, wa, b, wb) == pytest.approx(win + (1 - win - loss) / 2, rel=1e-12)


@pytest.mark.parametrize("name", ["elo-mmx", "elo-mmr"])
def test_elo_mmr_team_exact_sigma(name: str) -> None:
    """``team_exact_sigma``: the exact conditional variance as new σ² (Elo-MMχ: the same new μ);
    teams of one unchanged bit for bit. The sum model's numbers (``team_performance=sum``); the mean
    model's below."""
    plain = make_system(name, {"team_exact_sigma": "false", "team_performance": "sum"})
    exact = make_system(name, {"team_performance": "sum"})
    beliefs = [plain.new_belief() for _ in range(5)]
    team_of, ranks = np.array([0, 0, 1, 1, 2]), np.array([2, 1, 3])
    a = plain.rate_team_round(beliefs, team_of, ranks, 0)
    b = exact.rate_team_round(beliefs, team_of, ranks, 0)
    assert np.array_equal(a[4], b[4])  # the team of one
    sd2 = 350.0**2 + 0.2 * 80.0**2  # diffused σ² of a new player (weight_limit 0.2, sig_limit 80)
    v = sd2 + (1 + 1 / 0.2) * 80.0**2  # + β²
    for i in range(4):
        assert b[i][1] ** 2 == pytest.approx(sd2 - sd2**2 / (2 * v), rel=1e-12)
        assert b[i][1] > a[i][1]
        if name == "elo-mmx":
            assert b[i][0] == pytest.approx(a[i][0], rel=1e-12)
        else:
            assert np.sign(b[i][0] - 1500.0) == np.sign(a[i][0] - 1500.0)
    one = [exact.rate_round(beliefs, np.array([3, 1, 2, 5, 4]), 0),
           exact.rate_team_round(beliefs, np.arange(5), np.array([3, 1, 2, 5, 4]), 0)]
    assert all(np.array_equal(x, y) for x, y in zip(*one, strict=True))
    # the mean model: a = ½, V_t = Σ a² σ'² + β², new σ² = σ'² − a² σ'⁴ / V_t
    mean = make_system(name)
    c = mean.rate_team_round(beliefs, team_of, ranks, 0)
    v_mean = 2 * 0.25 * sd2 + (1 + 1 / 0.2) * 80.0**2
    for i in range(4):
        assert c[i][1] ** 2 == pytest.approx(sd2 - 0.25 * sd2**2 / v_mean, rel=1e-12)
    one = [mean.rate_round(beliefs, np.array([3, 1, 2, 5, 4]), 0),
           mean.rate_team_round(beliefs, np.arange(5), np.array([3, 1, 2, 5, 4]), 0)]
    assert all(np.array_equal(x, y) for x, y in zip(*one, strict=True))
