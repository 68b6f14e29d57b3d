"""Cowan's system: the paper's worked examples, independently computed reference values,
fast == naive,
quantised state (codec fixed points, batching never changes a bit)."""

from __future__ import annotations

import math
import os
from fractions import Fraction as Fr

import numpy as np
import pytest
from numba_probe import compiled_after_warmup

from stream.engine.embedded import EmbeddedPipeline
from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent
from stream.ratings import cowan, make_system
from stream.ratings.base import RatingError
from stream.ratings.cowan.codec import CowanCodec
from stream.ratings.cowan.model import exp_exact, pow_exact
from stream.ratings.cowan.quant import canonical
from stream.ratings.cowan.system import Cowan, drift_naive, fit_exp_sum, posterior_naive

NAT = math.log(10.0) / 400.0  # Elo points -> natural units


def _one(
    system: Cowan, a: np.ndarray, b: np.ndarray, score: float, quantise: bool = True
) -> tuple[np.ndarray, np.ndarray]:
    out = system.rate_matches([a, b], np.array([0]), np.array([1]), np.array([score]), np.array([0]), quantise=quantise)
    return out[0], out[1]


def _raw(system: Cowan, a: np.ndarray, b: np.ndarray, score: float) -> tuple[np.ndarray, np.ndarray]:
    """One match by the unquantised kernels: what the naive oracle is compared with (the
    quantisation is a separate step, tested on its own below)."""
    return _one(system, a, b, score, quantise=False)


def _maxdiff(system: Cowan, x: np.ndarray, y: np.ndarray) -> float:
    return float(np.max(np.abs(system.full(x) - system.full(y))))


@pytest.fixture(scope="module")
def sys_() -> Cowan:
    return Cowan()


# ---------------------------------------------------------------- paper examples
def test_example_4_1_exact() -> None:
    """Example 4.1 with Λ = x/(x+y), A wins. The supports/priors were reconstructed (the
    paper text was not available here): A on {2, 5, 13} with (9, 3, 8)/20, B on {3, 7, 11}
    with (2, 4, 5)/11 is the unique such setup with integer skills ≤ 16 and small-denominator
    priors that reproduces the published posteriors."""
    xa = np.array([Fr(2), Fr(5), Fr(13)], dtype=object)
    pa = np.array([Fr(9, 20), Fr(3, 20), Fr(2, 5)], dtype=object)
    xb = np.array([Fr(3), Fr(7), Fr(11)], dtype=object)
    pb = np.array([Fr(2, 11), Fr(4, 11), Fr(5, 11)], dtype=object)
    new_a, new_b = posterior_naive(xa, pa, xb, pb, lambda x, y: x / (x + y), 1.0)
    assert list(new_a) == [Fr(69024, 284005), Fr(41925, 284005), Fr(173056, 284005)]
    assert list(new_b) == [Fr(74724, 284005), Fr(105456, 284005), Fr(103825, 284005)]
    # the contract entry point is reachable as cowan.posterior_naive
    assert cowan.posterior_naive is posterior_naive
    # a loss for B is the mirror image
    nb2, na2 = posterior_naive(xb, pb, xa, pa, lambda x, y: x / (x + y), 0.0)
    assert list(na2) == list(new_a) and list(nb2) == list(new_b)


def test_example_4_2_kernel_on_squares() -> None:
    support = np.arange(1, 101)
    p = np.array([Fr(1, 10) if math.isqrt(int(v)) ** 2 == v else Fr(0) for v in support], dtype=object)
    out = drift_naive(p, np.array([Fr(1, 3)] * 3, dtype=object))
    nonzero = [v for v in out if v != 0]
    assert len(nonzero) == 28
    assert all(v == Fr(1, 28) for v in nonzero)


# ------------------------------------------ reference values from an independent naive computation
@pytest.mark.parametrize("quantise", [True, False])
def test_reference_win(sys_: Cowan, quantise: bool) -> None:
    a, b = _one(sys_, sys_.new_belief(), sys_.new_belief(), 1.0, quantise)
    ra, rb = sys_.summary(a), sys_.summary(b)
    assert ra.mu == pytest.approx(0.162483, abs=1e-6)
    assert ra.sigma * NAT == pytest.approx(0.681542, abs=1e-6)
    assert ra.rating == pytest.approx(1528.2, abs=0.05)
    assert ra.sigma == pytest.approx(118.4, abs=0.05)
    assert rb.mu == pytest.approx(-0.162483, abs=1e-6)
    assert ra.rounds == rb.rounds == 1


@pytest.mark.parametrize("quantise", [True, False])
@pytest.mark.parametrize(("form", "sd"), [("paper", 0.683815), ("blatmmr", 0.682511)])
def test_reference_draw(form: str, sd: float, quantise: bool) -> None:
    s = Cowan({"draw_form": form})
    a, b = _one(s, s.new_belief(), s.new_belief(), 0.5, quantise)
    for x in (a, b):
        r = s.summary(x)
        assert abs(r.mu) < 1e-12
        assert r.sigma * NAT == pytest.approx(sd, abs=1e-6)


