"""Property tests of Cowan's system: batched waves == one at a time == any other batching
(bit for bit), returned beliefs are codec fixed points, fast == naive (unquantised), codec
bounds. Example counts stay small: the machine is shared."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.ratings.cowan.codec import CowanCodec
from stream.ratings.cowan.system import Cowan

SYSTEMS = {
    "fast": Cowan(),
    "blatmmr": Cowan({"draw_form": "blatmmr"}),
    "laplace": Cowan({"algorithm": "laplace"}),
}
for _s in SYSTEMS.values():
    _s.parallel_min_batch = _s.parallel_min_width = 0  # batches: the parallel kernel
SETTINGS = settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])

matches = st.lists(
    st.tuples(st.integers(0, 7), st.integers(1, 7), st.sampled_from([0.0, 0.5, 1.0, 0.25])),
    min_size=1,
    max_size=30,
)


def _population(s: Cowan, seed: int, n: int = 8) -> list[np.ndarray]:
    """Players with different histories (windows of different sizes and places)."""
    rng = np.random.default_rng(seed)
    bel = [s.new_belief() for _ in range(n)]
    a = rng.integers(0, n, 3 * n)
    b = (a + rng.integers(1, n, 3 * n)) % n
    return s.rate_matches(bel, a, b, rng.choice([0.0, 1.0], 3 * n), np.zeros(3 * n, np.int64))


def _columns(ms: list[tuple[int, int, float]], n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The matches ``ms`` (player, offset to the opponent, score) among ``n`` players as the kernels' columns."""
    a = np.array([m[0] for m in ms], dtype=np.int64)
    return a, (a + np.array([m[1] for m in ms], dtype=np.int64)) % n, np.array([m[2] for m in ms])


@SETTINGS
@given(ms=matches, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3))
def test_waves_equal_sequential_bit_for_bit(ms: list[tuple[int, int, float]], which: str, seed: int) -> None:
    s = SYSTEMS[which]
    bel = _population(s, seed)
    a, b, sc = _columns(ms, len(bel))
    batch = s.rate_matches(bel, a, b, sc, np.zeros(len(ms), np.int64))
    s.parallel_min_batch = 10**9
    try:
        serial = s.rate_matches(bel, a, b, sc, np.zeros(len(ms), np.int64))
    finally:
        s.parallel_min_batch = 0
    seq = list(bel)
    for m in range(len(ms)):
        i, j = int(a[m]), int(b[m])
        one = s.rate_matches([seq[i], seq[j]], np.array([0]), np.array([1]), sc[m : m + 1], np.zeros(1, np.int64))
        seq[i], seq[j] = one
    for x, y, z in zip(batch, seq, serial, strict=True):
        assert np.array_equal(x, y)
        assert np.array_equal(x, z)


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), score=st.sampled_from([0.0, 0.5, 1.0, 0.7]), which=st.sampled_from(sorted(SYSTEMS)))
def test_fast_equals_naive(seed: int, score: float, which: str) -> None:
    s = SYSTEMS[which]
    bel = _population(s, seed, n=4)
    fa, fb = s.rate_matches(
        bel[:2], np.array([0]), np.array([1]), np.array([score]), np.zeros(1, np.int64), quantise=False
    )
    na, nb = s.naive_update(bel[0], bel[1], score)
    assert np.max(np.abs(s.full(fa) - s.full(na))) < 1e-12
    assert np.max(np.abs(s.full(fb) - s.full(nb))) < 1e-12


@SETTINGS
@given(seed=st.integers(0, 10**6), which=st.sampled_from(sorted(SYSTEMS)))
def test_codec_round_trip(seed: int, which: str) -> None:
    s, codec = SYSTEMS[which], CowanCodec()
    for b in _population(s, seed, n=4):
        data = codec.encode(b)
        d = codec.decode(data)
        assert 0.5 * np.abs(s.full(b) - s.full(d)).sum() <= 1e-6
        assert codec.encode(d) == data
        assert np.array_equal(codec.decode(data), d)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ms=matches, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3))
def test_returned_beliefs_are_codec_fixed_points(ms: list[tuple[int, int, float]], which: str, seed: int) -> None:
    s, codec = SYSTEMS[which], CowanCodec()
    bel = _population(s, seed)
    a, b, sc = _columns(ms, len(bel))
    for x in [*bel, *s.rate_matches(bel, a, b, sc, np.zeros(len(ms), np.int64))]:
        assert np.array_equal(codec.decode(codec.encode(x)), x)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ms=matches, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3), cut=st.integers(1, 29))
