"""The side advantage (stream.ratings.advantage, docs/advantage.md): the learning rule against plain
oracles, every system's shifted prediction and update against plain formulas, "no advantage" equal to
the old arithmetic bit for bit, and the evaluation learning a real home advantage back."""

from __future__ import annotations

import math

import numpy as np
import pytest
from home_matches import home_matches
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.special import ndtr

from stream.events.model import RoundEvent, Teams
from stream.ratings import make_system
from stream.ratings.advantage import MATCH_SIDE, AdvantageParams, Advantages, SideBelief, split_params
from stream.ratings.base import RatingError
from stream.ratings.elo_mmr.system import EloMMR
from stream.ratings.elo_mmr.teams_naive import rate_team_round_naive
from stream.ratings.lobby import predict
from stream.tools.evaluate import evaluate_events

SYSTEMS = ("elo", "glicko", "trueskill", "elo-mmr", "elo-mmx")
DAY = 86_400_000


def _elo_oracle_step(h: float, v: float, d: float, s: float, scale: float, drift: float) -> tuple[float, float]:
    """Glicko's step for one "player" h (closed-form derivative of Elo's logistic)."""
    v += drift
    p = 1.0 / (1.0 + 10.0 ** (-(d + h) / scale))
    q = math.log(10.0) / scale
    info = q * q * p * (1 - p)
    prec = 1.0 / v + info
    return h + q * (s - p) / prec, 1.0 / prec


def test_learn_matches_glicko_step_for_elo() -> None:
    """One side against none: the rule is Glicko's step of one rating (to the central difference's
    error: (δ/s)² ~ 1e-6 relative a step, δ = 1e-3·u)."""
    params = AdvantageParams(advantage_sd=0.5, advantage_drift=1e-4)
    unit = 315.0
    adv = Advantages(params, unit)
    h, v = 0.0, (0.5 * unit) ** 2
    rng = np.random.default_rng(3)
    for _ in range(200):
        d = float(rng.normal(0, 150))
        s = float(rng.choice([0.0, 0.5, 1.0]))
        def prob(x: float, d: float = d) -> float:
            return 1.0 / (1.0 + 10.0 ** (-(d + x) / 400.0))
        adv.learn(MATCH_SIDE, None, prob, s)
        h, v = _elo_oracle_step(h, v, d, s, 400.0, 1e-4 * unit * unit)
        got = adv.sides[MATCH_SIDE]
        assert got.mean == pytest.approx(h, rel=1e-5, abs=1e-4)
        assert got.var == pytest.approx(v, rel=1e-5)


def test_two_sides_are_the_rank_one_gaussian_update() -> None:
    """Two labelled sides: the dense Gaussian update of (h_a, h_b) observed through h_a − h_b."""
    adv = Advantages(AdvantageParams(advantage_drift=0.0), 100.0)
    adv.learn("home", "away", lambda x: float(ndtr((20.0 + x) / 150.0)), 1.0)
    adv.learn("away", "home", lambda x: float(ndtr((-35.0 + x) / 150.0)), 0.0)
    # the same two steps with matrices
    mean, cov = np.zeros(2), np.eye(2) * 100.0**2
    for c, d, s in ((np.array([1.0, -1.0]), 20.0, 1.0), (np.array([-1.0, 1.0]), -35.0, 0.0)):
        x = float(c @ mean)
        eps = 1e-3 * 100.0
        p = float(ndtr((d + x) / 150.0))
        dp = (float(ndtr((d + x + eps) / 150.0)) - float(ndtr((d + x - eps) / 150.0))) / (2 * eps)
        g, info = (s - p) * dp / (p * (1 - p)), dp * dp / (p * (1 - p))
        sc = cov @ c
        denom = 1.0 + info * float(c @ sc)
        mean = mean + sc * g / denom
        cov = cov - np.outer(sc, sc) * info / denom
        cov = np.diag(np.diag(cov))  # the pool keeps independent beliefs: the diagonal
    assert adv.sides["home"].mean == pytest.approx(mean[0], rel=1e-12)
    assert adv.sides["away"].mean == pytest.approx(mean[1], rel=1e-12)
    assert adv.sides["home"].var == pytest.approx(cov[0, 0], rel=1e-12)
    assert adv.sides["away"].var == pytest.approx(cov[1, 1], rel=1e-12)
    assert adv.sides["home"].mean == pytest.approx(-adv.sides["away"].mean, rel=1e-12)


