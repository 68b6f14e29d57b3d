"""Baseline systems: published worked examples, hand-computed steps, the trueskill package, naive oracles."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy.stats import norm

from stream.ratings import make_system
from stream.ratings.baselines.codeforces import Codeforces
from stream.ratings.baselines.elo import Elo
from stream.ratings.baselines.glicko import Glicko, update_period
from stream.ratings.baselines.topcoder import TopCoder
from stream.ratings.baselines.trueskill import TrueSkill

SYSTEMS = ["elo", "glicko", "trueskill", "codeforces", "topcoder"]


def test_glicko_glickman_example() -> None:
    """Glickman's worked example: 1500/200 vs 1400/30 (W), 1550/100 (L), 1700/300 (L)."""
    r, rd = update_period(1500.0, 200.0, np.array([1400.0, 1550.0, 1700.0]), np.array([30.0, 100.0, 300.0]),
                          np.array([1.0, 0.0, 0.0]))
    assert r == pytest.approx(1464.1, abs=0.05)
    assert rd == pytest.approx(151.4, abs=0.05)


def test_glicko_round_is_one_period_against_everyone() -> None:
    g = make_system("glicko")
    bel = [np.array([1500.0, 200.0, 3.0, 0.0]), np.array([1400.0, 30.0, 3.0, 0.0]),
           np.array([1550.0, 100.0, 3.0, 0.0]), np.array([1700.0, 300.0, 3.0, 0.0])]
    # player 0 beats 1, loses to 2 and 3; the order among 1..3 does not matter for player 0
    out = g.rate_round(bel, np.array([3, 4, 2, 1]), 0)
    assert out[0][0] == pytest.approx(1464.1, abs=0.05)
    assert out[0][1] == pytest.approx(151.4, abs=0.05)


def test_glicko_rd_grows_with_time() -> None:
    """A belief of RD 100 rated 4 periods after its last game is rated as one of RD √(100² + 4·c²) rated at
    once; RD grows to the system's maximum (350) and no further."""
    g = Glicko({"c": "50", "period_days": "1"})
    day = 86_400_000
    opponent = g.new_belief()

    def after(rd: float, days: int) -> np.ndarray:
        return g.rate_matches([np.array([1500.0, rd, 0.0, 0.0]), opponent], np.array([0]), np.array([1]),
                              np.array([1.0]), np.array([days * day]))[0]

    grown = math.sqrt(100.0**2 + 4 * 50.0**2)
    assert after(100.0, 4)[:2] == pytest.approx(after(grown, 0)[:2], rel=1e-12)
    assert not np.allclose(after(100.0, 4)[:2], after(100.0, 0)[:2])
    assert after(340.0, 400)[:2] == pytest.approx(after(350.0, 0)[:2], rel=1e-12)


def test_elo_gradient_step_by_hand() -> None:
    elo = make_system("elo", {"k": "20"})
    a, b = np.array([1600.0, 0.0]), np.array([1400.0, 0.0])
    e = 1.0 / (1.0 + 10.0 ** (-200.0 / 400.0))  # 0.7597...
    out = elo.rate_matches([a, b], np.array([0]), np.array([1]), np.array([0.5]), np.array([0]))
    assert out[0][0] == pytest.approx(1600.0 + 20.0 * (0.5 - e))
    assert out[1][0] == pytest.approx(1400.0 - 20.0 * (0.5 - e))
    # multiplayer: Σ_j (s_ij − σ(r_i − r_j)) / (N − 1)
    r = np.array([1500.0, 1600.0, 1400.0])
    ranks = np.array([1, 2, 2])
    out = elo.rate_round([np.array([x, 0.0]) for x in r], ranks, 0)
    sig = lambda d: 1.0 / (1.0 + 10.0 ** (-d / 400.0))  # noqa: E731
    g0 = (1 - sig(-100)) + (1 - sig(100))
    g1 = (0 - sig(100)) + (0.5 - sig(200))
    g2 = (0 - sig(-100)) + (0.5 - sig(-200))
    assert [o[0] for o in out] == pytest.approx([1500 + 10 * g0, 1600 + 10 * g1, 1400 + 10 * g2])
    assert [o[1] for o in out] == [1.0, 1.0, 1.0]


def _ts_params() -> dict[str, float]:
    return {"mu": 25.0, "sigma": 25.0 / 3, "beta": 25.0 / 6, "tau": 25.0 / 300, "draw_probability": 0.1}


