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

from stream.service.ahead import read_ahead
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
            got = await read_ahead(store, cache, "p", _step(players), "5", [written])
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
            got = await read_ahead(store, cache, "p", _step(players), "1", [written])
            assert got == _oracle(players, written, known, stored)
            assert got is not None and list(got) == players
            await store.r.delete(*[store.player_key("p", p) for p in stored])
        finally:
            await store.r.aclose()

    asyncio.run(run())
