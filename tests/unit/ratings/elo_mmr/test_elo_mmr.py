"""Elo-MMR / Elo-MMχ core: published values, edge cases, fast kernels vs the naive oracle."""

from __future__ import annotations

import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from numba_probe import compiled_after_warmup

from stream.ratings import make_system
from stream.ratings.base import RatingError
from stream.ratings.codec import Float64Codec
from stream.ratings.elo_mmr.fastpath import EloMMRFastPath
from stream.ratings.elo_mmr.kernels import _first_non_finite
from stream.ratings.elo_mmr.naive import rate_round_naive
from stream.ratings.elo_mmr.system import EloMMR, EloMMRParams, EloMMX, warmup

DAY = 86_400_000


def _history(system: EloMMR, n: int, rng: np.random.Generator, rounds: int = 3) -> list[np.ndarray]:
    """n beliefs with a few rounds of varied history (some players never played)."""
    beliefs = [system.new_belief() for _ in range(n)]
    for r in range(rounds):
        idx = rng.choice(n, size=max(2, n // 2), replace=False)
        ranks = rng.integers(1, max(3, len(idx) // 3), size=len(idx))
        out = system.rate_round([beliefs[i] for i in idx], ranks, r * DAY)
        for i, b in zip(idx, out, strict=True):
            beliefs[i] = b
    return beliefs


def _compare(system: EloMMR, beliefs: list[np.ndarray], ranks: np.ndarray, time_ms: int, **kw: float) -> None:
    ranks = ranks.copy()
    ranks[0] = ranks.max() + 1  # never a round where everybody ties (that one is skipped)
    fast = system.rate_round_detailed(beliefs, ranks, time_ms, **kw)
    slow, slow_perf = rate_round_naive(beliefs, ranks, time_ms, system.params, gaussian=system.gaussian, **kw)
    np.testing.assert_allclose(fast.performances, slow_perf, rtol=0, atol=1e-6)
    for a, b in zip(fast.beliefs, slow, strict=True):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-9, atol=1e-6)
    order = np.argsort(ranks, kind="stable")
    assert np.all(np.diff(fast.performances[order]) <= 0), "performances must be ordered by rank"


def test_three_newcomers_published_values() -> None:
    system = EloMMR()
    result = system.rate_round_detailed([system.new_belief() for _ in range(3)], np.array([1, 2, 3]), 0)
    mus = [b[0] for b in result.beliefs]
    assert mus == pytest.approx([1704.87, 1500.00, 1295.13], abs=0.01)
    assert [b[1] for b in result.beliefs] == pytest.approx([171.20] * 3, abs=0.01)
    assert result.performances.tolist() == pytest.approx([1743.92, 1500.00, 1256.08], abs=0.01)
    assert [system.summary(b).rounds for b in result.beliefs] == [1, 1, 1]
    top = system.summary(result.beliefs[0])
    assert top.rating == pytest.approx(top.mu - 3 * (top.sigma - 80))


def test_registry_builds_both_variants() -> None:
    assert isinstance(make_system("elo-mmr"), EloMMR)
    mmx = make_system("elo-mmx", {"split_ties": "true", "noob_delay": "0.5,0.75", "history_limit": "0"})
    assert isinstance(mmx, EloMMX)
    assert isinstance(mmx.params, EloMMRParams)
    assert mmx.params.split_ties is True
    assert mmx.params.noob_delay == (0.5, 0.75)
    assert mmx.params.history_limit == 0


@pytest.mark.parametrize("bad", [{"weight_limit": "0"}, {"sig_init": "-1"}, {"rho": "nan"}, {"nope": "1"}])
def test_invalid_parameters_rejected(bad: dict[str, str]) -> None:
    with pytest.raises(RatingError):
        EloMMR(bad)


def test_skipped_rounds_return_inputs() -> None:
    system = EloMMR()
    one = [system.new_belief()]
    assert system.rate_round(one, np.array([1]), 0)[0] is one[0]
    tied = [system.new_belief() for _ in range(4)]
    out = system.rate_round(tied, np.array([2, 2, 2, 2]), 0)
    assert all(a is b for a, b in zip(out, tied, strict=True))


@pytest.mark.parametrize("field", [0, 1, 3])
def test_non_finite_belief_raises(field: int) -> None:
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(3)]
    beliefs[1][field] = math.nan if field != 3 else math.inf
    with pytest.raises(RatingError, match="#1"):
        system.rate_round(beliefs, np.array([1, 2, 3]), 0)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.sampled_from([0.0, -0.0, 1.5, -2e308, 5e-324, math.nan, math.inf, -math.inf]),
                         min_size=0, max_size=5), min_size=0, max_size=6))
