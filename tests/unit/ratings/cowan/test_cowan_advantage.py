"""Cowan's side advantage (stream.ratings.cowan.shift, docs/advantage.md): no advantage is the old
arithmetic bit for bit on every path, the naive algorithm agrees with the kernels, a home win moves
ratings less, bad advantages are refused, and the evaluation learns a real home advantage back.
The kernels against the naive oracle and batching with advantages:
tests/property/ratings/cowan/test_cowan_properties.py."""

from __future__ import annotations

import math

import numpy as np
import pytest
from home_matches import home_matches

from stream.ratings import make_system
from stream.ratings.advantage import MATCH_SIDE, AdvantageParams
from stream.ratings.base import RatingError
from stream.ratings.cowan.system import Cowan
from stream.ratings.lobby import predict
from stream.tools.evaluate import evaluate_events

PARAMS = [{}, {"draw_form": "blatmmr"}, {"algorithm": "laplace"}]


def _population(s: Cowan, n: int = 10, seed: int = 3) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    bel = [s.new_belief() for _ in range(n)]
    a = rng.integers(0, n, 4 * n)
    b = (a + rng.integers(1, n, 4 * n)) % n
    return s.rate_matches(bel, a, b, rng.choice([0.0, 1.0], 4 * n), np.zeros(4 * n, np.int64))


@pytest.mark.parametrize("params", PARAMS, ids=["fast", "blatmmr", "laplace"])
def test_no_advantage_is_the_old_arithmetic_bit_for_bit(params: dict[str, object]) -> None:
    """Zeros (and −0.0) as advantages change no bit on any path: one match, the serial and the
    parallel batch kernels, a pool's arena, the prediction."""
    s = Cowan(params)
    bel = _population(s)
    rng = np.random.default_rng(1)
    count = 300
    a = rng.integers(0, 10, count)
    b = (a + rng.integers(1, 10, count)) % 10
    sc = rng.choice([0.0, 0.5, 1.0, 0.3], count)
    t = np.zeros(count, np.int64)
    zeros = np.where(rng.random(count) < 0.5, 0.0, -0.0)
    for min_batch in (0, 10**9):  # the parallel waves, the serial kernel
        s.parallel_min_batch, s.parallel_min_width = min_batch, 0
        plain = s.rate_matches(bel, a, b, sc, t)
        assert all(np.array_equal(x, y) for x, y in zip(plain, s.rate_matches(bel, a, b, sc, t, advantages=zeros),
                                                        strict=True))
    one = s.rate_matches(bel[:2], np.array([0]), np.array([1]), np.array([1.0]), t[:1])
    assert all(np.array_equal(x, y) for x, y in zip(
        one, s.rate_matches(bel[:2], np.array([0]), np.array([1]), np.array([1.0]), t[:1], advantages=np.zeros(1)),
        strict=True))
    arena = s.new_arena()
    slots = arena.add(bel)
    s.rate_arena(arena, slots, a, b, sc, advantages=zeros)
    assert all(np.array_equal(x, y) for x, y in zip(arena.beliefs(slots), plain, strict=True))
    assert s.win_probability(bel[0], bel[1], 0.0) == s.win_probability(bel[0], bel[1])
    assert s.win_probability(bel[0], bel[1], -0.0) == s.win_probability(bel[0], bel[1])


@pytest.mark.parametrize("score", [1.0, 0.5, 0.0])
def test_naive_algorithm_option_takes_the_advantage_too(score: float) -> None:
    """``algorithm=naive`` (the oracle as a system, on a pool's arena as well) == the kernels."""
    fast, naive = Cowan({"n": 200}), Cowan({"n": 200, "algorithm": "naive"})
    bel = _population(fast)
    args = (bel[:3], np.array([0, 1]), np.array([1, 2]), np.array([score, 1.0]), np.zeros(2, np.int64))
    adv = np.array([0.41, -0.2])
    got = fast.rate_matches(*args, advantages=adv, quantise=False)
    want = naive.rate_matches(*args, advantages=adv, quantise=False)
    assert max(float(np.max(np.abs(fast.full(x) - fast.full(y)))) for x, y in zip(got, want, strict=True)) < 1e-12
    arena = naive.new_arena()
    slots = arena.add(bel[:3])
    naive.rate_arena(arena, slots, *args[1:4], advantages=adv)
    assert all(np.array_equal(x, y) for x, y in zip(arena.beliefs(slots),
                                                    naive.rate_matches(*args, advantages=adv), strict=True))