@pytest.mark.parametrize("quantise", [True, False])
def test_reference_ten_wins(sys_: Cowan, quantise: bool) -> None:
    x = sys_.new_belief()
    for _ in range(10):
        x, _ = _one(sys_, x, sys_.new_belief(), 1.0, quantise)
    r = sys_.summary(x)
    assert r.mu == pytest.approx(1.079763, abs=1e-6)
    assert r.sigma * NAT == pytest.approx(0.559820, abs=1e-6)
    assert r.rounds == 10
    assert sys_.win_probability(x, sys_.new_belief()) == pytest.approx(0.673119, abs=1e-6)


def test_prior(sys_: Cowan) -> None:
    b = sys_.new_belief()
    r = sys_.summary(b)
    assert r.rating == pytest.approx(1500.0, abs=1e-9)
    assert r.sigma * NAT == pytest.approx(0.7, abs=1e-9)
    assert r.rounds == 0
    assert sys_.full(b).sum() == pytest.approx(1.0, abs=1e-15)
    assert sys_.win_probability(b, sys_.new_belief()) == pytest.approx(0.5, abs=1e-14)


# ---------------------------------------------------------------- fast == naive
def _played(system: Cowan, seed: int, games: int) -> np.ndarray:
    rng = np.random.default_rng(seed)
    x = system.new_belief()
    for _ in range(games):
        x, _ = _one(system, x, system.new_belief(), float(rng.choice([0.0, 0.5, 1.0])))
    return x


@pytest.mark.parametrize("form", ["paper", "blatmmr"])
@pytest.mark.parametrize("score", [1.0, 0.0, 0.5, 0.3])
def test_fast_matches_naive(form: str, score: float) -> None:
    fast = Cowan({"draw_form": form})
    pairs = [
        (fast.new_belief(), fast.new_belief()),
        (_played(fast, 1, 12), fast.new_belief()),
        (_played(fast, 2, 25), _played(fast, 3, 6)),
    ]
    for a, b in pairs:
        fa, fb = _raw(fast, a, b, score)
        na, nb = fast.naive_update(a, b, score)
        assert _maxdiff(fast, fa, na) < 1e-12
        assert _maxdiff(fast, fb, nb) < 1e-12
        assert abs(fast.summary(fa).mu - fast.summary(na).mu) < 1e-12


def test_naive_algorithm_option_is_the_oracle(sys_: Cowan) -> None:
    naive = Cowan({"algorithm": "naive"})
    a, b = _played(sys_, 4, 5), sys_.new_belief()
    fa, fb = _raw(sys_, a, b, 1.0)
    na, nb = _raw(naive, a, b, 1.0)
    assert _maxdiff(sys_, fa, na) < 1e-12 and _maxdiff(sys_, fb, nb) < 1e-12
    # quantised, the naive algorithm returns codec fixed points too (within the quantum)
    qa, _ = _one(naive, a, b, 1.0)
    assert np.array_equal(qa, canonical(na))
    assert _maxdiff(sys_, qa, _one(sys_, a, b, 1.0)[0]) < 1e-8


@pytest.mark.parametrize("score", [1.0, 0.0, 0.5])
def test_laplace_variant_matches_its_naive(score: float) -> None:
    lap = Cowan({"algorithm": "laplace"})
    a, b = _played(lap, 5, 8), lap.new_belief()
    fa, fb = _raw(lap, a, b, score)
    na, nb = lap.naive_update(a, b, score)
    assert _maxdiff(lap, fa, na) < 1e-12
    assert _maxdiff(lap, fb, nb) < 1e-12
    # it is a different model: the result differs from the logistic one
    log = Cowan()
    la, _ = _one(log, a, b, 1.0)
    assert _maxdiff(log, la, _one(lap, a, b, 1.0)[0]) > 1e-6


def test_soe_fit_error(sys_: Cowan) -> None:
    # free (complex) rates: 8 terms, ~4e-15 (fixed rates e^(−jh): 16 terms, 3.7e-13)
    assert sys_.model.soe_error < 1e-14
    assert int(sys_.model.soe[0]) + int(sys_.model.soe[1]) <= 10
    assert len(sys_.model.taps) == 27


@pytest.mark.parametrize("score", [0.5, 0.3])
def test_paper_draws_use_the_exponential_sum(sys_: Cowan, score: float) -> None:
    row = sys_._dsoe(score)
    assert row[0] == 1.0  # the fit met DRAW_SOE_MAX_ERR: draws are two sweeps, not an FFT
    n = sys_.p.n
    tab = sys_._dtab(score)
    d = np.arange(1, n + 1, dtype=float)
    for start, t_inf, exact in ((5, row[1], tab[n + 1 :]), (int(row[4]), row[2], tab[n - 1 :: -1])):
        nr, nc = int(row[start]), int(row[start + 1])
        o = start + 2
        rr, rc = row[o : o + nr], row[o + nr : o + 2 * nr]
        o += 2 * nr
        z = row[o : o + nc] + 1j * row[o + nc : o + 2 * nc]
        c = row[o + 2 * nc : o + 3 * nc] + 1j * row[o + 3 * nc : o + 4 * nc]
        fit = t_inf + (rr[None, :] ** d[:, None]) @ rc + ((z[None, :] ** d[:, None]) @ c).real
        assert np.max(np.abs(fit - exact)) < 1e-13