def test_any_batching_gives_the_same_bits(ms: list[tuple[int, int, float]], which: str, seed: int, cut: int) -> None:
    """Batches of 1, of 7, all at once and a random split point: one result."""
    s = SYSTEMS[which]
    bel = _population(s, seed)
    a, b, sc = _columns(ms, len(bel))
    results = []
    for size in (1, 7, cut, len(ms)):
        cur = list(bel)
        for st0 in range(0, len(ms), size):
            sl = slice(st0, st0 + size)
            cur = s.rate_matches(cur, a[sl], b[sl], sc[sl], np.zeros(len(a[sl]), np.int64))
        results.append(cur)
    for other in results[1:]:
        for x, y in zip(results[0], other, strict=True):
            assert np.array_equal(x, y)


@settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ms=matches, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3),
       path=st.sampled_from(["parallel", "serial", "single"]))
def test_every_kernel_path_stores_codec_fixed_points(
        ms: list[tuple[int, int, float]], which: str, seed: int, path: str) -> None:
    """What the engine stores (``rate_matches`` then ``encode_many``) from every kernel path (the
    parallel and serial batch kernels, the single-match one): ``encode_many`` writes ``encode``'s
    bytes, and they decode to the very beliefs ``rate_matches`` returned."""
    s, codec = SYSTEMS[which], CowanCodec()
    bel = _population(s, seed)
    a, b, sc = _columns(ms, len(bel))
    if path == "single":
        a, b, sc = a[:1], b[:1], sc[:1]
    t = np.zeros(len(a), np.int64)
    s.parallel_min_batch = 10**9 if path == "serial" else 0
    try:
        out = s.rate_matches(bel, a, b, sc, t)
    finally:
        s.parallel_min_batch = 0
    rated = sorted(set(a.tolist()) | set(b.tolist()))
    data = codec.encode_many([out[i] for i in rated])
    assert data == [codec.encode(out[i]) for i in rated]
    assert all(np.array_equal(codec.decode(d), out[i]) for d, i in zip(data, rated, strict=True))


# ---------------------------------------------------------------- a side advantage (stream.ratings.cowan.shift)
#: side advantages in skill units: zeros (no advantage: the register sweeps) among small and large shifts,
#: whole grid steps (0.014) and fractions of one, of either sign
advantage = st.one_of(st.just(0.0), st.sampled_from([0.014, -0.028, 1e-9]), st.floats(-3.0, 3.0, allow_nan=False))
matches_adv = st.lists(
    st.tuples(st.integers(0, 7), st.integers(1, 7), st.sampled_from([0.0, 0.5, 1.0, 0.25]), advantage),
    min_size=1,
    max_size=30,
)


