"""PoolEngine's decoded beliefs (``decode_all``, ``decoded_bytes``): the same bytes with and without them."""

from __future__ import annotations

import random

import pytest

from stream.engine.pool import PoolEngine
from stream.events.model import MatchBatch, MatchEvent, index_players
from stream.ratings import make_system


def _batches(n_batches: int, per: int, players: int, seed: int = 3) -> list[MatchBatch]:
    rng = random.Random(seed)
    out = []
    for k in range(n_batches):
        b = MatchBatch("x")
        for i in range(per):
            a = rng.randrange(players)
            c = (a + 1 + rng.randrange(players - 1)) % players
            b.add(MatchEvent(event_id=f"e{k}-{i}", pool="x", time=k, a=f"p{a}", b=f"p{c}",
                             score=rng.choice((0.0, 0.5, 1.0))))
        out.append(b)
    return out


def _run(engine: PoolEngine, batches: list[MatchBatch], stored: dict[str, bytes | None]) -> list[dict[str, float]]:
    ratings = []
    for b in batches:
        res = engine.apply_matches(b, stored, index_players(b))
        stored.update(res.updates)
        ratings.append({p: r.rating for p, r in res.ratings.items()})
    return ratings


@pytest.mark.parametrize("budget", [None, 40_000])  # the default, and one that overflows and clears often
def test_decoded_beliefs_change_no_bit(budget: int | None) -> None:
    """Cowan with the decoded beliefs kept gives the stored bytes and ratings of an engine that
    decodes every time, also when another writer changed some players' bytes in between (a
    player whose bytes are not the ones remembered is decoded again)."""
    batches = _batches(30, 7, 12)
    plain = PoolEngine("x", make_system("cowan"))
    plain.decoded_budget = 0
    kept = PoolEngine("x", make_system("cowan"))
    assert kept.decoded_budget > 0  # on by default for Cowan (its beliefs are codec fixed points)
    if budget is not None:
        kept.decoded_budget = budget
    other = PoolEngine("x", make_system("cowan"))
    want_store: dict[str, bytes | None] = {}
    got_store: dict[str, bytes | None] = {}
    for k, b in enumerate(batches):
        assert _run(kept, [b], got_store) == _run(plain, [b], want_store)
        assert got_store == want_store
        if k % 4 == 3:  # another writer rates some of the same players: new bytes for them
            extra = _batches(1, 3, 12, seed=100 + k)
            _run(other, extra, want_store)
            got_store.clear()
            got_store.update(want_store)
    assert 0 < kept.decoded_bytes <= kept.decoded_budget


def test_only_systems_whose_beliefs_are_codec_fixed_points_keep_them() -> None:
    assert PoolEngine("x", make_system("cowan")).decoded_budget > 0
    for name in ("elo-mmr", "elo", "glicko", "trueskill"):
        assert PoolEngine("x", make_system(name)).decoded_budget == 0, name


def test_reads_for_the_http_api_leave_the_decoded_beliefs_alone() -> None:
    """``rating_of`` and ``decode_all(remember=False)`` run on the event loop thread (HTTP)
    while batches run on the numba thread: they read the decoded beliefs but never add to them,
    so the cache has a single writer."""
    eng = PoolEngine("x", make_system("cowan"))
    stored: dict[str, bytes | None] = {}
    _run(eng, _batches(2, 5, 6), stored)
    before = eng.decoded_bytes
    outsider = eng.codec.encode(eng.system.new_belief())  # bytes the engine has not seen
    assert eng.rating_of("new", outsider).rounds == 0
    assert set(eng.decode_all({"new": outsider, **stored}, ["new", *stored], remember=False)) == {"new", *stored}
    assert eng.decoded_bytes == before > 0
    eng.decode_all({"new": outsider}, ["new"])  # the batches' own path still remembers
    assert eng.decoded_bytes > before