def test_fit_exp_sum_recovers_a_known_sum() -> None:
    d = np.arange(1, 301, dtype=float)
    y = 0.7 * 0.9**d + (0.2 * (0.8 * np.exp(0.3j)) ** d).real
    z, c, err = fit_exp_sum(y)
    assert err < 1e-14 and z.shape[0] == 2
    order = np.argsort(np.abs(z))  # 0.8·e^(0.3i), then 0.9
    assert np.allclose(z[order], [0.8 * np.exp(0.3j), 0.9], atol=1e-10)
    assert np.allclose(c[order], [0.2, 0.7], atol=1e-10)


# ---------------------------------------------------------------- symmetries
def test_mirror_symmetry(sys_: Cowan) -> None:
    a, b = _played(sys_, 6, 9), _played(sys_, 7, 4)
    wa, lb = _one(sys_, a, b, 1.0)  # A beats B
    lb2, wa2 = _one(sys_, b, a, 0.0)  # B loses to A, listed first
    assert _maxdiff(sys_, wa, wa2) < 1e-15 and _maxdiff(sys_, lb, lb2) < 1e-15
    # reflecting both skills flips the result
    def flip(x: np.ndarray) -> np.ndarray:
        f = sys_.full(x)[::-1]
        nz = np.flatnonzero(f)
        return np.concatenate(([float(nz[0]), x[1]], f[nz[0] : nz[-1] + 1]))

    # (on the raw model: a 1e-16 difference may round a quantum the other way)
    wa, lb = _raw(sys_, a, b, 1.0)
    fa, fb = _raw(sys_, flip(a), flip(b), 0.0)
    assert _maxdiff(sys_, fa, flip(wa)) < 1e-13 and _maxdiff(sys_, fb, flip(lb)) < 1e-13


@pytest.mark.parametrize("form", ["paper", "blatmmr"])
def test_draw_between_identical_players_keeps_them_identical(form: str) -> None:
    s = Cowan({"draw_form": form})
    x = _played(s, 8, 7)
    a, b = _one(s, x, x.copy(), 0.5)
    assert np.array_equal(a, b)


def test_win_probability_complements(sys_: Cowan) -> None:
    a, b = _played(sys_, 9, 10), _played(sys_, 10, 3)
    assert sys_.win_probability(a, b) + sys_.win_probability(b, a) == pytest.approx(1.0, abs=1e-13)
    grid = sys_.model.grid
    fa, fb = sys_.full(a), sys_.full(b)
    direct = fa @ sys_.luck(grid[:, None], grid[None, :]) @ fb
    assert sys_.win_probability(a, b) == pytest.approx(direct, abs=1e-13)


# ---------------------------------------------------------------- quantised state
ALGOS = [{}, {"draw_form": "blatmmr"}, {"algorithm": "laplace"}, {"algorithm": "naive", "n": 120}]


def _apply_in_batches(s: Cowan, bel: list[np.ndarray], a: np.ndarray, b: np.ndarray, sc: np.ndarray,
                      size: int) -> list[np.ndarray]:
    """The matches in consecutive batches of ``size``, each batch given only its players."""
    cur = list(bel)
    for st in range(0, len(a), size):
        ba, bb = a[st : st + size], b[st : st + size]
        idx = sorted(set(ba.tolist()) | set(bb.tolist()))
        pos = {p: i for i, p in enumerate(idx)}
        out = s.rate_matches(
            [cur[i] for i in idx], np.array([pos[x] for x in ba]), np.array([pos[x] for x in bb]),
            sc[st : st + size], np.zeros(len(ba), np.int64),
        )
        for i, o in zip(idx, out, strict=True):
            cur[i] = o
    return cur


@pytest.mark.parametrize("params", ALGOS, ids=["fast", "blatmmr", "laplace", "naive"])
def test_batch_size_never_changes_bits(params: dict[str, object]) -> None:
    s = Cowan(params)
    rng = np.random.default_rng(42)
    players, n = 9, 40 if s.p.algorithm == "naive" else 150
    bel = [s.new_belief() for _ in range(players)]
    a = rng.integers(0, players, n)
    b = (a + rng.integers(1, players, n)) % players
    sc = rng.choice([0.0, 0.5, 1.0, 0.25], n)
    codec = CowanCodec()
    results = [_apply_in_batches(s, bel, a, b, sc, size) for size in (1, 7, n)]
    s.parallel_min_batch = s.parallel_min_width = 0  # all at once on the parallel kernel too
    results.append(_apply_in_batches(s, bel, a, b, sc, n))
    for other in results[1:]:
        for x, y in zip(results[0], other, strict=True):
            assert np.array_equal(x, y)
    for x in results[0]:
        assert np.array_equal(codec.decode(codec.encode(x)), x)  # a codec fixed point
    # without the quantisation step, batching is still exact but the state differs slightly
    raw = s.rate_matches(bel, a, b, sc, np.zeros(n, np.int64), quantise=False)
    assert 0.0 < max(_maxdiff(s, x, y) for x, y in zip(raw, results[0], strict=True)) < 1e-7