@pytest.mark.parametrize("n", [2, 3, 7, 12])
def test_trueskill_matches_package_on_rounds_with_ties(n: int) -> None:
    ts = pytest.importorskip("trueskill")
    env = ts.TrueSkill(**_ts_params())
    ours = make_system("trueskill", _ts_params())
    rng = np.random.default_rng(n)
    mus = rng.normal(25.0, 3.0, n)
    sig = rng.uniform(1.0, 8.0, n)
    ranks = np.sort(rng.integers(1, max(2, n - 1), n))
    ranks[-1] = n  # not everybody tied (such a round is a no-op by the interface)
    out = ours.rate_round([np.array([m, s, 0.0]) for m, s in zip(mus, sig, strict=True)], ranks, 0)
    ref = env.rate([(ts.Rating(m, s),) for m, s in zip(mus, sig, strict=True)], ranks=list(ranks - 1),
                   min_delta=1e-10)
    for o, (r,) in zip(out, ref, strict=True):
        assert o[0] == pytest.approx(r.mu, abs=1e-4)
        assert o[1] == pytest.approx(r.sigma, abs=1e-4)


@pytest.mark.parametrize("score", [1.0, 0.5, 0.0])
def test_trueskill_1v1_matches_package(score: float) -> None:
    ts = pytest.importorskip("trueskill")
    env = ts.TrueSkill(**_ts_params())
    ours = TrueSkill(_ts_params())
    a, b = np.array([27.0, 6.0, 0.0]), np.array([22.0, 3.0, 0.0])
    na, nb = ours.rate_pair(a, b, score)
    ra, rb = ts.Rating(27.0, 6.0), ts.Rating(22.0, 3.0)
    if score == 1.0:
        pa, pb = env.rate_1vs1(ra, rb)
    elif score == 0.0:
        pb, pa = env.rate_1vs1(rb, ra)
    else:
        pa, pb = env.rate_1vs1(ra, rb, drawn=True)
    # the package uses its own series for erfc / the inverse cdf: agreement to ~1e-7
    assert (na[0], na[1], nb[0], nb[1]) == pytest.approx((pa.mu, pa.sigma, pb.mu, pb.sigma), abs=1e-6)
    # quality of the prediction: P(win) + P(draw)/2, symmetric
    assert ours.win_probability(a, b) + ours.win_probability(b, a) == pytest.approx(1.0)


def _codeforces_naive(r: np.ndarray, ranks: np.ndarray) -> np.ndarray:
    """Codeforces' published algorithm, with its integer bisection in [1, 8000] and O(N²) loops
    (the needed rating's seed counts the other contestants only, see codeforces.solve_need)."""
    n = len(r)

    def p_win(ri: float, rj: float) -> float:  # P(i beats j)
        return 1.0 / (1.0 + 10.0 ** ((rj - ri) / 400.0))

    def seed_of(rating: float, me: int) -> float:
        return 1.0 + sum(p_win(r[j], rating) for j in range(n) if j != me)

    place = [sum(1 for x in ranks if x <= ranks[i]) for i in range(n)]
    delta = np.zeros(n)
    for i in range(n):
        seed = 1.0 + sum(p_win(r[j], r[i]) for j in range(n) if j != i)
        m = math.sqrt(seed * place[i])
        lo, hi = 1, 8000
        while hi - lo > 1:
            mid = (lo + hi) // 2
            if seed_of(mid, i) < m:
                hi = mid
            else:
                lo = mid
        delta[i] = (lo - r[i]) / 2.0
    delta += -delta.sum() / n - 1.0
    top = np.argsort(-r, kind="stable")[: min(int(4 * round(math.sqrt(n))), n)]
    delta += min(max(-delta[top].sum() / len(top), -10.0), 0.0)
    return delta


def test_codeforces_matches_published_algorithm() -> None:
    rng = np.random.default_rng(5)
    r = rng.normal(1600.0, 300.0, 40)
    ranks = np.sort(rng.integers(1, 30, 40))
    ours = Codeforces().deltas(r, ranks)
    # Codeforces rounds the needed rating to an integer: agreement within one point (halved)
    assert np.max(np.abs(ours - _codeforces_naive(r, ranks))) < 0.75


