"""Batched codec and summary calls give exactly the per-item results, for every system.

``decode_many`` / ``encode_many`` (codecs) and ``summary_many`` (systems' fast paths) are what the
worker and ``PoolEngine`` call; the per-item ``decode`` / ``encode`` / ``summary`` stay the
reference. Everything is compared bit for bit: bytes, float64 bit patterns, Rating fields.
"""

from __future__ import annotations

import math
import subprocess
import sys
from collections.abc import Sequence
from functools import cache
from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.engine.pool import Applied, PoolEngine
from stream.events.model import MatchBatch, RoundEvent
from stream.ratings import SYSTEMS, make_system
from stream.ratings.base import Belief, Params, Rating, RatingError, RatingSystem, concat_f64
from stream.ratings.codec import Codec, Float64Codec, codec_for
from stream.ratings.cowan.codec import CowanCodec
from stream.ratings.cowan.system import ELO_SCALE, Cowan
from stream.ratings.fastpath import FastPath, fast_path

NAMES = sorted(SYSTEMS)
DAY_MS = 86_400_000


@cache
def population(name: str) -> tuple[RatingSystem, tuple[Belief, ...]]:
    """Beliefs produced by actually rating random matches and rounds (plus a new player)."""
    s = make_system(name)
    rng = np.random.default_rng(sum(map(ord, name)))
    n = 24
    bel = [s.new_belief() for _ in range(n)]
    for step in range(8):
        t = step * DAY_MS
        if "matches" in s.native:
            perm = rng.permutation(n).reshape(2, -1)
            scores = rng.choice([0.0, 0.5, 1.0], n // 2)
            bel = s.rate_matches(bel, perm[0], perm[1], scores, np.full(n // 2, t, dtype=np.int64))
        if "rounds" in s.native:
            idx = rng.choice(n, 6, replace=False)
            ranks = rng.integers(1, 4, 6).astype(np.int64)
            out = s.rate_round([bel[i] for i in idx], ranks, t + 1)
            for i, b in zip(idx.tolist(), out, strict=True):
                bel[i] = b
    return s, (s.new_belief(), *bel)


def _bits(x: np.ndarray) -> tuple[str, tuple[int, ...], bytes]:
    return str(x.dtype), x.shape, np.ascontiguousarray(x).tobytes()


def _rbits(r: Rating) -> tuple[str, str, str, int, type]:
    return (float(r.rating).hex(), float(r.mu).hex(), float(r.sigma).hex(), r.rounds, type(r.rounds))


def check_same(name: str, idx: Sequence[int]) -> None:
    s, pop = population(name)
    codec = codec_for(name)
    beliefs = [pop[i] for i in idx]
    datas = [codec.encode(b) for b in beliefs]
    # encode
    many = codec.encode_many(beliefs)
    assert isinstance(many, list) and len(many) == len(beliefs)
    assert all(type(d) is bytes for d in many)
    assert many == datas
    # decode
    one = [codec.decode(d) for d in datas]
    dec = codec.decode_many(datas)
    assert isinstance(dec, list) and len(dec) == len(datas)
    assert [_bits(x) for x in dec] == [_bits(x) for x in one]
    assert all(np.array_equal(x, y, equal_nan=True) for x, y in zip(dec, one, strict=True))
    # summary, of the original and of the decoded beliefs
    for bs in (beliefs, one):
        ratings = fast_path(s).summary_many(bs)
        assert isinstance(ratings, list)
        assert ratings == [s.summary(b) for b in bs]
        assert [_rbits(r) for r in ratings] == [_rbits(s.summary(b)) for b in bs]


@pytest.mark.parametrize("name", NAMES)
def test_empty_single_all(name: str) -> None:
    _, pop = population(name)
    check_same(name, [])
    for i in range(len(pop)):
        check_same(name, [i])
    check_same(name, list(range(len(pop))))
    check_same(name, [3, 3, 0, 3])  # the same belief (and bytes) more than once


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_random_subsets(name: str, data: st.DataObject) -> None:
    _, pop = population(name)
    idx = data.draw(st.lists(st.integers(0, len(pop) - 1), max_size=40))
    check_same(name, idx)


@pytest.mark.parametrize("name", NAMES)
def test_decoded_views_are_independent(name: str) -> None:
    """decode_many may return views of one buffer; they must not overlap or be read-only."""
    _, pop = population(name)
    codec = codec_for(name)
    datas = codec.encode_many(list(pop[:5]))
    dec = codec.decode_many(datas)
    before = [x.copy() for x in dec]
    dec[1][:] = -7.0
    for i in (0, 2, 3, 4):
        assert _bits(dec[i]) == _bits(before[i])
    assert _bits(codec.decode(datas[1])) == _bits(before[1])


def test_every_codec_and_system_has_batch_methods() -> None:
    for name in NAMES:
        codec = codec_for(name)
        assert callable(codec.encode_many) and callable(codec.decode_many)
        assert callable(fast_path(make_system(name)).summary_many)
    assert isinstance(codec_for("cowan"), CowanCodec)
    assert isinstance(codec_for("elo"), Float64Codec)



class _NotElo(RatingSystem):
    """Another class under a known name: must not get that name's fast path."""

    name = "elo"
    params_type = Params

    def new_belief(self) -> Belief:
        return np.zeros(2)

    def summary(self, belief: Belief) -> Rating:
        return Rating(0.0, 0.0, 0.0, 0)


def test_every_system_has_its_fast_path() -> None:
    """A typo in a spec's ``fast_path`` would silently give the generic (slow) path."""
    for name in NAMES:
        path = fast_path(make_system(name))
        assert type(path) is not FastPath and isinstance(path.system, path.system_type)
    assert type(fast_path(_NotElo())) is FastPath

_FRESH_CODECS = """
import sys
from stream.ratings.codec import codec_for
assert type(codec_for("elo-mmr")).__name__ == "Float64Codec"
assert "stream.ratings.cowan.codec" not in sys.modules and "stream.ratings.cowan.system" not in sys.modules
assert type(codec_for("cowan")).__name__ == "CowanCodec"
"""


def test_codec_table_is_lazy_and_complete() -> None:
    """In a fresh process: ``codec_for`` finds Cowan's codec without anything importing it first,
    and a float64 system's codec imports nothing of Cowan."""
    out = subprocess.run([sys.executable, "-c", _FRESH_CODECS], capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr


# --- errors: the batch raises what the per-item call raises --------------------------------


def _raises_same(call_many: object, call_one: object, items: Sequence[object], bad: object) -> None:
    with pytest.raises(Exception) as one:
        call_one(bad)  # type: ignore[operator]
    with pytest.raises(type(one.value)) as many:
        call_many([*items, bad, *items])  # type: ignore[operator]
    assert str(many.value) == str(one.value)


@pytest.mark.parametrize("name", ["cowan", "elo", "elo-mmr"])
def test_decode_errors(name: str) -> None:
    codec = codec_for(name)
    _, pop = population(name)
    good = codec.encode_many(list(pop[:3]))
    bads = [b"", b"\x07abc", good[1][:-1], good[1][:2]]
    if name == "cowan":
        bads += [good[1] + b"\x00", good[1][:1], good[1][:3], good[1][:1] + b"\xff" * 12]
    else:
        bads += [good[1] + b"\x00" * 3]
        # a tag alone is a valid (empty) f64 belief
        assert [_bits(x) for x in codec.decode_many([*good, b"\x01"])] == [
            _bits(codec.decode(d)) for d in [*good, b"\x01"]
        ]
    for bad in bads:
        _raises_same(codec.decode_many, codec.decode, list(good), bad)


def test_cowan_encode_errors() -> None:
    codec = CowanCodec()
    _, pop = population("cowan")
    good = list(pop[:3])
    nan = pop[2].copy()
    nan[5] = math.nan
    for bad in (np.array([1.0, 2.0]), nan, np.zeros(10), -pop[2]):
        _raises_same(codec.encode_many, codec.encode, good, bad)


def test_cowan_summary_errors() -> None:
    s, pop = population("cowan")
    good = list(pop[:3])
    for bad in (np.array([5000.0, 0.0, 1.0]), np.array([-1.0, 0.0, 1.0]), np.array([1.0, 0.0])):
        _raises_same(fast_path(s).summary_many, s.summary, good, bad)
    with pytest.raises(RatingError):
        fast_path(s).summary_many([*good, np.array([5000.0, 0.0, 1.0])])


@pytest.mark.parametrize("name", ["elo", "glicko", "trueskill", "elo-mmr"])
def test_summary_many_odd_inputs_fall_back(name: str) -> None:
    """Not float64, too short, or non-finite rounds: the per-item path decides."""
    s, pop = population(name)
    good = list(pop[:3])
    f32: Any = pop[1].astype(np.float32)  # not the float64 a belief is
    assert [_rbits(r) for r in fast_path(s).summary_many([*good, f32])] == [_rbits(s.summary(b)) for b in [*good, f32]]
    _raises_same(fast_path(s).summary_many, s.summary, good, np.array([1.0]))
    nan_rounds = pop[1].copy()
    nan_rounds[{"elo": 1, "elo-mmr": 4}.get(name, 2)] = math.nan
    _raises_same(fast_path(s).summary_many, s.summary, good, nan_rounds)


def test_cowan_summary_close_to_the_dense_formula() -> None:
    """The njit moments (fixed summation order) agree with numpy's dot products."""
    s, pop = population("cowan")
    assert isinstance(s, Cowan)
    for b in pop:
        lo, probs = s.window(b)
        x = s.model.grid[lo : lo + probs.shape[0]]
        mean = float(probs @ x)
        sd = math.sqrt(max(float(probs @ (x - mean) ** 2), 0.0))
        r = s.summary(b)
        assert r.mu == pytest.approx(mean, rel=1e-12, abs=1e-13)
        assert r.sigma == pytest.approx(ELO_SCALE * sd, rel=1e-12)
        assert s.ranking_score(b) == r.mu


# --- PoolEngine uses them -------------------------------------------------------------


class _PlainCodec(Codec):
    """A codec with only the per-item methods (and not ``Float64Codec``): the engine's per-player path."""

    def __init__(self, inner: Codec) -> None:
        self.inner = inner
        self.name = inner.name
        self.lossless = inner.lossless

    def encode(self, belief: Belief) -> bytes:
        return self.inner.encode(belief)

    def decode(self, data: bytes) -> Belief:
        return self.inner.decode(data)


def _batch(rng: np.random.Generator, n_players: int, n_matches: int, t0: int) -> MatchBatch:
    mb = MatchBatch("p")
    for m in range(n_matches):
        a, b = rng.choice(n_players, 2, replace=False).tolist()
        mb.event_ids.append(f"e{t0}-{m}")
        mb.a.append(f"u{a}")
        mb.b.append(f"u{b}")
        mb.scores.append(float(rng.integers(0, 2)))
        mb.times.append(t0 + m)
    return mb


@pytest.mark.parametrize("name", ["cowan", "elo", "glicko", "elo-mmr"])
def test_pool_engine_batched_equals_per_item(name: str) -> None:
    system = make_system(name)
    fast = PoolEngine("p", system)
    plain = PoolEngine("p", system, _PlainCodec(codec_for(name)))
    rng = np.random.default_rng(5)
    stored: dict[str, bytes | None] = {"ghost": None}
    for step in range(4):
        mb = _batch(rng, 30, 20, step * 100)
        learned = fast.advantages  # (a batch learns on a copy: these stay the advantages before it)
        a, b = fast.apply_matches(mb, stored), plain.apply_matches(mb, stored)
        assert a.updates == b.updates
        assert [_rbits(r) for r in a.ratings.values()] == [_rbits(r) for r in b.ratings.values()]
        assert list(a.ratings) == list(b.ratings) == list(a.updates)
        # and exactly what the per-player calls give
        players = list(dict.fromkeys((*mb.a, *mb.b)))
        dec = fast.decode_all(stored, players)
        assert list(dec) == [p for p in players if stored.get(p) is not None]
        for p, x in dec.items():
            raw = stored[p]
            assert raw is not None
            assert _bits(x) == _bits(fast.codec.decode(raw))
        fast.advantages = learned  # the same batch again, from the same side advantage
        changed = fast.rate_matches(mb, dec)
        assert a.updates == {p: fast.codec.encode(x) for p, x in changed.items()}
        assert a.ratings == {p: system.summary(x) for p, x in changed.items()}
        stored.update(a.updates)


@settings(max_examples=40, deadline=None)
@given(lens=st.lists(st.integers(0, 200), max_size=12), seed=st.integers(0, 2**32 - 1))
def test_f64_any_lengths(lens: list[int], seed: int) -> None:
    """Short and long (per-item path) beliefs, including empty ones, -0.0, inf and NaN."""
    rng = np.random.default_rng(seed)
    special = np.array([0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1e308])
    beliefs = [np.where(rng.random(k) < 0.2, rng.choice(special, k), rng.normal(0, 1e3, k)) for k in lens]
    codec = Float64Codec()
    datas = codec.encode_many(beliefs)
    assert datas == [codec.encode(b) for b in beliefs]
    assert all(type(d) is bytes for d in datas)
    assert [_bits(x) for x in codec.decode_many(datas)] == [_bits(codec.decode(d)) for d in datas]


_ODD = [0.0, -0.0, math.inf, -math.inf, math.nan, 5e-324, 1e308, 2.0**62, -(2.0**63), 0.5]


@cache
def _round_beliefs(name: str) -> list[bytes]:
    """Stored Elo-MMR beliefs of players with 1 to 4 rounds behind them (histories of
    several lengths), made by the per-belief path."""
    eng = PoolEngine("p", make_system(name), _PlainCodec(codec_for(name)))
    stored: dict[str, bytes | None] = {}
    for k in range(4):
        players = [f"h{i}" for i in range(k, 8)]
        event = RoundEvent(event_id=f"w{k}", pool="p", round_id=f"w{k}", time=86_400_000 * k, players=players,
                           ranks=np.arange(len(players)) % 3)
        stored.update(eng.apply_round(event, stored).updates)
    return [raw for raw in stored.values() if raw is not None]


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(data=st.data(), name=st.sampled_from(["elo-mmr", "elo-mmx"]))
def test_packed_round_path_equals_per_belief_path(data: st.DataObject, name: str) -> None:
    """A round rated in a step's arena (``PoolEngine.held_rounds``, ``apply_round(..., columns=True)``:
    the stored values gathered past their tags, the change by columns) gives the per-belief path's
    bytes and ratings bit for bit, newcomers included, for any stored values (a value of another tag
    or size, odd floats, a round it refuses, a round that changes nothing) -- or refuses
    (RatingError) what that path refuses."""
    fast = PoolEngine("p", make_system(name))
    plain = PoolEngine("p", make_system(name), _PlainCodec(codec_for(name)))
    good = _round_beliefs(name)
    n = data.draw(st.integers(1, 9))
    kinds = data.draw(st.sampled_from([["absent", "normal"], ["absent", "normal", "odd", "short", "tag", "len"]]))
    stored: dict[str, bytes | None] = {}
    drawn = set()
    for i in range(n):
        kind = data.draw(st.sampled_from(kinds))
        drawn.add(kind)
        if kind == "absent":
            continue
        raw = data.draw(st.sampled_from(good))
        if kind == "odd":  # a value of the right size holding odd floats
            k = (len(raw) - 1) // 8
            raw = raw[:1] + np.array([data.draw(st.sampled_from(_ODD)) for _ in range(k)], dtype="<f8").tobytes()
        elif kind == "short":
            raw = raw[:-1]
        elif kind == "tag":
            raw = b"\x07" + raw[1:]
        elif kind == "len":  # whole float64s, but not a header plus terms of three
            raw = raw + np.zeros(1, dtype="<f8").tobytes()
        stored[f"u{i}"] = raw
    players = [f"u{i}" for i in range(n)]
    ranks = np.array(data.draw(st.lists(st.integers(1, 3), min_size=n, max_size=n)))
    weight = data.draw(st.sampled_from([1.0, 1.0, 0.25, 1e300]))
    event = RoundEvent(event_id="r", pool="p", round_id="r", time=86_400_000 * 10, players=players, ranks=ranks,
                       weight=weight)
    held = fast.held_rounds(stored)
    assert held is not None
    try:
        got: Applied | RatingError = fast.apply_round(event, held, columns=True)
    except RatingError as exc:
        got = exc
    try:
        want = plain.apply_round(event, stored)
    except RatingError:
        assert isinstance(got, RatingError)
        return
    assert not isinstance(got, RatingError), got
    assert dict(got.updates) == want.updates
    ch = got.change
    if ch is None:
        assert [_rbits(r) for r in got.ratings.values()] == [_rbits(r) for r in want.ratings.values()]
        return
    assert not got.ratings
    made = [Rating(*row) for row in zip(ch.rating.tolist(), ch.mu.tolist(), ch.sigma.tolist(), ch.rounds.tolist(),
                                        strict=True)]
    assert [_rbits(r) for r in made] == [_rbits(want.ratings[p]) for p in players]


def _concat_inputs(kind: str, rng: np.random.Generator, k: int) -> list[object]:
    """Inputs ``concat_f64`` copies itself (1-D float64) or hands to ``np.concatenate``."""
    if kind == "f64":
        return [rng.normal(size=int(rng.integers(0, 900))) for _ in range(k)]
    if kind == "views":  # contiguous slices of one buffer and strided ones
        base = rng.normal(size=4000)
        return [base[i * 50 : i * 50 + 40] if i % 2 else base[i : i + 300 : 3] for i in range(k)]
    if kind == "mixed":
        return [rng.normal(size=5).astype(np.float32), rng.normal(size=700), [1.0, 2.0]][: max(k, 1)]
    if kind == "ints":
        return [np.arange(5), rng.normal(size=3)]
    if kind == "2d":
        return [rng.normal(size=(2, 3)), rng.normal(size=(1, 3))]
    return [np.float64(1.0), rng.normal(size=3)]  # 0-d


@settings(max_examples=60, deadline=None)
@given(kind=st.sampled_from(["f64", "views", "mixed", "ints", "2d", "0d"]), k=st.integers(0, 12),
       seed=st.integers(0, 2**32 - 1), casting=st.sampled_from(["no", "same_kind"]))
def test_concat_f64_is_np_concatenate(kind: str, k: int, seed: int, casting: str) -> None:
    """Same values, dtype, shape and writability as ``np.concatenate`` -- or the same error."""
    items = _concat_inputs(kind, np.random.default_rng(seed), k)
    try:
        want = np.concatenate(items, dtype=np.float64, casting=casting)  # type: ignore[call-overload]
    except Exception as exc:  # whatever it raises, concat_f64 raises too
        with pytest.raises(type(exc)):
            concat_f64(items, casting=casting)  # type: ignore[arg-type]
        return
    got = concat_f64(items, casting=casting)  # type: ignore[arg-type]
    assert got.dtype == want.dtype and got.shape == want.shape and got.flags.writeable
    assert got.tobytes() == want.tobytes()