@pytest.mark.parametrize("params", ALGOS, ids=["fast", "blatmmr", "laplace", "naive"])
def test_prior_is_a_codec_fixed_point(params: dict[str, object]) -> None:
    s, codec = Cowan(params), CowanCodec()
    p = s.new_belief()
    assert np.array_equal(codec.decode(codec.encode(p)), p)
    assert np.array_equal(canonical(p), p)
    assert p is not s.new_belief() and np.array_equal(p, s.new_belief())  # fresh arrays


def test_canonical_is_the_codec_round_trip(sys_: Cowan) -> None:
    """``canonical`` (the kernels' step) == decode(encode(·)) on raw, unquantised beliefs,
    including windows with cells below the floor and zero cells."""
    codec = CowanCodec()
    x = sys_.rate_matches(
        [_played(sys_, 11, 6), sys_.new_belief()], np.array([0]), np.array([1]), np.array([1.0]),
        np.array([0]), quantise=False,
    )[0]
    y = x.copy()
    y[2:6] = [0.0, 1e-300, 0.0, 1e-20]  # edge cells dropped
    y[40] = 0.0  # an interior zero is clamped to the floor
    for b in (x, y):
        c = canonical(b)
        assert np.array_equal(codec.decode(codec.encode(b)), c)
        assert c[0] >= b[0] and c[1] == b[1]


def test_engine_skips_the_round_trip() -> None:
    eng = PoolEngine("duel", Cowan())
    assert eng.fast.canonical_state and eng.exact_store
    b = eng.system.new_belief()
    assert eng.canonical(b) is b
    # the Redis path (encode, decode) gives back exactly the embedded beliefs
    batch = MatchBatch("duel")
    for i, (pa, pb, sc) in enumerate([("x", "y", 1.0), ("y", "z", 0.5), ("z", "x", 0.0), ("x", "y", 0.3)]):
        batch.add(MatchEvent(event_id=f"m{i}", pool="duel", time=i, a=pa, b=pb, score=sc))
    embedded = eng.rate_matches(batch, {})
    applied = PoolEngine("duel", Cowan()).apply_matches(batch, {})  # an engine whose side advantage is still its prior
    for p, belief in embedded.items():
        assert np.array_equal(eng.codec.decode(applied.updates[p]), belief)


def test_embedded_pipeline_batch_sizes_bit_identical() -> None:
    rng = np.random.default_rng(5)
    players = [f"p{i}" for i in range(7)]
    events = []
    for i in range(90):
        pa, pb = rng.choice(players, 2, replace=False)
        events.append(MatchEvent(event_id=f"m{i}", pool="duel", time=1000 * i, a=str(pa), b=str(pb),
                                 score=float(rng.choice([0.0, 0.5, 1.0]))))
    states = []
    for size in (1, 7, 4096):
        pipe = EmbeddedPipeline("cowan", batch_size=size)
        for e in events:
            pipe.add("match", e)
        pipe.flush()
        states.append({(pool, p): b for pool, p, b in pipe.beliefs()})
    for other in states[1:]:
        assert other.keys() == states[0].keys()
        assert all(np.array_equal(other[k], states[0][k]) for k in states[0])


def test_non_finite_belief_is_rejected(sys_: Cowan) -> None:
    bad = sys_.new_belief()
    bad[10] = np.nan
    with pytest.raises(RatingError):
        _one(sys_, bad, sys_.new_belief(), 1.0)


def test_batch_arena_equals_one_match_at_a_time_and_rejects_malformed_beliefs(sys_: Cowan) -> None:
    """A batch (the arena kernels, serial and parallel) == the same matches one ``rate_pair``
    call at a time, bit for bit, with windows moving in the arena and the arena growing;
    malformed beliefs still get ``window``'s errors."""
    rng = np.random.default_rng(4)
    n, count = 30, 600
    a = rng.integers(0, n, count)
    b = (a + 1 + rng.integers(0, n - 1, count)) % n
    scores = rng.choice([0.0, 0.5, 1.0, 0.25], count)
    start = [sys_.new_belief() for _ in range(n)]
    one = list(start)
    for m in range(count):
        i, j = int(a[m]), int(b[m])
        one[i], one[j] = _one(sys_, one[i], one[j], float(scores[m]))
    for min_batch in (10**9, 1):  # serial, then the parallel kernel
        sys_.parallel_min_batch, sys_.parallel_min_width = min_batch, 1
        try:
            got = sys_.rate_matches(start, a, b, scores, np.zeros(count, dtype=np.int64))
        finally:
            sys_.parallel_min_batch, sys_.parallel_min_width = 256, 8
        assert all(x.tobytes() == y.tobytes() for x, y in zip(got, one, strict=True))
    beliefs = one
    for broken, message in ((np.array([0.0]), "too short"), (np.array([np.nan, 0.0, 1.0]), "NaN"),
                            (np.array([1000.0, 0.0, 0.5, 0.5]), "outside the grid"),
                            (np.array([-1.0, 0.0, 1.0]), "outside the grid")):
        with pytest.raises((RatingError, ValueError), match=message):
            sys_.rate_matches([*beliefs[:3], broken, *beliefs[3:]], np.array([0, 1]), np.array([3, 2]),
                              np.array([1.0, 0.0]), np.zeros(2, dtype=np.int64))