def test_topcoder_matches_published_formulas() -> None:
    rng = np.random.default_rng(6)
    n = 25
    r = rng.normal(1500.0, 400.0, n)
    vol = rng.uniform(100.0, 500.0, n)
    played = rng.integers(0, 20, n).astype(float)
    ranks = np.sort(rng.integers(1, 20, n))
    new_r, new_v = TopCoder().update(r, vol, played, ranks)
    ave = r.mean()
    cf = math.sqrt(sum(v * v for v in vol) / n + sum((x - ave) ** 2 for x in r) / (n - 1))
    for i in range(n):
        erank = 0.5 + sum(0.5 * (math.erf((r[j] - r[i]) / math.sqrt(2 * (vol[i] ** 2 + vol[j] ** 2))) + 1)
                          for j in range(n))
        tied = [k for k in range(n) if ranks[k] == ranks[i]]
        arank = (min(tied) + 1 + max(tied) + 1) / 2
        eperf = -norm.ppf((erank - 0.5) / n)
        aperf = -norm.ppf((arank - 0.5) / n)
        perf_as = r[i] + cf * (aperf - eperf)
        w = 1 / (1 - (0.42 / (played[i] + 1) + 0.18)) - 1
        w *= 0.8 if r[i] > 2500 else 0.9 if r[i] >= 2000 else 1.0
        cap = 150 + 1500 / (played[i] + 2)
        nr = min(max((r[i] + w * perf_as) / (1 + w), r[i] - cap), r[i] + cap)
        nv = math.sqrt((nr - r[i]) ** 2 / w + vol[i] ** 2 / (w + 1))
        assert new_r[i] == pytest.approx(nr, rel=1e-10)
        assert new_v[i] == pytest.approx(nv, rel=1e-10)


@pytest.mark.parametrize("name", SYSTEMS)
def test_round_invariants(name: str) -> None:
    s = make_system(name)
    bel = [s.new_belief() for _ in range(6)]
    same = s.rate_round(bel, np.array([1] * 6), 0)
    assert all(x is y for x, y in zip(same, bel, strict=True))  # everyone tied: unchanged
    out = s.rate_round(bel, np.array([1, 2, 2, 4, 5, 6]), 0)
    mus = [s.summary(o).mu for o in out]
    assert mus[0] > mus[3] > mus[5]  # better finish, higher rating (all started equal)
    if name != "trueskill":  # TrueSkill's chain links a tie's members to different neighbours
        assert mus[1] == pytest.approx(mus[2])  # tied players with equal priors stay equal
    assert all(s.summary(o).rounds == 1 for o in out)
    p = s.win_probability(out[0], out[5])
    assert 0.5 < p < 1.0
    assert p + s.win_probability(out[5], out[0]) == pytest.approx(1.0)


@pytest.mark.parametrize("draw_probability", [0.1, 0.001])
def test_trueskill_long_chain_is_symmetric(draw_probability: float) -> None:
    """3,000 new players ranked 1..N: the exact posterior means are antisymmetric about μ0.

    Guards the tail numerics of the truncation corrections: with Φ underflowing, EP on a
    long chain would converge to an asymmetric, non-monotone answer.
    """
    s = TrueSkill({"draw_probability": str(draw_probability)})
    n = 3000
    out = s.rate_round([s.new_belief() for _ in range(n)], np.arange(1, n + 1), 0)
    mu = np.array([o[0] for o in out])
    assert np.all(np.diff(mu) < 0)
    assert np.max(np.abs(mu + mu[::-1] - 3000.0)) < 1e-6


def test_logistic_sums_spline_matches_exact_on_big_rounds() -> None:
    """The O(nodes·N) path for big rounds agrees with the exact pair sum."""
    from stream.ratings.baselines.kernels import EXACT_PAIR_LIMIT, logistic_row_sums, logistic_sums

    r = np.random.default_rng(9).normal(1500.0, 400.0, 5000)
    assert len(r) ** 2 > EXACT_PAIR_LIMIT  # really the spline path
    assert np.max(np.abs(logistic_sums(r, r, 400.0) - logistic_row_sums(r, r, 400.0))) < 1e-5


def test_glicko_normalized_round_is_one_game_of_evidence() -> None:
    """normalize=true: a 2-player round equals one game; bigger rounds move less than N − 1 games."""
    plain, norm_ = Glicko(), Glicko({"normalize": "true"})
    two = [np.array([1500.0, 200.0, 0.0, np.nan]), np.array([1400.0, 30.0, 0.0, np.nan])]
    a = plain.rate_round(two, np.array([1, 2]), 0)
    b = norm_.rate_round(two, np.array([1, 2]), 0)
    assert a[0][0] == pytest.approx(b[0][0]) and a[0][1] == pytest.approx(b[0][1])
    many = [plain.new_belief() for _ in range(50)]
    a = plain.rate_round(many, np.arange(1, 51), 0)
    b = norm_.rate_round(many, np.arange(1, 51), 0)
    assert 1500.0 < b[0][0] < a[0][0]
    assert a[0][1] < b[0][1]


def test_codeforces_leader_does_not_run_away() -> None:
    """A player far ahead who keeps winning gains less and less (no feedback to infinity)."""
    cf = Codeforces()
    field = [np.array([1500.0 + 5.0 * i, 10.0]) for i in range(200)]
    leader = np.array([3000.0, 10.0])
    gains = []
    for _ in range(5):
        out = cf.rate_round([leader, *field], np.arange(1, 202), 0)
        gains.append(out[0][0] - leader[0])
        leader = out[0]
    assert all(0.0 < g < 150.0 for g in gains)
    assert gains == sorted(gains, reverse=True)


