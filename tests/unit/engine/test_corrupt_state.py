"""A stored value the engine cannot use is a ``RatingError``, never another exception.

Redis may hold a value that is not a belief of the pool's system: a truncated write, a key
written by another tool, zeros, NaN, 1e308. The codecs and kernels fail on such values in
many ways (``ValueError``, ``IndexError``, ``ZeroDivisionError``, ``OverflowError``, numba's
``SystemError``), or return NaN ratings. The worker dead-letters an event on ``RatingError``
and stops on anything else, so every entry point of ``PoolEngine`` must give either a
``RatingError`` or finite ratings, whatever the bytes.
"""

from __future__ import annotations

import contextlib
import math

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent, RoundEvent
from stream.ratings import SYSTEMS, make_system
from stream.ratings.base import RatingError
from stream.state.memory import Held

# numpy warns of the overflows and NaNs such values give on their way to a RatingError or a
# rejected rating: expected here, and what the tests check is the outcome, not the warning
pytestmark = pytest.mark.filterwarnings("ignore::RuntimeWarning")

NAMES = sorted(SYSTEMS)
_ENGINES: dict[str, tuple[PoolEngine, bytes]] = {}


def engine(name: str) -> tuple[PoolEngine, bytes]:
    """The pool engine of ``name`` and a valid stored belief (a player after one match)."""
    if name not in _ENGINES:
        eng = PoolEngine("p", make_system(name))
        batch = MatchBatch("p")
        batch.add(MatchEvent(event_id="e0", pool="p", time=0, a="x", b="y", score=1.0))
        _ENGINES[name] = eng, eng.apply_matches(batch, {}).updates["x"]
    return _ENGINES[name]


def _f64(values: float, like: bytes) -> bytes:
    """``like`` (a valid stored belief) with every float64 after its tag replaced."""
    n = (len(like) - 1) // 8
    return like[:len(like) - 8 * n] + np.full(n, values, dtype="<f8").tobytes()


def _rate_every_way(eng: PoolEngine, raw: bytes) -> list[str]:
    """Each entry point on ``raw`` as player x's stored value: what came out ("ok" or the error)."""
    good = engine(eng.system.name)[1]
    stored = {"x": raw, "y": good}
    batch = MatchBatch("p")
    batch.add(MatchEvent(event_id="e1", pool="p", time=1, a="x", b="y", score=0.5))
    batch.add(MatchEvent(event_id="e2", pool="p", time=2, a="y", b="z", score=1.0))
    event = RoundEvent(event_id="r1", pool="p", round_id="r1", time=3, players=["x", "y", "z"],
                       ranks=np.array([1, 2, 3]))
    calls = [lambda: eng.apply_matches(batch, stored).ratings.values(),
             lambda: eng.apply_round(event, stored).ratings.values(),
             lambda: [eng.rating_of("x", raw)]]
    seen = []
    for call in calls:
        try:
            ratings = list(call())
        except RatingError as exc:
            seen.append(f"RatingError: {exc}")
            continue
        assert all(math.isfinite(r.rating) and math.isfinite(r.mu) and math.isfinite(r.sigma) for r in ratings)
        seen.append("ok")
    _store_every_way(eng, raw, batch, event)
    return seen


def _store_every_way(eng: PoolEngine, raw: bytes, batch: MatchBatch, event: RoundEvent) -> None:
    """The embedded store's entry points on what it would hold for ``raw``: the packed bytes
    (Elo-MMR) or the decoded array. It only ever holds what the kernels made, so this checks
    that the guard and the kernels give ``RatingError`` or a result, never another exception
    or a crash (no finiteness check on this path)."""
    good = engine(eng.system.name)[1]
    if eng.packed:
        held: dict[str, Held] = {"x": raw[1:], "y": good[1:]}  # the float64 bytes without the codec's tag
    else:
        try:
            held = {"x": eng.codec.decode(raw), "y": eng.codec.decode(good)}
        except ValueError:
            return  # not an array the store could hold
    for call in (lambda: eng.store_matches(batch, held), lambda: eng.store_round(event, held)):
        with contextlib.suppress(RatingError):
            call()


@pytest.mark.parametrize("name", NAMES)
def test_known_corruptions_are_rating_errors(name: str) -> None:
    """The values that made each system raise something else, or return NaN, before."""
    eng, good = engine(name)
    bad = {"empty": b"", "tag only": good[:1], "truncated": good[:-8], "odd length": good[:3] + good[4:],
           "zeros": good[:1] + bytes(len(good) - 1), "0xff": good[:1] + b"\xff" * (len(good) - 1)}
    if name != "cowan":  # float64 beliefs: every value the same
        bad.update({"f64 zeros": _f64(0.0, good), "f64 1e308": _f64(1e308, good), "f64 nan": _f64(math.nan, good)})
    for raw in bad.values():
        _rate_every_way(eng, raw)  # asserts: a RatingError or finite ratings
    errors = _rate_every_way(eng, b"")
    assert all(e.startswith("RatingError") for e in errors)
    assert "player 'x'" in errors[0]  # the message names whose stored value is not a belief


@pytest.mark.parametrize("name", NAMES)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(data=st.data())
def test_any_stored_bytes_give_a_rating_error_or_finite_ratings(name: str, data: st.DataObject) -> None:
    eng, good = engine(name)
    how = data.draw(st.sampled_from(["bytes", "splice", "floats"]))
    if how == "bytes":
        raw = data.draw(st.binary(max_size=64))
    elif how == "splice":  # a valid value with a stretch overwritten or cut
        at = data.draw(st.integers(0, len(good)))
        raw = good[:at] + data.draw(st.binary(max_size=24)) + good[at + data.draw(st.integers(0, 24)):]
    else:  # right tag and length, any float64 values (NaN, inf, subnormal, huge)
        if name == "cowan":
            raw = good[:1] + data.draw(st.binary(min_size=len(good) - 1, max_size=len(good) - 1))
        else:
            n = (len(good) - 1) // 8
            vals = data.draw(st.lists(st.floats(allow_nan=True, allow_infinity=True), min_size=n, max_size=n))
            raw = good[:len(good) - 8 * n] + np.array(vals, dtype="<f8").tobytes()
    _rate_every_way(eng, raw)