def test_pool_arena_equals_rate_matches(sys_: Cowan) -> None:
    """``rate_arena`` on a pool's arena (slots in any order, players added between batches,
    one replaced by ``set``) gives the beliefs ``rate_matches`` gives, bit for bit, also
    after the arena compacts the cells that moved windows left behind."""
    rng = np.random.default_rng(5)
    arena = sys_.new_arena()
    held: list[np.ndarray] = []
    slots_of: list[int] = []
    for step in range(6):
        fresh = 8 if step < 3 else 0
        held += [sys_.new_belief() for _ in range(fresh)]
        slots_of += arena.add([sys_.new_belief() for _ in range(fresh)]).tolist()
        n = len(held)
        order = rng.permutation(n)  # local players: a shuffled subset of the pool
        count = 300
        a = rng.integers(0, n, count)
        b = (a + 1 + rng.integers(0, n - 1, count)) % n
        scores = rng.choice([0.0, 0.5, 1.0], count)
        want = sys_.rate_matches([held[k] for k in order], a, b, scores, np.zeros(count, dtype=np.int64))
        sys_.rate_arena(arena, np.array([slots_of[k] for k in order]), a, b, scores)
        for k, w in zip(order.tolist(), want, strict=True):
            held[k] = w
        if step == 4:
            arena.set(slots_of[0], held[1])
            held[0] = held[1]
            arena.compact()
        got = arena.beliefs(np.array(slots_of))
        assert all(x.tobytes() == y.tobytes() for x, y in zip(got, held, strict=True))


def test_arena_add_copies_is_add_of_the_copies(sys_: Cowan) -> None:
    """``CowanArena.add_copies(b, n)`` (by columns) leaves the arena exactly as ``add([b] * n)``
    (a loop over the beliefs): the same slots, windows, reserves, match counts and values,
    also past the slot columns' and the values' first sizes, and for a full-grid belief
    (reserve capped at the grid); the same matches then give the same bits on both."""
    prior = sys_.new_belief()
    rated = sys_.rate_matches([prior, prior], np.array([0]), np.array([1]), np.array([1.0]),
                              np.zeros(1, dtype=np.int64))[0]
    full = np.concatenate(([0.0, 3.0], np.full(sys_.p.n + 1, 1.0 / (sys_.p.n + 1))))
    by_loop, by_columns = sys_.new_arena(), sys_.new_arena()
    for belief, n in ((rated, 3), (prior, 0), (prior, 5), (full, 2), (prior, 1100), (rated, 1)):
        want = by_loop.add([belief] * n)
        got = by_columns.add_copies(belief, n)
        assert got.tolist() == want.tolist()
    assert (by_columns.size, by_columns.end) == (by_loop.size, by_loop.end)
    size = by_loop.size
    for name in ("start", "cap", "lohi", "rounds"):
        assert getattr(by_columns, name)[:size].tobytes() == getattr(by_loop, name)[:size].tobytes(), name
    slots = np.arange(size)
    assert [x.tobytes() for x in by_columns.beliefs(slots)] == [x.tobytes() for x in by_loop.beliefs(slots)]
    rng = np.random.default_rng(11)
    a = rng.integers(0, size, 500)
    b = (a + 1 + rng.integers(0, size - 1, 500)) % size
    scores = rng.choice([0.0, 0.5, 1.0], 500)
    for arena in (by_loop, by_columns):
        sys_.rate_arena(arena, slots, a, b, scores)
    assert [x.tobytes() for x in by_columns.beliefs(slots)] == [x.tobytes() for x in by_loop.beliefs(slots)]


def test_arena_prefetch_is_a_hint_in_the_machine_code_that_changes_nothing() -> None:
    """The arena kernels ask for the next match's windows ahead (``_prefetch_window``,
    ``_prefetch_dest``): compiled, those are x86 prefetch instructions, and no value of the
    arena moves, also for cells past its end."""
    import platform
    import re

    from numba import njit

    from stream.ratings.cowan import arena as _cowan_arena

    def ahead(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray) -> None:
        for p in range(start.shape[0]):
            _cowan_arena._prefetch_window(vals, start, lohi, p)
            _cowan_arena._prefetch_dest(vals, start, lohi, p, vals.shape[0] + 64, 8)

    vals = np.random.default_rng(1).random(4096)
    start = np.array([0, 100, 4000], dtype=np.int64)
    lohi = np.array([[10, 99], [0, 500], [300, 400]], dtype=np.int64)  # the last runs past the end
    before = vals.copy()
    fn = njit(nogil=True)(ahead)  # not from numba's cache, which keeps no assembly
    fn(vals, start, lohi)
    assert vals.tobytes() == before.tobytes()
    if platform.machine() in ("x86_64", "AMD64"):
        asm = fn.inspect_asm(fn.signatures[0])
        assert re.search(r"\bprefetcht0\b", asm)  # the write hint: prefetchw where the CPU has it


