"""``ahead.read_ahead``: what a step rated ahead starts from, on a real Redis.

Each player's value comes from the commit in flight first, then from the cache (at that commit's
``gen`` only; a cached None means "no belief"), then from Redis, and the answer lists the players
in the step's order whichever source gave them.
"""

from __future__ import annotations

import asyncio
import random
import uuid

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from stream.service.ahead import prefetch, read_ahead
from stream.service.planning import StepInputs
from stream.state.cache import BeliefCache
from stream.state.redis_store import Commit, RedisStore

pytestmark = pytest.mark.integration

NAMES = [f"p{i}" for i in range(12)]


def _step(players: list[str]) -> StepInputs:
    return StepInputs(ops=[], kind="rounds", ids=[], players={p: k for k, p in enumerate(players)},
                      offsets={}, rounds=[])


def _oracle(players: list[str], written: dict[str, bytes], known: dict[str, bytes | None],
            stored: dict[str, bytes]) -> dict[str, bytes | None]:
    """Player by player: written, else known (at the commit's gen), else what Redis holds."""
    return {p: written[p] if p in written else known[p] if p in known else stored.get(p) for p in players}


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
       st.dictionaries(st.sampled_from(NAMES), st.binary(min_size=1, max_size=6)),
       st.dictionaries(st.sampled_from(NAMES), st.none() | st.binary(min_size=1, max_size=6)),
       st.dictionaries(st.sampled_from(NAMES), st.binary(min_size=1, max_size=6)),
       st.booleans())
def test_read_ahead_takes_written_then_cached_then_stored(redis_url: str, players: list[str],
                                                          written: dict[str, bytes],
                                                          known: dict[str, bytes | None],
                                                          stored: dict[str, bytes], same_gen: bool) -> None:
    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"ra{uuid.uuid4().hex[:8]}")
        try:
            if stored:
                c = Commit(beliefs=dict(stored), scores=dict.fromkeys(stored, 0.0))
                await store.commit("p", "0", c, {"system": "elo", "params": {}})
            cache = BeliefCache(1 << 20)
            cache.fill("p", "5" if same_gen else "4", known)
            got = await read_ahead(store, cache, "p", _step(players), "5", written)
            want = _oracle(players, written, known if same_gen else {}, stored)
            assert got == want
            assert got is not None and list(got) == players
        finally:
            await store.r.aclose()

    asyncio.run(run())


def test_read_ahead_of_a_large_step_keeps_its_order(redis_url: str) -> None:
    """Sources interleaved over 30,000 players: the answer is still in the step's order."""
    rng = random.Random(3)
    players = [f"q{i}" for i in range(30_000)]
    rng.shuffle(players)
    written = {p: b"w" + p.encode() for p in players[::3]}
    known: dict[str, bytes | None] = {p: (None if i % 2 else b"k" + p.encode()) for i, p in enumerate(players[1::3])}
    stored = {p: b"s" + p.encode() for p in players[2::6]}

    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"ra{uuid.uuid4().hex[:8]}")
        try:
            await store.commit("p", "0", Commit(beliefs=stored, scores=dict.fromkeys(stored, 0.0)),
                               {"system": "elo", "params": {}})
            cache = BeliefCache(1 << 30)
            cache.fill("p", "1", known)
            got = await read_ahead(store, cache, "p", _step(players), "1", written)
            assert got == _oracle(players, written, known, stored)
            assert got is not None and list(got) == players
            await store.r.delete(*[store.player_key("p", p) for p in stored])
        finally:
            await store.r.aclose()

    asyncio.run(run())


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.lists(st.sampled_from(NAMES), min_size=1, unique=True),
       st.lists(st.sampled_from(NAMES), unique=True),
       st.dictionaries(st.sampled_from(NAMES), st.binary(min_size=1, max_size=6)),
       st.dictionaries(st.sampled_from(NAMES), st.none() | st.binary(min_size=1, max_size=6)),
       st.dictionaries(st.sampled_from(NAMES), st.binary(min_size=1, max_size=6)),
       st.booleans())
def test_read_ahead_made_ahead_gives_what_it_gives_after(redis_url: str, players: list[str], before: list[str],
                                                         written: dict[str, bytes],
                                                         known: dict[str, bytes | None],
                                                         stored: dict[str, bytes], same_gen: bool) -> None:
    """``prefetch`` while the step before is rated, then ``read_ahead`` with the commit's values: the
    same answer, in the same order, as ``read_ahead`` alone (the commit writes only the players of
    the step before, not always all of them: a dead round's are not written)."""
    written = {p: v for p, v in written.items() if p in before}

    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"ra{uuid.uuid4().hex[:8]}")
        try:
            if stored:
                c = Commit(beliefs=dict(stored), scores=dict.fromkeys(stored, 0.0))
                await store.commit("p", "0", c, {"system": "elo", "params": {}})
            cache = BeliefCache(1 << 20)
            cache.fill("p", "5" if same_gen else "4", known)
            step = _step(players)
            pre = prefetch(store, cache, "p", step, "5", _step(before))
            got = await read_ahead(store, cache, "p", step, "5", written, pre)
            assert got == _oracle(players, written, known if same_gen else {}, stored)
            assert got is not None and list(got) == players
        finally:
            await store.r.aclose()

    asyncio.run(run())


@pytest.mark.parametrize("same_gen", [True, False])
def test_read_ahead_uses_what_was_read_ahead_at_its_gen_only(redis_url: str, same_gen: bool) -> None:
    """A player the step before does not touch is read while that step is rated; a value stored after
    that read is not seen when the read was at the read ahead's ``gen`` (the compare-and-sets on ``gen``
    answer for it), and is when it was at another ``gen`` (it could be older than the state the step
    starts from): then everything is read again."""
    async def run() -> None:
        store = RedisStore.from_url(redis_url, prefix=f"ra{uuid.uuid4().hex[:8]}")
        try:
            first = {"a": b"a1", "b": b"b1"}
            await store.commit("p", "0", Commit(beliefs=first, scores=dict.fromkeys(first, 0.0)),
                               {"system": "elo", "params": {}})
            cache = BeliefCache(1 << 20)
            step = _step(["a", "b", "c"])
            pre = prefetch(store, cache, "p", step, "1", _step(["b"]))
            assert pre.reading is not None and await pre.reading
            await store.r.set(store.player_key("p", "a"), b"a2")  # (not through a commit: ``gen`` stays)
            got = await read_ahead(store, cache, "p", step, "1" if same_gen else "2", {"b": b"b2"}, pre)
            assert got == {"a": b"a1" if same_gen else b"a2", "b": b"b2", "c": None}
        finally:
            await store.r.aclose()

    asyncio.run(run())