def test_a_home_win_moves_less_and_is_expected_more() -> None:
    """The advantage enters the update as it enters the prediction: the home side's win was more
    likely, so it moves both players less than the same win on neutral ground; its loss moves them
    more. A whole number of grid steps is A's skills moved by that many cells."""
    s = Cowan()
    a, b = s.new_belief(), s.new_belief()
    t = np.zeros(1, np.int64)
    h = 0.3 * s.advantage_unit()
    p0, ph = s.win_probability(a, b), s.win_probability(a, b, h)
    assert p0 == pytest.approx(0.5, abs=1e-14) and ph > 0.55
    assert s.win_probability(a, b, -h) == pytest.approx(1.0 - ph, abs=1e-13)
    mean = [s.summary(x).mu for x in (a, b)]
    for score, sign in ((1.0, 1.0), (0.0, -1.0)):
        neutral = s.rate_matches([a, b], np.array([0]), np.array([1]), np.array([score]), t)
        home = s.rate_matches([a, b], np.array([0]), np.array([1]), np.array([score]), t, advantages=np.array([h]))
        moved_neutral = sign * (s.summary(neutral[0]).mu - mean[0])
        moved_home = sign * (s.summary(home[0]).mu - mean[0])
        assert (0 < moved_home < moved_neutral) if score == 1.0 else (moved_home > moved_neutral > 0)
    # 5 grid steps: the luck of A's cell i against B's cell k is that of cell i + 5 against k
    step = 2.0 * s.p.M / s.p.n
    bel = _population(s)
    la, pa = s.window(bel[0])
    moved = np.concatenate(([float(la + 5), bel[0][1]], pa))
    assert s.win_probability(bel[0], bel[1], 5 * step) == pytest.approx(s.win_probability(moved, bel[1]), abs=1e-13)


def test_bad_advantages_are_refused() -> None:
    s = Cowan()
    bel = _population(s, n=3)
    args = (bel, np.array([0, 1]), np.array([1, 2]), np.array([1.0, 0.0]), np.zeros(2, np.int64))
    for bad in ([math.nan, 0.0], [0.0, math.inf], [14.01, 0.0], [0.1]):
        with pytest.raises(RatingError, match="advantage"):
            s.rate_matches(*args, advantages=np.array(bad))
    with pytest.raises(RatingError, match="advantage"):
        s.win_probability(bel[0], bel[1], math.nan)
    s.rate_matches(*args, advantages=np.array([-14.0, 14.0]))  # the grid's width either way is allowed
    assert Cowan.side_advantage
    assert s.advantage_unit() == pytest.approx(math.pi / math.sqrt(3.0))
    assert Cowan({"algorithm": "laplace"}).advantage_unit() == pytest.approx(math.pi / math.sqrt(3.0))


def test_lobby_takes_cowans_sides() -> None:
    s = Cowan()
    bel = _population(s, n=3)
    h = 0.2 * s.advantage_unit()
    got = predict(s, [[bel[0]], [bel[1]]], [h, 0.0])
    assert got.expected_score == pytest.approx(s.win_probability(bel[0], bel[1], h), rel=1e-12)


def test_eval_learns_a_real_home_advantage_for_cowan() -> None:
    """``mmr eval`` learns cowan's advantage (its own units: skill) from matches with a home edge of
    80 Elo points, and predicts better with it than without."""
    events = home_matches(80.0, n=3000, n_players=100)
    res, ev = evaluate_events(make_system("cowan"), events, warmup=0.1, min_history=0)
    learned = ev.advantages["p"].sides[MATCH_SIDE]
    assert 0.15 < learned.mean < 1.5  # skill units (80 Elo points on Cowan's luck with β = 0.8: ~0.55)
    off, _ = evaluate_events(make_system("cowan"), events, warmup=0.1, min_history=0,
                             advantage=AdvantageParams(advantage=False))
    assert res["log_loss"] < off["log_loss"] - 0.005