def test_model_tables_are_built_from_correctly_rounded_exp(sys_: Cowan) -> None:
    """The luck table, drift taps and prior come from ``exp_exact`` and ``math.fsum`` (the
    same bits on every CPU; numpy's exp depends on the CPU's SIMD loops): checked against
    ``fractions``-exact arithmetic on the decimal results, and ``exp_exact`` against exp's
    exactly known values and within half an ulp of ``math.exp``'s neighbours."""
    from decimal import Context, Decimal

    x = np.linspace(-30.0, 30.0, 601)
    got = exp_exact(x)
    ctx = Context(prec=60)
    for v, g in zip(x.tolist(), got.tolist(), strict=True):
        exact = ctx.exp(Decimal(v))
        assert abs(Decimal(g) - exact) <= abs(Decimal(math.nextafter(g, math.inf)) - Decimal(g)) / 2
    assert exp_exact(np.zeros((2, 3))).tolist() == [[1.0] * 3] * 2
    m, p = sys_.model, sys_.p
    h = 2.0 * p.M / p.n
    d = np.arange(-p.n, p.n + 1, dtype=float) * h
    a0 = (1.0 - p.beta) / 2.0
    want = a0 + p.beta / (1.0 + np.array([float(Context(prec=40).exp(Decimal(float(-v)))) for v in d]))
    assert m.gtab.tobytes() == want.tobytes()
    assert np.max(np.abs(m.gtab - sys_.luck(d, 0.0))) < 1e-15  # the vectorised ``luck`` agrees to rounding
    assert math.fsum(m.taps) == pytest.approx(1.0, abs=1e-15)


# ---------------------------------------------------------------- API surface
def test_registry_and_params() -> None:
    s = make_system("cowan", {"beta": "0.7", "draw_form": "blatmmr"})
    assert isinstance(s, Cowan)
    assert s.params.beta == 0.7  # type: ignore[attr-defined]
    with pytest.raises(RatingError):
        make_system("cowan", {"algorithm": "slow"})
    with pytest.raises(RatingError):
        make_system("cowan", {"bogus": "1"})


def test_rate_round_and_validation(sys_: Cowan) -> None:
    a, b = sys_.new_belief(), sys_.new_belief()
    ra, rb = sys_.rate_round([a, b], np.array([1, 2]), 0)
    fa, fb = _one(sys_, a, b, 1.0)
    assert np.array_equal(ra, fa) and np.array_equal(rb, fb)
    da, db = sys_.rate_round([a, b], np.array([1, 1]), 0)
    assert np.array_equal(da, db)
    (solo,) = sys_.rate_round([a], np.array([1]), 0)  # fewer than two players: no change (base.py)
    assert solo is a
    with pytest.raises(RatingError):
        sys_.rate_round([a, b, a.copy()], np.array([1, 2, 3]), 0)
    with pytest.raises(RatingError):
        sys_.rate_matches([a, b], np.array([0]), np.array([0]), np.array([1.0]), np.array([0]))
    with pytest.raises(RatingError):
        sys_.rate_matches([a, b], np.array([0]), np.array([1]), np.array([1.5]), np.array([0]))
    with pytest.raises(RatingError):
        sys_.summary(np.array([5000.0, 0.0, 1.0]))


def test_warmup_runs() -> None:
    cowan.warmup()


def test_default_residual_fit_is_frozen_and_fits_here() -> None:
    """The default grid's residual fit is the frozen one (the same bits on every CPU), it fits
    φ on this machine as well as a fresh fit does, and a wrong frozen row would be refused."""
    from stream.ratings.cowan import model as cw

    key = (1000, 0.014, 16)
    soe, err = cw._residual_soe(*key)
    assert [float(x).hex() for x in soe] == [float.fromhex(x).hex() for x in cw._FROZEN_RESIDUALS[key]]
    assert err <= cw._FROZEN_MAX_ERR
    fresh, fresh_err = cw._fit_residual(*key)
    assert fresh_err <= 1e-14
    target, dd = cw._residual_target(1000, 0.014)
    assert np.max(np.abs(cw.soe_values(soe, dd) - cw.soe_values(fresh, dd))) <= 2e-14
    assert np.max(np.abs(cw.soe_values(soe, dd) - target)) == err
    broken = np.array(soe)
    broken[-1] *= 1.5
    try:
        cw._FROZEN_RESIDUALS[(1000, 0.014, 17)] = tuple(float(x).hex() for x in broken)
        refit, refit_err = cw._residual_soe(1000, 0.014, 17)
        assert refit_err <= 1e-14 and not np.array_equal(refit, broken)
    finally:
        del cw._FROZEN_RESIDUALS[(1000, 0.014, 17)]
        cw._residual_soe.cache_clear()