def test_same_side_or_off_learns_nothing() -> None:
    adv = Advantages(AdvantageParams(), 100.0)
    adv.learn("blue", "blue", lambda x: 0.5, 1.0)
    adv.learn(None, None, lambda x: 0.5, 1.0)
    assert adv.sides == {}
    off = Advantages(AdvantageParams(advantage=False), 100.0)
    off.learn(MATCH_SIDE, None, lambda x: 0.5, 1.0)
    assert off.sides == {} and off.shift(MATCH_SIDE) == 0.0


def test_params_split_and_refused() -> None:
    rest, adv = split_params({"k": "20", "advantage_sd": "0.5", "advantage": "off"})
    assert rest == {"k": "20"} and adv.advantage_sd == 0.5 and not adv.advantage
    with pytest.raises(RatingError, match="advantage_rate"):
        split_params({"advantage_rate": "1"})
    with pytest.raises(RatingError, match="advantage_sd"):
        AdvantageParams(advantage_sd=-1.0)


def test_a_side_may_start_from_its_own_prior() -> None:
    """``advantage_init_<side>``/``advantage_sd_<side>``: a side's own prior (what ``mmr fit`` writes),
    read back from the keys it is written under; the others keep the general prior."""
    params = AdvantageParams.from_mapping({"advantage_init_home": "26.5", "advantage_sd_home": "0.04",
                                           "advantage_init_away": -26.5, "advantage_sd_match": 0.1,
                                           "advantage_init": 12})
    assert params.prior("home") == (26.5, 0.04) and params.prior("away") == (-26.5, 1.0)
    assert params.prior(MATCH_SIDE) == (12.0, 0.1) and params.prior("blue") == (0.0, 1.0)
    assert AdvantageParams.from_mapping(params.as_dict()) == params
    assert params.as_dict()["advantage_init_home"] == 26.5 and "advantage_init_match" not in params.as_dict()
    adv = Advantages(params, 200.0)
    assert adv.belief("home") == SideBelief(26.5, (0.04 * 200.0) ** 2)
    assert adv.shift("away") == -26.5 and adv.shift("blue") == 0.0 and adv.shift(MATCH_SIDE) == 12.0
    # a narrow prior learns less from one outcome than the default's
    wide = Advantages(AdvantageParams(), 200.0)
    for a in (adv, wide):
        a.learn("home", "away", lambda x: 1.0 / (1.0 + 10.0 ** (-x / 400.0)), 0.0)
    assert abs(adv.sides["home"].mean - 26.5) < abs(wide.sides["home"].mean - 0.0)
    assert AdvantageParams() == AdvantageParams.from_mapping({}) and AdvantageParams().prior("home") == (0.0, 1.0)


@pytest.mark.parametrize(("values", "reason"), [
    ({"advantage_init_match": 1}, "the match side's is advantage_init"),
    ({"advantage_sd_home": -1}, "advantage_sd_home"),
    ({"advantage_init_home": "inf"}, "advantage_init_home"),
    ({"advantage_init_" + "x" * 33: 1}, "1 to 32 characters"),
    ({"advantage_init_": 1}, "unknown parameter"),
])
def test_a_side_prior_is_refused_when_invalid(values: dict[str, object], reason: str) -> None:
    with pytest.raises(RatingError, match=reason):
        split_params(values)


