"""Property tests of Cowan's system: batched waves == one at a time == any other batching
(bit for bit), returned beliefs are codec fixed points, fast == naive (unquantised), codec
bounds. Example counts stay small: the machine is shared."""

from __future__ import annotations

from itertools import pairwise

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.ratings.cowan.codec import CowanCodec, _encode_many_coded
from stream.ratings.cowan.fastpath import CowanFastPath
from stream.ratings.cowan.quant import QMIN
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
def test_bytes_written_from_the_kernels_codes_equal_encoding_the_beliefs(
        ms: list[tuple[int, int, float]], which: str, seed: int, path: str) -> None:
    """``CowanFastPath.rate_matches_coded``'s codes are the quantised windows ``encode`` computes again:
    ``encode_coded`` writes the very bytes of ``encode_many``, from every kernel path (the
    parallel and serial batch kernels, the single-match one), and the beliefs are
    ``rate_matches``' own. A player the batch did not touch has no code."""
    s, codec = SYSTEMS[which], CowanCodec()
    bel = _population(s, seed)
    a, b, sc = _columns(ms, len(bel))
    if path == "single":
        a, b, sc = a[:1], b[:1], sc[:1]
    t = np.zeros(len(a), np.int64)
    s.parallel_min_batch = 10**9 if path == "serial" else 0
    try:
        out, codes = CowanFastPath(s).rate_matches_coded(bel, a, b, sc, t)
        plain = s.rate_matches(bel, a, b, sc, t)
    finally:
        s.parallel_min_batch = 0
    touched = set(a.tolist()) | set(b.tolist())
    assert {i for i, c in enumerate(codes) if c is not None} == touched
    assert all(np.array_equal(x, y) for x, y in zip(out, plain, strict=True))
    assert codec.encode_coded(out, codes) == codec.encode_many(out)
    rated = sorted(touched)
    assert codec.encode_coded([out[i] for i in rated], [codes[i] for i in rated]) == [codec.encode(out[i])
                                                                                     for i in rated]
    # ... written from the codes indeed, not by the fallback to encoding the beliefs
    heads = np.array([(out[i][0], out[i][1]) for i in rated])
    qoffs = np.cumsum([0] + [len(codes[i]) for i in rated]).astype(np.int64)
    buf, ends, bad = _encode_many_coded(heads, np.concatenate([codes[i] for i in rated]), qoffs, QMIN)
    assert bad == -1
    assert [bytes(buf[x:y]) for x, y in pairwise(ends.tolist())] == [codec.encode(out[i]) for i in rated]