def test_first_non_finite_is_the_first_belief_holding_one(beliefs: list[list[float]]) -> None:
    """The kernels' one-pass check against a plain search, belief by belief."""
    flat = np.array([x for b in beliefs for x in b], dtype=np.float64)
    offsets = np.cumsum([0, *map(len, beliefs)]).astype(np.int64)
    want = next((i for i, b in enumerate(beliefs) if not all(map(math.isfinite, b))), -1)
    assert _first_non_finite(flat, offsets) == want


@pytest.mark.parametrize("dtype", [np.int64, np.float32])
def test_beliefs_of_another_dtype_are_converted_not_reinterpreted(dtype: type) -> None:
    """The gather checked only the first belief's dtype: an int64 belief later in the list
    had its bytes read as float64 (the kernel then failed with numba's SystemError)."""
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(3)]
    beliefs[1] = np.array([1500.0, 350.0, 1500.0, 1.0, 0.0, 0.0])
    other = [beliefs[0], beliefs[1].astype(dtype), beliefs[2]]
    want = system.rate_round(beliefs, np.array([1, 2, 3]), 0)
    got = system.rate_round(other, np.array([1, 2, 3]), 0)
    assert all(np.array_equal(a, b) for a, b in zip(got, want, strict=True))


def test_a_zero_weight_in_a_belief_is_a_rating_error() -> None:
    """Division by zero in the kernel came out of numba as a SystemError, which a worker does
    not catch (it would crash on every event of that player); a RatingError dead-letters it."""
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(3)]
    system.rate_round(beliefs, np.array([1, 2, 3]), 0)  # the kernels compiled or loaded first
    beliefs[1] = np.array([1500.0, 350.0, 1500.0, 0.0, 0.0, 0.0])
    with pytest.raises(RatingError):
        system.rate_round(beliefs, np.array([1, 2, 3]), 0)


def test_bad_round_arguments_raise() -> None:
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(3)]
    with pytest.raises(RatingError):
        system.rate_round(beliefs, np.array([1, 2]), 0)
    with pytest.raises(RatingError):
        system.rate_round(beliefs, np.array([1, 2, 3]), 0, weight=math.nan)
    with pytest.raises(RatingError):
        system.rate_round(beliefs, np.array([1, 2, 3]), 0, perf_ceiling=math.nan)
    with pytest.raises(RatingError, match="length"):
        system.rate_round([*beliefs[:2], np.zeros(7)], np.array([1, 2, 3]), 0)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("n", [2, 7, 300, 5000])
