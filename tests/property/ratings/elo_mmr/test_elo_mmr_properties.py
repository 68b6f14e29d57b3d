"""Properties of Elo-MMR proved in the paper (Ebtekar & Liu, WWW'21), checked with hypothesis.

Example counts are kept small: every example runs real rounds through the numba kernels.
"""

from __future__ import annotations

import math

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from stream.ratings.codec import Float64Codec
from stream.ratings.elo_mmr.naive import rate_round_naive, robust_average
from stream.ratings.elo_mmr.system import EloMMR, EloMMX, warmup

DAY = 86_400_000
SETTINGS = settings(max_examples=25, deadline=None)
warmup()


def _population(system: EloMMR, n: int, seed: int, rounds: int = 4) -> list[np.ndarray]:
    """n beliefs with varied, realistic histories."""
    rng = np.random.default_rng(seed)
    beliefs = [system.new_belief() for _ in range(n)]
    skill = rng.normal(0.0, 1.0, n)
    for r in range(rounds):
        who = rng.choice(n, size=max(2, int(n * 0.7)), replace=False)
        noisy = skill[who] + rng.normal(0.0, 1.0, who.size)
        ranks = np.argsort(np.argsort(-noisy)) + 1
        for i, b in zip(who, system.rate_round([beliefs[i] for i in who], ranks, r * DAY), strict=True):
            beliefs[i] = b
    return beliefs


@SETTINGS
@given(
    n=st.integers(3, 25),
    seed=st.integers(0, 10_000),
    player=st.integers(0, 24),
    split=st.booleans(),
    gaussian=st.booleans(),
)
def test_aligned_incentives(n: int, seed: int, player: int, split: bool, gaussian: bool) -> None:
    """Improving one's rank, everything else equal, never lowers one's new rating (Thm 5.5)."""
    system = (EloMMX if gaussian else EloMMR)({"split_ties": split})
    beliefs = _population(system, n, seed)
    rng = np.random.default_rng(seed + 1)
    ranks = rng.integers(1, n, size=n)
    i = player % n
    if ranks[i] == 1:
        ranks[i] = 2
    better = ranks.copy()
    better[i] = int(rng.integers(0, ranks[i]))  # strictly better (0 beats everybody)
    ranks[(i + 1) % n] = better[(i + 1) % n] = n + 5  # a fixed last place: no all-tied round
    worse_out = system.rate_round_detailed(beliefs, ranks, 9 * DAY)
    better_out = system.rate_round_detailed(beliefs, better, 9 * DAY)
    assert better_out.performances[i] >= worse_out.performances[i] - 1e-9
    assert better_out.beliefs[i][0] >= worse_out.beliefs[i][0] - 1e-9


@SETTINGS
@given(
    n_opponents=st.integers(1, 400),
    distance=st.floats(0.0, 20_000.0),
    wins=st.booleans(),
    seed=st.integers(0, 10_000),
)
def test_robust_response_bound(n_opponents: int, distance: float, wins: bool, seed: int) -> None:
    """Thm 5.7: |Δμ| ≤ w_out(new term)/weight(Gaussian term after diffusion), whatever the result.

    The extreme results — beating many opponents rated ``distance`` points above, or
    losing to many rated that far below — drive the performance towards ±∞; the rating
    change stays within the bound and approaches it.
    """
    system = EloMMR({"history_limit": 0})
    player = _population(system, 6, seed)[0]
    opponent = system.new_belief()
    # surprising results: beating stronger opponents, or losing to weaker ones
    opponent[0] = opponent[2] = player[0] + distance if wins else player[0] - distance
    beliefs = [player] + [opponent.copy() for _ in range(n_opponents)]
    ranks = np.array([1 if wins else 2] + [2 if wins else 1] * n_opponents)
    out = system.rate_round(beliefs, ranks, 30 * DAY)[0]
    bound = out[-1] / out[3]  # new term's w_out / Gaussian weight (no fold with history_limit=0)
    change = out[0] - player[0]
    assert abs(change) <= bound * (1 + 1e-9) + 1e-9
    assert (change >= 0) if wins else (change <= 0)
    # the exact limit: the new term saturated at ±w_out (performance at ±∞)
    offset = -out[2] * out[3] + (-out[-1] if wins else out[-1])  # tanh((x − p)·a) → ∓1 as p → ±∞
    limit = robust_average(offset, out[3], out[6:-3].reshape(-1, 3)) - player[0]
    assert abs(change) <= abs(limit) + 1e-9
    if distance > 5000 and n_opponents > 50:
        assert abs(change - limit) < 1e-3 * bound