def _advantage_columns(ms: list[tuple[int, int, float, float]],
                       n: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    a, b, sc = _columns([m[:3] for m in ms], n)
    return a, b, sc, np.array([m[3] for m in ms])


@settings(max_examples=12, deadline=None)
@given(seed=st.integers(0, 10**6), score=st.sampled_from([0.0, 0.5, 1.0, 0.7]), which=st.sampled_from(sorted(SYSTEMS)),
       h=st.floats(-14.0, 14.0, allow_nan=False).filter(lambda x: x != 0.0))
def test_fast_equals_naive_with_an_advantage(seed: int, score: float, which: str, h: float) -> None:
    """The kernels' likelihoods with A's luck argument shifted by h (the single-match entry and a
    batch's arena alike) == the general algorithm with A's skills at ``x_i + h``; unquantised."""
    s = SYSTEMS[which]
    bel = _population(s, seed, n=4)
    t = np.zeros(1, np.int64)
    fa, fb = s.rate_matches(bel[:2], np.array([0]), np.array([1]), np.array([score]), t,
                            advantages=np.array([h]), quantise=False)
    na, nb = s.naive_update(bel[0], bel[1], score, h)
    assert np.max(np.abs(s.full(fa) - s.full(na))) < 1e-12
    assert np.max(np.abs(s.full(fb) - s.full(nb))) < 1e-12
    # a batch (the arena kernels): match 0 with the advantage, then one between the others
    out = s.rate_matches(bel, np.array([0, 2]), np.array([1, 3]), np.array([score, 1.0]), np.zeros(2, np.int64),
                         advantages=np.array([h, 0.0]), quantise=False)
    assert np.max(np.abs(s.full(out[0]) - s.full(na))) < 1e-12
    assert np.max(np.abs(s.full(out[1]) - s.full(nb))) < 1e-12


@settings(max_examples=10, deadline=None)
@given(seed=st.integers(0, 10**6), which=st.sampled_from(sorted(SYSTEMS)), h=advantage)
def test_win_probability_with_an_advantage_is_the_plain_sum(seed: int, which: str, h: float) -> None:
    """``win_probability(a, b, h) = Σ_i Σ_k ρ_A(i) Λ(x_i + h, x_k) ρ_B(k)``; h = 0 is the prediction
    without one, bit for bit; B's side of the same match is its complement."""
    s = SYSTEMS[which]
    bel = _population(s, seed, n=4)
    grid = s.model.grid
    (la, pa), (lb, pb) = s.window(bel[0]), s.window(bel[1])
    xa, xb = grid[la : la + pa.shape[0]] + h, grid[lb : lb + pb.shape[0]]
    want = float(pa @ s.luck(xa[:, None], xb[None, :]) @ pb)
    got = s.win_probability(bel[0], bel[1], h)
    assert abs(got - want) < 1e-13
    assert abs(got + s.win_probability(bel[1], bel[0], -h) - 1.0) < 1e-13
    if h == 0.0:
        assert got == s.win_probability(bel[0], bel[1])


@SETTINGS
@given(ms=matches_adv, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3))
def test_waves_equal_sequential_bit_for_bit_with_advantages(ms: list[tuple[int, int, float, float]], which: str,
                                                             seed: int) -> None:
    """With advantages (zeros among them): the parallel waves, the serial kernel and one match at a
    time (``rate_pair``) give the same bits."""
    s = SYSTEMS[which]
    bel = _population(s, seed)
    a, b, sc, adv = _advantage_columns(ms, len(bel))
    t = np.zeros(len(ms), np.int64)
    batch = s.rate_matches(bel, a, b, sc, t, advantages=adv)
    s.parallel_min_batch = 10**9
    try:
        serial = s.rate_matches(bel, a, b, sc, t, advantages=adv)
    finally:
        s.parallel_min_batch = 0
    seq = list(bel)
    for m in range(len(ms)):
        i, j = int(a[m]), int(b[m])
        seq[i], seq[j] = s.rate_matches([seq[i], seq[j]], np.array([0]), np.array([1]), sc[m : m + 1],
                                        np.zeros(1, np.int64), advantages=adv[m : m + 1])
    for x, y, z in zip(batch, seq, serial, strict=True):
        assert np.array_equal(x, y)
        assert np.array_equal(x, z)


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(ms=matches_adv, which=st.sampled_from(sorted(SYSTEMS)), seed=st.integers(0, 3), cut=st.integers(1, 29))
def test_any_batching_gives_the_same_bits_with_advantages(ms: list[tuple[int, int, float, float]], which: str,
                                                          seed: int, cut: int) -> None:
    """Batches of 1, of 7, a random split and all at once, through ``rate_matches`` and a pool's
    arena (``rate_arena``): one result, and every belief a codec fixed point."""
    s, codec = SYSTEMS[which], CowanCodec()
    bel = _population(s, seed)
    a, b, sc, adv = _advantage_columns(ms, len(bel))
    results = []
    for size in (1, 7, cut, len(ms)):
        cur = list(bel)
        for st0 in range(0, len(ms), size):
            sl = slice(st0, st0 + size)
            cur = s.rate_matches(cur, a[sl], b[sl], sc[sl], np.zeros(len(a[sl]), np.int64), advantages=adv[sl])
        results.append(cur)
    arena = s.new_arena()
    slots = arena.add(bel)
    s.rate_arena(arena, slots, a, b, sc, advantages=adv)
    results.append(arena.beliefs(slots))
    for other in results[1:]:
        for x, y in zip(results[0], other, strict=True):
            assert np.array_equal(x, y)
    assert all(np.array_equal(codec.decode(codec.encode(x)), x) for x in results[0])