def test_fast_matches_oracle_logistic(n: int, split: bool) -> None:
    rng = np.random.default_rng(n + split)
    system = EloMMR({"split_ties": split, "history_limit": 0})
    beliefs = _history(system, n, rng)
    ranks = rng.integers(1, max(3, n // 2), size=n)  # many ties
    _compare(system, beliefs, ranks, 10 * DAY)


@pytest.mark.parametrize("split", [False, True])
@pytest.mark.parametrize("n", [3, 40, 600])
def test_fast_matches_oracle_gaussian(n: int, split: bool) -> None:
    rng = np.random.default_rng(100 + n + split)
    system = EloMMX({"split_ties": split})
    beliefs = _history(system, n, rng)
    ranks = rng.integers(1, max(3, n // 2), size=n)
    _compare(system, beliefs, ranks, 10 * DAY)


@pytest.mark.parametrize("gaussian", [False, True])
def test_fast_matches_oracle_with_all_options(gaussian: bool) -> None:
    """noob_delay, drift, history folding, ρ ≠ 1, weights and a performance ceiling."""
    rng = np.random.default_rng(7)
    params = {"noob_delay": (0.4, 0.7), "drift_per_day": 25.0, "history_limit": 2, "rho": 0.5}
    system = (EloMMX if gaussian else EloMMR)(params)
    beliefs = _history(system, 80, rng, rounds=5)
    ranks = rng.integers(1, 30, size=80)
    _compare(system, beliefs, ranks, 40 * DAY, weight=1.7, perf_ceiling=1900.0)


def test_rho_infinite_collapses_to_gaussian_term() -> None:
    rng = np.random.default_rng(3)
    system = EloMMR({"rho": math.inf})
    beliefs = _history(system, 30, rng)
    assert all(len(b) == 9 for b in beliefs if b[4] > 0)  # only this round's term is kept
    _compare(system, beliefs, rng.integers(1, 10, size=30), 5 * DAY)


def test_codec_roundtrip_is_bit_identical() -> None:
    rng = np.random.default_rng(11)
    system = EloMMR()
    codec = Float64Codec()
    plain = _history(system, 50, rng)
    stored = [codec.decode(codec.encode(b)) for b in plain]
    ranks = rng.integers(1, 20, size=50)
    a = system.rate_round(plain, ranks, 9 * DAY)
    b = system.rate_round(stored, ranks, 9 * DAY)
    assert all(np.array_equal(x, y) for x, y in zip(a, b, strict=True))


def test_outputs_are_independent_arrays() -> None:
    system = EloMMR()
    out = system.rate_round([system.new_belief() for _ in range(3)], np.array([1, 2, 3]), 0)
    out[0][0] = 0.0
    assert out[1][0] == pytest.approx(1500.0)
    assert not np.shares_memory(out[0], out[1])
    assert out[0].base is None  # copies: a kept belief must not pin the round's buffer


@pytest.mark.parametrize("cls", [EloMMR, EloMMX])
def test_win_probability(cls: type[EloMMR]) -> None:
    system = cls()
    strong, weak = system.new_belief(), system.new_belief()
    strong[0] = 1800.0
    p = system.win_probability(strong, weak)
    assert 0.5 < p < 1.0
    assert p + system.win_probability(weak, strong) == pytest.approx(1.0)
    assert system.win_probability(weak, weak) == pytest.approx(0.5)
    assert system.ranking_score(strong) == 1800.0


def test_two_player_match_default_uses_rounds() -> None:
    system = EloMMR()
    beliefs = [system.new_belief() for _ in range(3)]
    a = np.array([0, 1, 2])
    b = np.array([1, 2, 0])
    scores = np.array([1.0, 0.5, 0.0])
    times = np.array([0, DAY, 2 * DAY])
    got = system.rate_matches(beliefs, a, b, scores, times)
    ref = list(beliefs)
    ref[0], ref[1] = system.rate_round([ref[0], ref[1]], np.array([1, 2]), 0)
    ref[1], ref[2] = system.rate_round([ref[1], ref[2]], np.array([1, 1]), DAY)
    ref[2], ref[0] = system.rate_round([ref[2], ref[0]], np.array([2, 1]), 2 * DAY)
    assert all(np.array_equal(x, y) for x, y in zip(got, ref, strict=True))


def test_warmup_compiles_every_kernel_the_service_calls() -> None:
    """After ``warmup()``, both variants with their default parameters rate a round (with ties,
    split or not), a team round, a diffusion and a prediction without compiling anything. Asked
    of a fresh process (``numba_probe``): in this one, earlier tests compiled them already."""
    calls = """
        import numpy as np
        from stream.ratings.elo_mmr.system import EloMMR, EloMMX

        for cls in (EloMMR, EloMMX):
            for split in (False, True):
                system = cls({"split_ties": split})
                beliefs = [system.new_belief() for _ in range(300)]
                for t in range(3):
                    beliefs = system.rate_round(beliefs, np.arange(300) // 3 + 1, t * 86_400_000)
                system.rate_team_round(beliefs[:6], np.array([0, 0, 1, 1, 2, 2]), np.array([1, 2, 2]), 0)
                system.diffuse(beliefs[0], 10.0)
                system.win_probability(beliefs[0], beliefs[1], 0.5)
                system.summary(beliefs[0])
    """
    assert compiled_after_warmup("from stream.ratings.elo_mmr.system import warmup\nwarmup()", calls) == {}


def test_runs_in_an_executor_thread_like_the_service() -> None:
    """The service calls the kernels from one executor thread; results are identical."""
    from concurrent.futures import ThreadPoolExecutor

    warmup()
    rng = np.random.default_rng(5)
    system = EloMMR()
    beliefs = _history(system, 200, rng)
    ranks = rng.integers(1, 50, size=200)
    here = system.rate_round(beliefs, ranks, 7 * DAY)
    with ThreadPoolExecutor(max_workers=1) as pool:
        there = pool.submit(system.rate_round, beliefs, ranks, 7 * DAY).result()
    assert all(np.array_equal(a, b) for a, b in zip(here, there, strict=True))


def test_parallel_and_serial_kernels_agree(monkeypatch: pytest.MonkeyPatch) -> None:
    """Above PARALLEL_MIN_PLAYERS the kernels run on numba's pool; results must not change."""
    import stream.ratings.elo_mmr.system as module

    rng = np.random.default_rng(9)
    system = EloMMR()
    beliefs = _history(system, 300, rng)
    ranks = rng.integers(1, 80, size=300)
    serial = system.rate_round(beliefs, ranks, 3 * DAY)
    monkeypatch.setattr(module, "PARALLEL_MIN_PLAYERS", 2)
    parallel = system.rate_round(beliefs, ranks, 3 * DAY)
    for a, b in zip(serial, parallel, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-12, atol=1e-9)


@pytest.mark.parametrize("seed", range(6))
def test_extreme_configurations_match_oracle(seed: int) -> None:
    """Fuzz: ratings ±10,000 apart, σ from 1 to 2,000, sharp σ_perf, every option.

    Found a real bug (Newton cycling in the robust average, 85 points off). Performances
    far outside the field are ill-conditioned in double precision (f flat to ~1e-15·Σw
    over hundreds of points), so only μ and σ are compared there, at 1e-4.
    """
    rng = np.random.default_rng(1000 + seed)
    for it in range(12):
        cls = EloMMX if it % 3 == 0 else EloMMR
        params = {
            "split_ties": bool(rng.integers(2)),
            "history_limit": int(rng.integers(0, 4)),
            "rho": float(rng.choice([0.0, 0.5, 1.0, 3.0, math.inf])),
            "weight_limit": float(rng.choice([0.05, 0.2, 1.0, 5.0])),
            "sig_limit": float(rng.choice([20.0, 80.0, 300.0])),
            "drift_per_day": float(rng.choice([0.0, 10.0, 1000.0])),
        }
        system = cls(params)
        n = int(rng.integers(2, 40))
        beliefs = [system.new_belief() for _ in range(n)]
        for b in beliefs:
            b[0] = b[2] = rng.normal(1500, rng.choice([1, 300, 3000]))
            b[1] = rng.choice([1.0, 50.0, 350.0, 2000.0])
            b[3] = b[1] ** -2
        for r in range(3):
            ranks = rng.integers(1, max(2, n // 2) + 1, size=n)
            ranks[0] = n + 3
            weight = float(rng.choice([0.01, 1.0, 30.0]))
            fast = system.rate_round_detailed(beliefs, ranks, r * 7 * DAY, weight=weight)
            slow, _ = rate_round_naive(
                beliefs, ranks, r * 7 * DAY, system.params, gaussian=system.gaussian, weight=weight
            )
            for a, b in zip(fast.beliefs, slow, strict=True):
                assert np.isfinite(a).all()
                assert a[0] == pytest.approx(b[0], abs=1e-4)
                assert a[1] == pytest.approx(b[1], rel=1e-12)
            beliefs = fast.beliefs


def test_robust_average_does_not_cycle() -> None:
    """Regression (found by the fuzz above): plain Newton cycles on this sharp tanh term
    plus a weak Gaussian term and stopped 85 points from the root after 100 iterations."""
    from stream.ratings.elo_mmr import kernels
    from stream.ratings.elo_mmr.naive import robust_average

    nmu, nw = -2542.12230, 4.17471236e-04
    terms = np.array([[-593.362739, 4.13941178e-02, 5.72674070e-05], [-2379.19313, 4.13941178e-02, 8.27882355e-02]])
    belief = np.concatenate([[0.0, 0.0, nmu, nw, 2.0, 0.0], terms.ravel()])
    got = kernels._robust_average(-nmu * nw, nw, belief, 6, belief.size, -2541.985)
    assert got == pytest.approx(robust_average(-nmu * nw, nw, terms), abs=1e-9)


def _gathered(fast: EloMMRFastPath, packed: list[bytes], ranks: np.ndarray, time_ms: int,
              weight: float = 1.0) -> list[bytes]:
    """``rate_round_gathered`` of packed beliefs gathered as a pool's arena gathers them, cut back per player."""
    flat = np.frombuffer(b"".join(packed), dtype="<f8").copy()
    offsets = np.zeros(len(packed) + 1, dtype=np.int64)
    np.cumsum([len(p) // 8 for p in packed], out=offsets[1:])
    out = fast.rate_round_gathered(flat, offsets, ranks, time_ms, weight)
    if out is None:
        return packed
    values, out_offsets = out
    return [values[a:b].tobytes() for a, b in itertools.pairwise(out_offsets.tolist())]


def test_packed_path_is_bit_identical() -> None:
    rng = np.random.default_rng(21)
    system = EloMMR()
    beliefs = _history(system, 60, rng)
    ranks = rng.integers(1, 20, size=60)
    arrays = system.rate_round(beliefs, ranks, 8 * DAY)
    fast = EloMMRFastPath(system)
    packed = _gathered(fast, [b.tobytes() for b in beliefs], ranks, 8 * DAY)
    assert [a.tobytes() for a in arrays] == packed
    assert fast.new_packed_belief() == system.new_belief().tobytes()
    with pytest.raises(RatingError, match="size"):
        _gathered(fast, [packed[0], packed[1][:-8]], np.array([1, 2]), 0)
    tied = [fast.new_packed_belief()] * 3
    assert _gathered(fast, tied, np.array([1, 1, 1]), 0) == tied


def test_rank_values_only_matter_by_order() -> None:
    """Ranks are compared, never used as numbers: huge, negative or float ranks give the
    same result as 1..k (ties included), even beyond float64's exact integers."""
    system = EloMMR()
    beliefs = _history(system, 6, np.random.default_rng(2))
    base = system.rate_round(beliefs, np.array([1, 2, 2, 3, 4, 4]), DAY)
    for ranks in (
        np.array([-5, 10, 10, 11, 2**60, 2**60]),
        np.array([2**60, 2**60 + 1, 2**60 + 1, 2**60 + 2, 2**60 + 3, 2**60 + 3]),
        np.array([0.5, 1.5, 1.5, 2.0, 9.0, 9.0]),
    ):
        got = system.rate_round(beliefs, ranks, DAY)
        assert all(np.array_equal(a, b) for a, b in zip(base, got, strict=True))


@pytest.mark.parametrize("cls", [EloMMR, EloMMX])
@pytest.mark.parametrize("weight", [1e308, 1e-320])
def test_extreme_round_weight_is_rejected_not_stored(cls: type[EloMMR], weight: float) -> None:
    """The update overflowed into NaN/inf beliefs, after which every round of the players failed."""
    system = cls({})
    beliefs = [system.new_belief(), system.new_belief()]
    with pytest.raises(RatingError, match="weight"):
        system.rate_round(beliefs, np.array([1, 2]), 0, weight)
    with pytest.raises(RatingError, match="weight"):
        _gathered(EloMMRFastPath(system), [b.tobytes() for b in beliefs], np.array([1, 2]), 0, weight)


def test_out_of_order_round_does_not_count_drift_twice() -> None:
    """Drift days are counted from the latest round seen, not from the last one applied.

    A round dated before the players' last one gets no drift (days clamp at 0), so it must
    act exactly like the same round dated at the latest time, before and after it.
    """
    day = 86_400_000
    system = EloMMR({"drift_per_day": 100.0})

    def history(second_round_day: int) -> list[np.ndarray]:
        a, b = system.rate_round([system.new_belief(), system.new_belief()], np.array([1, 2]), 10 * day)
        a, b = system.rate_round([a, b], np.array([2, 1]), second_round_day * day)
        return system.rate_round([a, b], np.array([1, 2]), 12 * day)

    backwards, in_order = history(5), history(10)
    for x, y in zip(backwards, in_order, strict=True):
        np.testing.assert_array_equal(x, y)
    assert backwards[0][5] == 12 * day


@pytest.mark.parametrize("cls", [EloMMR, EloMMX])
def test_a_huge_rating_spread_is_solved_by_bisection_like_the_oracle(cls: type[EloMMR]) -> None:
    """Performances spread over more than ``MAX_PANELS`` panels (here a player at μ = 5·10⁷, as
    a corrupt stored value can hold) are bisected per tie group instead of interpolated on
    panels, whose memory grows with the spread (μ = 10¹⁶ asked for terabytes): the round
    stays finite, ordered by rank, and equal to the naive oracle (slow on such a spread:
    ~4 s for Elo-MMχ here, so not 10¹⁶)."""
    from stream.ratings.elo_mmr import kernels as K

    system = cls()
    beliefs = [system.new_belief() for _ in range(4)]
    beliefs[1] = beliefs[1].copy()
    beliefs[1][[0, 2]] = 5e7  # μ and the Gaussian term's centre
    ranks = np.array([2, 1, 3, 3])
    p = system.params
    # a newcomer's performance scale; σ grows by less than 10 in the diffusion before the round
    widest_scale = math.hypot(p.sig_init + 10, math.sqrt(1 + 1 / p.weight_limit) * p.sig_limit)
    widest_panel = 2 * K.PANEL_FRACTION * 2.8 * widest_scale  # the Gaussian variant's, the wider
    assert 5e7 / widest_panel > K.MAX_PANELS  # so the fallback runs
    _compare(system, beliefs, ranks, DAY)
    assert all(np.isfinite(b).all() for b in system.rate_round(beliefs, ranks, DAY))


def test_the_loops_over_terms_read_no_term_of_a_range_that_ends_before_it_starts() -> None:
    """The terms' loops count their terms as unsigned integers: a range whose stop is below its start
    (a belief shorter than its header) has no term, as ``range(start, stop, 3)`` has none -- not 2**64."""
    from stream.ratings.elo_mmr import kernels as K

    values = np.arange(1.0, 4.0)
    assert K._terms_weight(values, 6, 3) == 0.0
    assert K._robust_average(1.0, 2.0, values, 6, 3, 0.0) == -0.5  # the Gaussian part's own root
    assert K._terms_weight(np.array([0.0, 2.0, 3.0]), 0, 3) == 6.0 * 2.0 / (K.TANH_MULTIPLIER ** 2)
