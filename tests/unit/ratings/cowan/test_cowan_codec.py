"""The Cowan belief codec: size, round-trip error, determinism, idempotence."""

from __future__ import annotations

import numpy as np
import pytest

from stream.ratings.codec import codec_for
from stream.ratings.cowan.codec import CowanCodec
from stream.ratings.cowan.system import Cowan


@pytest.fixture(scope="module")
def beliefs() -> dict[str, np.ndarray]:
    s = Cowan()
    rng = np.random.default_rng(11)
    P = 40
    bel = [s.new_belief() for _ in range(P)]
    for _ in range(60):
        perm = rng.permutation(P).reshape(2, -1)
        bel = s.rate_matches(bel, perm[0], perm[1], rng.choice([0.0, 0.5, 1.0], P // 2), np.zeros(P // 2, np.int64))
    return {"new": s.new_belief(), "established": bel[0], "other": bel[1]}


def _tv(s: Cowan, x: np.ndarray, y: np.ndarray) -> float:
    return 0.5 * float(np.abs(s.full(x) - s.full(y)).sum())


def test_registered() -> None:
    codec = codec_for("cowan")
    assert isinstance(codec, CowanCodec) and not codec.lossless


@pytest.mark.parametrize("kind", ["new", "established", "other"])
def test_round_trip(beliefs: dict[str, np.ndarray], kind: str) -> None:
    s, codec = Cowan(), CowanCodec()
    b = beliefs[kind]
    data = codec.encode(b)
    d = codec.decode(data)
    assert _tv(s, b, d) <= 1e-6
    assert d[1] == b[1]
    assert abs(s.summary(d).mu - s.summary(b).mu) < 1e-6
    assert len(data) <= 600
    # deterministic and idempotent
    assert codec.encode(b) == data
    assert codec.encode(d) == data
    assert np.array_equal(codec.decode(codec.encode(d)), d)
    # the decoded window drops at most 1e-12 of the mass
    lo, n = int(d[0]), len(d) - 2
    f = s.full(b)
    assert f[:lo].sum() + f[lo + n :].sum() <= 1e-12


def test_sizes(beliefs: dict[str, np.ndarray]) -> None:
    codec = CowanCodec()
    assert len(codec.encode(beliefs["established"])) < len(codec.encode(beliefs["new"]))


def test_rejects_garbage() -> None:
    codec = CowanCodec()
    with pytest.raises(ValueError):
        codec.decode(b"\x01abc")
    good = codec.encode(Cowan().new_belief())
    with pytest.raises(ValueError):
        codec.decode(good[:-3])
    with pytest.raises(ValueError):
        codec.encode(np.array([0.0, 0.0, np.nan]))


def test_batch_encoders_grow_their_buffer_for_rough_beliefs() -> None:
    """Rough log-densities (random cells) take ~5 bytes a cell, more than the batch encoders'
    first buffer (4 a cell): both grow it and still write ``encode``'s bytes."""
    from stream.ratings.cowan.quant import QMIN, canonical, quantise

    rng = np.random.default_rng(5)
    beliefs = [canonical(np.concatenate(([float(lo), 3.0], rng.uniform(0.01, 1.0, 400))))
               for lo in (0, 100, 300)]
    codec = CowanCodec()
    want = [codec.encode(b) for b in beliefs]
    assert sum(map(len, want)) > 4 * sum(len(b) - 2 for b in beliefs)  # past the first buffer
    assert codec.encode_many(beliefs) == want
    codes = []
    for b in beliefs:
        q = np.empty(len(b) - 2, dtype=np.int64)
        assert quantise(b[2:], QMIN, q)
        codes.append(q)
    assert codec.encode_coded(beliefs, codes) == want