def test_default_draw_fit_is_frozen_and_fits_here() -> None:
    """The default model's draw fit at score ½ is the frozen one (the same bits on every CPU),
    it fits this machine's draw kernel, and a frozen row that does not fit is refused."""
    from stream.ratings.cowan import model as cw

    key = (1000, 7.0, 0.8, 0.5)
    system = Cowan()
    row = system._dsoe(0.5)
    b = int(row[4])
    frozen = [float.fromhex(x) for x in cw._FROZEN_DRAW_FITS[key]]
    assert row[5:b].tolist() == frozen and row[b:].tolist() == frozen
    n = system.p.n
    tab = system._dtab(0.5)
    yp = tab[n + 1:] - row[1]
    assert np.max(np.abs(cw.soe_values(row[5:b], np.arange(1, n + 1, dtype=float)) - yp)) <= cw._FROZEN_DRAW_MAX_ERR
    broken = np.array(frozen)
    broken[-1] *= 1.5
    try:
        cw._FROZEN_DRAW_FITS[key] = tuple(float(x).hex() for x in broken)
        refit = Cowan()._dsoe(0.5)
        assert refit[0] == 1.0 and refit[5:int(refit[4])].tolist() != broken.tolist()
    finally:
        cw._FROZEN_DRAW_FITS[key] = tuple(float(x).hex() for x in frozen)


def test_pow_exact_is_sqrt_at_a_half_and_decimal_elsewhere() -> None:
    from decimal import Context, Decimal

    x = np.linspace(0.1, 0.9, 41)
    assert pow_exact(x, 0.5).tobytes() == np.sqrt(x).tobytes()
    assert pow_exact(x, 1.0).tobytes() == x.tobytes()
    assert pow_exact(x, 0.0).tolist() == [1.0] * 41
    got = pow_exact(x, 0.25)
    ctx = Context(prec=40)
    assert got.tolist() == [float(ctx.power(Decimal(v), Decimal("0.25"))) for v in x.tolist()]
    # numpy's own pow may be off by one ulp, depending on the CPU's vector path (1.1e-16 at
    # 0.974 on an AMD EPYC): the correctly rounded value is within one ulp of it
    assert (np.abs(got - x**0.25) <= np.spacing(got)).all()


def test_warmup_compiles_every_kernel_the_service_calls() -> None:
    """After ``warmup()``, rating a default-grid batch small (serial kernel) and large (the
    parallel one) adds no numba signature: nothing is compiled inside a worker's first batch.
    Asked of a fresh process (``numba_probe``): in this one, earlier tests compiled them already."""
    calls = """
        import numpy as np
        from stream.ratings import make_system

        system = make_system("cowan")
        for n in (3, 2 * system.parallel_min_batch):
            rng = np.random.default_rng(n)
            beliefs = [system.new_belief() for _ in range(2 * n)]
            system.rate_matches(beliefs, np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2),
                                rng.choice([0.0, 0.5, 1.0], n), np.zeros(n, np.int64))
            arena = system.new_arena()  # the embedded replay's pool arena
            slots = arena.add(beliefs)
            system.rate_arena(arena, slots, np.arange(0, 2 * n, 2), np.arange(1, 2 * n, 2), np.ones(n))
        system.rate_matches(beliefs[:2], np.array([0]), np.array([1]), np.array([1.0]), np.array([0]))
        # with a side advantage: the same kernels, and the prediction's own
        system.rate_matches(beliefs[:4], np.array([0, 2]), np.array([1, 3]), np.array([1.0, 0.5]),
                            np.zeros(2, np.int64), advantages=np.array([0.3, 0.0]))
        system.rate_matches(beliefs[:2], np.array([0]), np.array([1]), np.array([1.0]), np.array([0]),
                            advantages=np.array([0.3]))
        system.win_probability(beliefs[0], beliefs[1], 0.3)
    """
    assert compiled_after_warmup("from stream.ratings import cowan\ncowan.warmup()", calls) == {}


def test_kernels_pass_no_literal_constants_to_other_kernels() -> None:
    """numba compiles a function once per *literal* value of a constant argument (the forward
    and the backward sweep twice, ``draw_lik`` for each side...: ~1 s of a cold start), so the
    njit functions of Cowan's kernels, codec and arena hand constants to each other through
    ``_cowan_quant._ONE()`` and the like. Checked on the sources: no call from one njit
    function to another with an int or bool literal (or its negation) as an argument."""
    import ast
    import inspect

    from stream.ratings.cowan import arena as _cowan_arena
    from stream.ratings.cowan import codec as cowan_codec
    from stream.ratings.cowan import drift as _cowan_drift
    from stream.ratings.cowan import kernels as _cowan_kernels
    from stream.ratings.cowan import lanes as _cowan_lanes
    from stream.ratings.cowan import quant as _cowan_quant
    from stream.ratings.cowan import shift as _cowan_shift
    from stream.ratings.cowan import windows as _cowan_windows

    modules = [_cowan_arena, _cowan_drift, _cowan_kernels, _cowan_lanes, _cowan_quant, _cowan_shift, _cowan_windows,
               cowan_codec]
    # (functions inlined into their callers, ``inline="always"``, are typed in place: no dispatch)
    kernels = {name for m in modules for name, f in vars(m).items()
               if hasattr(f, "py_func") and f.targetoptions.get("inline") != "always"}

    def literal(node: ast.expr) -> bool:
        if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
            node = node.operand
        return isinstance(node, ast.Constant) and type(node.value) in (int, bool)

    found = []
    for m in modules:
        for fn in ast.walk(ast.parse(inspect.getsource(m))):
            if not (isinstance(fn, ast.FunctionDef) and fn.name in kernels):
                continue
            for call in ast.walk(fn):
                if (isinstance(call, ast.Call) and isinstance(call.func, ast.Name) and call.func.id in kernels
                        and any(map(literal, call.args))):
                    found.append(f"{m.__name__}.{fn.name} -> {call.func.id} (line {call.lineno})")
    assert not found, found