def test_elo_shifted_match_is_the_plain_formula() -> None:
    elo = make_system("elo")
    a, b = np.array([1510.0, 3.0]), np.array([1490.0, 7.0])
    new = elo.rate_matches([a, b], np.array([0]), np.array([1]), np.array([0.0]), np.array([0]),
                           advantages=np.array([60.0]))
    e = 1.0 / (1.0 + 10.0 ** ((1490.0 - 1570.0) / 400.0))
    assert new[0][0] == 1510.0 + 32.0 * (0.0 - e)
    assert new[1][0] == 1490.0 - 32.0 * (0.0 - e)
    assert elo.win_probability(a, b, 60.0) == e


def test_winning_at_home_moves_less() -> None:
    """Every system: a home win moves both players less than the same win on neutral ground."""
    for name in SYSTEMS:
        system = make_system(name)
        a, b = system.new_belief(), system.new_belief()
        args = ([a, b], np.array([0]), np.array([1]), np.array([1.0]), np.array([DAY]))
        neutral = system.rate_matches(*args)
        home = system.rate_matches(*args, advantages=np.array([0.3 * system.advantage_unit()]))
        assert 0 < home[0][0] - a[0] < neutral[0][0] - a[0], name
        assert system.win_probability(a, b, 0.3 * system.advantage_unit()) > system.win_probability(a, b), name


@settings(max_examples=30, deadline=None)
@given(st.sampled_from(SYSTEMS), st.lists(st.tuples(st.floats(-300, 300), st.floats(20, 300)), min_size=2,
                                          max_size=2), st.sampled_from([0.0, 0.5, 1.0]))
def test_zero_advantage_is_the_old_update_bit_for_bit(name: str, mus: list[tuple[float, float]], score: float) -> None:
    """``advantages`` of zeros, a zero ``team_shift`` and ``advantage=0`` change no bit."""
    system = make_system(name)
    beliefs = []
    for dm, sd in mus:
        b = system.new_belief().copy()
        b[0] += dm
        if name not in ("elo",):
            b[1] = sd if name != "trueskill" else sd / 40.0
        beliefs.append(b)
    args = (beliefs, np.array([0]), np.array([1]), np.array([score]), np.array([5 * DAY]))
    old = system.rate_matches(*args)
    new = system.rate_matches(*args, advantages=np.zeros(1))
    for x, y in zip(old, new, strict=True):
        assert np.array_equal(x, y)
    assert system.win_probability(beliefs[0], beliefs[1], 0.0) == system.win_probability(beliefs[0], beliefs[1])
    if name in ("elo", "trueskill", "elo-mmr", "elo-mmx"):
        team_of, ranks = np.array([0, 1]), np.array([1, 2] if score == 1.0 else [2, 1] if score == 0.0 else [1, 1])
        plain = system.rate_team_round(beliefs, team_of, ranks, 5 * DAY)
        zero = system.rate_team_round(beliefs, team_of, ranks, 5 * DAY, team_shift=np.zeros(2))
        for x, y in zip(plain, zero, strict=True):
            assert np.array_equal(x, y)


@pytest.mark.parametrize("model", ["mean", "sum"])
@pytest.mark.parametrize("name", ["elo-mmx", "elo-mmr"])
def test_team_shift_matches_the_dense_oracle(name: str, model: str) -> None:
    """A shifted team round of the kernel against the dense oracle (docs/teams.md)."""
    system = make_system(name, {"team_performance": model, "drift_per_day": 30.0})
    assert isinstance(system, EloMMR)
    rng = np.random.default_rng(11)
    team_of = np.repeat(np.arange(2), [3, 4])
    beliefs = []
    for _ in team_of:
        b = system.new_belief().copy()
        b[0] += rng.normal(0, 200)
        b[1] = rng.uniform(60, 300)
        b[5] = 0.0
        b[4] = 3.0
        beliefs.append(b)
    ranks = np.array([2, 1])
    shift = np.array([55.0, -10.0])
    got = system.rate_team_round_detailed(beliefs, team_of, ranks, 9 * DAY, 1.0, math.inf, None, shift)
    want, perfs, team_perfs = rate_team_round_naive(beliefs, team_of.tolist(), ranks.tolist(), 9 * DAY, system.params,
                                                    system.gaussian, 1.0, math.inf, None, shift)
    np.testing.assert_allclose(got.team_performances, team_perfs, rtol=1e-11)
    np.testing.assert_allclose(got.performances, perfs, rtol=1e-9)
    for g, w in zip(got.beliefs, want, strict=True):
        np.testing.assert_allclose(g[:2], w[:2], rtol=1e-9)