@SETTINGS
@given(
    seed=st.integers(0, 10_000),
    v1=st.floats(0.0, 1e5),
    v2=st.floats(0.0, 1e5),
    rho=st.sampled_from([0.0, 0.5, 1.0, 2.0]),
)
def test_pseudodiffusion(seed: int, v1: float, v2: float, rho: float) -> None:
    """Thm 4.1: the rating is preserved, σ² grows by γ², and two diffusions compose into one."""
    system = EloMMR({"rho": rho})
    belief = _population(system, 5, seed)[int(seed % 5)]
    once = system.diffuse(belief, v1)
    assert math.isclose(once[0], belief[0], abs_tol=1e-9)
    assert math.isclose(once[1] ** 2, belief[1] ** 2 + v1, rel_tol=1e-12)
    twice = system.diffuse(once, v2)
    both = system.diffuse(belief, v1 + v2)
    np.testing.assert_allclose(twice, both, rtol=1e-9, atol=1e-12)
    # μ is still the robust average of the diffused terms: its equation holds at μ
    terms = once[6:].reshape(-1, 3)
    pull = float(np.sum(terms[:, 2] * np.tanh((once[0] - terms[:, 0]) * terms[:, 1])))
    f = -once[2] * once[3] + once[3] * once[0] + pull
    assert abs(f) <= 1e-9 * (once[3] * max(1.0, abs(once[0])) + float(np.sum(terms[:, 2])))


@settings(max_examples=8, deadline=None)
@given(seed=st.integers(0, 10_000), n=st.integers(2, 6))
def test_history_compression_is_negligible(seed: int, n: int) -> None:
    """Folding terms whose weight decayed below ~1e-10 changes ratings by < 1e-6."""
    rng = np.random.default_rng(seed)
    full = EloMMR({"history_limit": 0})
    short = EloMMR({"history_limit": 60})
    a = [full.new_belief() for _ in range(n)]
    b = [short.new_belief() for _ in range(n)]
    for r in range(75):
        ranks = rng.permutation(n) + 1
        a = full.rate_round(a, ranks, r * DAY)
        b = short.rate_round(b, ranks, r * DAY)
    assert len(b[0]) == 6 + 3 * 60 < len(a[0])
    for x, y in zip(a, b, strict=True):
        assert abs(x[0] - y[0]) < 1e-6
        assert abs(x[1] - y[1]) < 1e-9


@SETTINGS
@given(n=st.integers(2, 30), seed=st.integers(0, 10_000), split=st.booleans())
def test_elo_mmx_is_the_gaussian_closed_form(n: int, seed: int, split: bool) -> None:
    """Elo-MMχ's update is the conjugate Gaussian update of the diffused prior by the performance."""
    system = EloMMX({"split_ties": split})
    beliefs = _population(system, n, seed)
    rng = np.random.default_rng(seed)
    ranks = rng.integers(1, n + 1, size=n)
    ranks[0] = n + 1
    result = system.rate_round_detailed(beliefs, ranks, 50 * DAY)
    beta2 = (1 + 1 / 0.2) * 80.0**2
    for before, after, perf in zip(beliefs, result.beliefs, result.performances, strict=True):
        prior_var = before[1] ** 2 + 0.2 * 80.0**2
        post_prec = 1 / prior_var + 1 / beta2
        assert math.isclose(after[0], (before[0] / prior_var + perf / beta2) / post_prec, abs_tol=1e-9)
        assert math.isclose(after[1], post_prec**-0.5, rel_tol=1e-12)
        assert len(after) == 6


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10_000), gaussian=st.booleans(), split=st.booleans())
def test_sequential_rounds_equal_one_at_a_time(seed: int, gaussian: bool, split: bool) -> None:
    """Rounds via the API one at a time (with a codec round trip between them, as the
    service does) equal the same rounds kept in memory, and the naive oracle applied
    round after round."""
    system = (EloMMX if gaussian else EloMMR)({"split_ties": split, "history_limit": 3})
    codec = Float64Codec()
    rng = np.random.default_rng(seed)
    n = 12
    mem = [system.new_belief() for _ in range(n)]
    stored = [codec.encode(b) for b in mem]
    oracle = [b.copy() for b in mem]
    for r in range(6):
        who = rng.choice(n, size=int(rng.integers(2, n + 1)), replace=False)
        ranks = rng.integers(1, 5, size=who.size)
        ranks[0] = 6
        t = r * DAY
        out = system.rate_round([mem[i] for i in who], ranks, t)
        dec = system.rate_round([codec.decode(stored[i]) for i in who], ranks, t)
        ora, _ = rate_round_naive([oracle[i] for i in who], ranks, t, system.params, gaussian=gaussian)
        for k, i in enumerate(who):
            mem[i], oracle[i] = out[k], ora[k]
            stored[i] = codec.encode(dec[k])
    for i in range(n):
        assert np.array_equal(codec.decode(stored[i]), mem[i])
        np.testing.assert_allclose(mem[i], oracle[i], rtol=1e-9, atol=1e-6)