def _resident_bytes() -> int:
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


@pytest.mark.skipif(not os.path.exists("/proc/self/statm"), reason="needs Linux's /proc")
def test_arena_reserve_moves_the_values_and_leaves_the_new_cells_untouched(sys_: Cowan) -> None:
    """``CowanArena.reserve`` grows the mapping that holds the values (``mremap``): the beliefs
    stay bit for bit, and the new cells are not written, so a large reserve does not become
    resident (growing a numpy array zero-fills it: 512 MiB here); where a view of the values
    is held elsewhere, or the values are an array the kernel made, they are copied into a new
    mapping, also bit for bit; matches rated after each growth give the bits ``rate_matches`` gives."""
    rng = np.random.default_rng(3)
    arena = sys_.new_arena()
    held = [sys_.new_belief() for _ in range(12)]
    slots = arena.add(held)

    def rate() -> None:
        a = rng.integers(0, 12, 40)
        b = (a + 1 + rng.integers(0, 11, 40)) % 12
        scores = rng.choice([0.0, 0.5, 1.0], 40)
        held[:] = sys_.rate_matches(held, a, b, scores, np.zeros(40, dtype=np.int64))
        sys_.rate_arena(arena, slots, a, b, scores)
        assert [x.tobytes() for x in arena.beliefs(slots)] == [x.tobytes() for x in held]

    rate()
    before = _resident_bytes()
    arena.reserve(1 << 26)  # 512 MiB of cells
    assert arena.vals.shape[0] >= arena.end + (1 << 26)
    assert _resident_bytes() - before < 64 << 20
    rate()
    view = arena.vals[: arena.end]  # held elsewhere: the mapping cannot move
    arena.reserve(arena.vals.shape[0])
    assert [x.tobytes() for x in arena.beliefs(slots)] == [x.tobytes() for x in held]
    del view
    rate()
    arena.vals = arena.vals.copy()  # as when the kernel grew the values itself
    arena.reserve(arena.vals.shape[0])
    rate()
    arena.reserve(arena.vals.shape[0])  # back in a mapping: grows in place again
    rate()


def test_summaries_from_the_arena_are_summary_many_of_its_beliefs(sys_: Cowan) -> None:
    """``CowanFastPath.summary_arena`` (the arena's block of the slots' beliefs, one njit call)
    gives ``summary_many(arena.beliefs(slots))`` field for field, for slots in any order, one
    slot, and a slot more than once; ``PoolEngine.summary_many_held`` takes it for slots."""
    from stream.ratings.cowan.fastpath import CowanFastPath

    fast = CowanFastPath(sys_)
    rng = np.random.default_rng(9)
    arena = sys_.new_arena()
    slots = arena.add_copies(sys_.new_belief(), 30)
    a = rng.integers(0, 30, 200)
    b = (a + 1 + rng.integers(0, 29, 200)) % 30
    sys_.rate_arena(arena, slots, a, b, rng.choice([0.0, 0.5, 1.0], 200))
    for pick in (rng.permutation(30), np.array([7]), np.array([3, 3, 12])):
        want = fast.summary_many(arena.beliefs(pick))
        assert fast.summary_arena(arena, pick) == want
        assert [tuple(map(float, r)) for r in want] == [tuple(map(float, sys_.summary(x))) for x in arena.beliefs(pick)]
    eng = PoolEngine("p", sys_)  # its own arena, filled as the embedded replay's store fills it
    batch = MatchBatch("p")
    for i, (x, y) in enumerate(zip(a.tolist(), b.tolist(), strict=True)):
        batch.add(MatchEvent(event_id=f"m{i}", pool="p", time=i, a=f"q{x}", b=f"q{y}", score=(i % 3) / 2))
    held = list(eng.store_matches(batch, {}).values())
    assert len(held) == 30 and all(isinstance(h, int) for h in held)  # arena slots
    assert eng.summary_many_held(held) == fast.summary_many(eng.unpack_many(held))
    arena.rounds[int(slots[4])] = np.nan  # a malformed belief: named as ``summary`` names it
    with pytest.raises(ValueError, match="NaN"):
        fast.summary_arena(arena, slots)
    with pytest.raises(ValueError, match="NaN"):
        fast.summary_many(arena.beliefs(slots))
