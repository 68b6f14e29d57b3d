"""Pools as the version before names were escaped wrote them (raw names in keys, meta without a key
format), and the check that one reads back in full after ``RedisStore.meta`` moved it; for the
migration tests on a single Redis and on a Redis Cluster (stream.state.legacy_pools)."""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

from stream.state import legacy_pools
from stream.state.redis_store import Commit, RedisStore, StateError


class Crash(Exception):
    """A worker stopped between two steps of a migration."""


@dataclass
class OldPool:
    name: str
    players: dict[str, bytes]
    pending: dict[str, dict[str, bytes]] = field(default_factory=dict)  # round id -> results
    gen: str = "3"
    ids: bytes = b"\x11" * 32  # two digests
    done: tuple[str, ...] = ()


async def write_old(store: RedisStore, pool: OldPool) -> None:
    """``pool`` in the layout before escaping (every key under ``<prefix>:{<raw name>}:``), listed."""
    base = store.keys.legacy_base(pool.name)
    for i, (p, v) in enumerate(pool.players.items()):
        await store.r.set(base + "p:" + p, v)
        await store.r.zadd(base + "lb", {p: float(i)})
    for rid, results in pool.pending.items():
        await store.r.hset(base + "pend:" + rid, mapping=results)
    if pool.done:
        await store.r.sadd(base + "done", *pool.done)
    await store.r.set(base + "gen", pool.gen)
    await store.r.set(base + "ids", pool.ids)
    await store.r.hset(base + "meta", mapping={"system": "elo", "params": "{}"})
    await store.r.sadd(store.keys.pools_key(), pool.name)


async def check_moved(store: RedisStore, pool: OldPool, reused: bool = False) -> None:
    """The pool reads as it was written, through the current layout, and no key of the old one is left
    (``reused``: the old hash tag is another pool's new one)."""
    assert await store.meta(pool.name) == {"system": "elo", "params": {}}
    meta = await store.r.hgetall(store.key(pool.name, "meta"))
    assert meta[b"keys"] == b"2" and legacy_pools.LEGACY_KEYS not in meta
    assert await store.beliefs(pool.name, list(pool.players)) == pool.players
    rows = dict(row for chunk in [c async for c in store.scan_players(pool.name)] for row in chunk)
    assert rows == pool.players
    assert [p for p, _ in await store.top(pool.name, 100)] == list(reversed(pool.players))[:100]
    if pool.pending or pool.done:
        done, pend = await store.round_state(pool.name, [*pool.pending, *pool.done])
        assert pend == pool.pending and done == set(pool.done)
    assert await store.recorded_ids(pool.name) == len(pool.ids) // 16
    snap = await store.snapshot(pool.name, list(pool.players)[:1], [])
    assert snap.gen == pool.gen
    base = store.keys.legacy_base(pool.name)
    if reused:  # its old hash tag is another pool's new one now: only its players are surely gone
        assert [p for p in pool.players if await store.r.exists(base + "p:" + p)] == []
        return
    old, _ = await legacy_pools.old_keys(store, pool.name)
    assert [k for k, _ in old if await store.r.exists(k)] == []
    assert not await store.r.exists(base + "meta")


async def commit_one(store: RedisStore, pool: OldPool) -> int:
    return await store.commit(pool.name, pool.gen, Commit(beliefs={"new": b"\x01n"}, scores={"new": 1.0},
                                                          event_ids=["after-migration"]))


async def migration_story(store: RedisStore, other: RedisStore) -> dict[str, Any]:
    """The cases of the migration, against ``store`` and a second store on the same Redis (a second worker)."""
    a = OldPool("a:b", {"x": b"\x01x", "y:z": b"\x01yz", "%7B": b"\x01pct", "{w}": b"\x01w"},
                pending={"r:1": {"e1": b"{}", "e2": b"{}"}}, done=("r:0",))
    # the old pool named like a:b's escaped name: its old keys are where a:b's new keys go
    e = OldPool("a%3Ab", {"q": b"\x01q"}, gen="7")
    pct = OldPool("50%", {f"p{i}": b"\x01%d" % i for i in range(1200)}, gen="9")  # more than one chunk
    # kc}:p:x's old keys were kc's players "x}:gen", "x}:lb", ...: refused, both left as they were
    kc, clash = OldPool("kc", {"x}:gen": b"\x01?"}), OldPool("kc}:p:x", {"v": b"\x01v"})
    # a round still being assembled in an old pool: the new version's first touch of the pool is the round
    g = OldPool("g:h", {"s": b"\x01s"}, pending={"r:9": {"e9": b'{"rank": 1}'}})
    for pool in (a, e, pct, kc, clash, g):
        await write_old(store, pool)
    assert await store.round_state(g.name, ["r:9"]) == (set(), g.pending)
    await check_moved(store, g)

    await check_moved(store, a)  # moves a%3Ab to its own new keys first
    await check_moved(store, e, reused=True)
    assert await commit_one(store, a) == int(a.gen) + 1

    # two workers at once, one of them stopped between adopting the new meta and deleting the old keys
    real_finish = legacy_pools.finish

    async def crash(store: RedisStore, pool: str) -> None:
        raise Crash

    legacy_pools.finish = crash  # type: ignore[assignment]
    try:
        results = await asyncio.gather(store.meta(pct.name), other.meta(pct.name), return_exceptions=True)
    finally:
        legacy_pools.finish = real_finish
    assert any(isinstance(r, Crash) for r in results)
    assert all(r == {"system": "elo", "params": {}} or isinstance(r, Crash) for r in results)
    assert (await store.r.hgetall(store.key(pct.name, "meta")))[legacy_pools.LEGACY_KEYS] == b"1"
    await check_moved(other, pct)  # the next read deletes what is left
    assert await commit_one(other, pct) == int(pct.gen) + 1

    legacy_meta = await store.r.hgetall(store.keys.legacy_base(clash.name) + "meta")
    refused = None
    try:
        await store.meta(clash.name)
    except StateError as exc:
        refused = str(exc)
    assert refused is not None and "'kc'" in refused
    assert await store.r.hgetall(store.keys.legacy_base(clash.name) + "meta") == legacy_meta
    assert not await store.r.exists(store.key(clash.name, "meta"))
    return {"a": a, "e": e}