def _elo_matches_naive(elo: Elo, beliefs: list[np.ndarray], a: np.ndarray, b: np.ndarray,
                       scores: np.ndarray) -> list[np.ndarray]:
    """The plain-Python oracle of ``Elo.rate_matches``: one step per match, in order."""
    p = elo.params
    r = [float(x[0]) for x in beliefs]
    cnt = [float(x[1]) for x in beliefs]
    for ia, ib, s in zip(a.tolist(), b.tolist(), scores.tolist(), strict=True):
        e = 1.0 / (1.0 + 10.0 ** ((r[ib] - r[ia]) / p.scale))
        d = p.k * (s - e)
        r[ia] += d
        r[ib] -= d
        cnt[ia] += 1.0
        cnt[ib] += 1.0
    touched = set(a.tolist()) | set(b.tolist())
    return [np.array([r[i], cnt[i]]) if i in touched else beliefs[i] for i in range(len(beliefs))]


@pytest.mark.parametrize("seed", range(5))
def test_elo_match_kernel_equals_python_oracle_bit_for_bit(seed: int) -> None:
    """The numba batch kernel takes the same steps in the same order as the plain loop."""
    rng = np.random.default_rng(seed)
    elo = Elo({"k": float(rng.uniform(8, 64)), "scale": float(rng.uniform(200, 600))})
    n, m = int(rng.integers(2, 60)), int(rng.integers(1, 400))
    beliefs = [np.array([1500 + 300 * rng.normal(), float(rng.integers(0, 9))]) for _ in range(n)]
    a = rng.integers(0, n, m)
    b = (a + 1 + rng.integers(0, n - 1, m)) % n
    scores = rng.choice([0.0, 0.25, 0.5, 1.0], m)
    times = np.zeros(m, np.int64)
    fast = elo.rate_matches(beliefs, a, b, scores, times)
    slow = _elo_matches_naive(elo, beliefs, a, b, scores)
    assert len(fast) == len(slow) == n
    for i, (x, y) in enumerate(zip(fast, slow, strict=True)):
        assert x.tobytes() == y.tobytes()
        assert (x is beliefs[i]) == (y is beliefs[i])  # untouched players keep their belief object


def test_small_rounds_sum_on_one_thread_with_the_same_bits(monkeypatch: pytest.MonkeyPatch) -> None:
    """Below ``PARALLEL_MIN_PLAYERS`` the logistic sums run on one thread (no start-up of numba's
    pool for a 2-v-2), and give the bits of the parallel run: each row is one thread's loop."""
    import numba

    from stream.ratings.baselines import kernels

    numba.set_num_threads(numba.config.NUMBA_NUM_THREADS)  # type: ignore[attr-defined]
    kernel = kernels.logistic_row_sums
    seen: list[int] = []

    def counted(r: np.ndarray, q: np.ndarray, scale: float) -> np.ndarray:
        seen.append(numba.get_num_threads())
        return kernel(r, q, scale)

    monkeypatch.setattr(kernels, "logistic_row_sums", counted)
    rng = np.random.default_rng(3)
    for n in (2, 3, 4, 5, 8, 9, 16, 17, 33, 100, 257, 1000, 2001):
        r = rng.normal(1500.0, 350.0, n)
        q = np.concatenate([r, rng.normal(1500.0, 600.0, 7)])
        monkeypatch.setattr(kernels, "PARALLEL_MIN_PLAYERS", n + 1)
        serial = kernels.logistic_sums(r, q, 400.0)
        monkeypatch.setattr(kernels, "PARALLEL_MIN_PLAYERS", n)
        parallel = kernels.logistic_sums(r, q, 400.0)
        assert np.array_equal(serial.view(np.int64), parallel.view(np.int64)), n
        assert seen[-2:] == [1, numba.config.NUMBA_NUM_THREADS], n  # type: ignore[attr-defined]
    # Elo's team rounds and rounds: the same ratings either way
    elo = Elo()
    beliefs = [np.array([x, 3.0]) for x in rng.normal(1500.0, 200.0, 6)]
    team_of, ranks = np.array([0, 0, 1, 1, 2, 2]), np.array([2, 1, 3])
    out = []
    for limit in (10**9, 0):
        monkeypatch.setattr(kernels, "PARALLEL_MIN_PLAYERS", limit)
        out.append([*elo.rate_team_round(beliefs, team_of, ranks, 0), *elo.rate_round(beliefs, np.arange(6) + 1, 0)])
    assert all(np.array_equal(a, b) for a, b in zip(*out, strict=True))
    assert numba.get_num_threads() == numba.config.NUMBA_NUM_THREADS  # type: ignore[attr-defined]