def test_shifted_match_of_elo_mmr_is_a_shifted_team_of_one() -> None:
    """A home player of Elo-MMχ is observed at (solved performance − h)."""
    system = make_system("elo-mmx")
    a, b = system.new_belief(), system.new_belief()
    new = system.rate_matches([a, b], np.array([0]), np.array([1]), np.array([1.0]), np.array([0]),
                              advantages=np.array([80.0]))
    want, _, _ = rate_team_round_naive([a, b], [0, 1], [1, 2], 0, system.params, True, team_shift=[80.0, 0.0])
    np.testing.assert_allclose(new[0][:2], want[0][:2], rtol=1e-9)
    np.testing.assert_allclose(new[1][:2], want[1][:2], rtol=1e-9)


def test_lobby_takes_sides() -> None:
    for name in SYSTEMS:
        system = make_system(name)
        a, b = system.new_belief(), system.new_belief()
        h = 0.2 * system.advantage_unit()
        got = predict(system, [[a], [b]], [h, 0.0])
        assert got.expected_score == pytest.approx(system.win_probability(a, b, h), rel=1e-12)
        three = predict(system, [[a], [b], [system.new_belief()]], [h, 0.0, 0.0]) if name != "glicko" else None
        if three is not None:
            assert three.win[0] > three.win[1]


def test_eval_learns_a_real_home_advantage() -> None:
    """``mmr eval``'s learned advantage converges near the true one, and predicts better than none."""
    events = home_matches(80.0)
    res, ev = evaluate_events(make_system("elo"), events, warmup=0.1, min_history=0)
    learned = ev.advantages["p"].sides[MATCH_SIDE]
    assert learned.mean == pytest.approx(80.0, abs=15.0)
    off, _ = evaluate_events(make_system("elo"), events, warmup=0.1, min_history=0,
                             advantage=AdvantageParams(advantage=False))
    assert res["log_loss"] < off["log_loss"] - 0.005
    assert res["advantage"]["p"][MATCH_SIDE]["mean"] == learned.mean


def test_eval_learns_team_sides() -> None:
    """Team rounds with home/away labels: the two sides' difference converges near the truth."""
    rng = np.random.default_rng(2)
    skill = rng.normal(1500.0, 150.0, 60)
    events: list[RoundEvent] = []
    for i in range(5000):
        who = rng.choice(60, 6, replace=False)
        d = skill[who[:3]].mean() - skill[who[3:]].mean() + 70.0
        win = rng.random() < 1.0 / (1.0 + 10.0 ** (-d / 400.0))
        ranks = np.array([1, 2] if win else [2, 1], dtype=np.int64)
        team_of = np.repeat(np.arange(2), 3)
        events.append(RoundEvent(event_id=f"r{i}", pool="t", round_id=f"r{i}", time=i * 1000,
                                 players=[f"x{j}" for j in who.tolist()], ranks=ranks[team_of],
                                 teams=Teams(team_of=team_of, ranks=ranks, weights=np.ones(6), sides=("home", "away"))))
    _, ev = evaluate_events(make_system("elo"), events, warmup=0.1, min_history=0)
    sides = ev.advantages["t"].sides
    assert sides["home"].mean - sides["away"].mean == pytest.approx(70.0, abs=20.0)
