"""The store on a real three-master Redis Cluster (started by the ``redis_cluster`` fixture)."""

from __future__ import annotations

import asyncio
import os
import socket
import subprocess
import sys
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis.asyncio as aioredis
from cluster_utils import LocalCluster
from redis.asyncio.cluster import RedisCluster
from redis.crc import key_slot

from stream.service.config import Settings
from stream.service.export import export_rows
from stream.service.processor import Message, Processor
from stream.state.redis_client import StoreUnavailable, connect, is_cluster
from stream.state.redis_store import Commit, RedisStore

#: in one process under pytest-xdist with the other modules of group "heavy" (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.xdist_group("heavy")]

POOLS = [f"pool-{i}" for i in range(24)] + ["kc", "kc}:p:x", "a:b{c}"]


def _msgs(pools: list[str], start: int, n: int) -> list[Message]:
    out = []
    for k in range(start, start + n):
        pool = pools[k % len(pools)]
        ms: list[dict[str, Any]] = [{"event_id": f"{pool}-m{k}-{j}", "time": k, "a": f"p{(k + j) % 5}",
                                     "b": f"x}}:lb{(k + 2 * j + 1) % 4}", "score": (j % 3) / 2} for j in range(3)]
        if k % 3 == 0:  # the others have a home side: Elo learns its advantage (``:adv``, docs/advantage.md)
            ms[1]["neutral"] = True
        out.append(Message("in", k % 4, k, orjson.dumps({"type": "match_batch", "pool": pool, "matches": ms})))
    return out


async def _rows(store: RedisStore) -> list[dict[str, Any]]:
    return await export_rows(store)


def _run(msgs: list[Message], store: RedisStore) -> Any:
    async def go() -> Any:
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo"), store, ex)
            res = await proc.process(msgs)
        return res
    return go()


def test_the_url_of_any_node_is_detected_as_a_cluster(redis_cluster: LocalCluster, redis_url: str) -> None:
    assert is_cluster(redis_cluster.url) and not is_cluster(redis_url)
    for port in redis_cluster.ports:
        assert isinstance(connect(f"redis://127.0.0.1:{port}"), RedisCluster)
    assert isinstance(connect(redis_url), aioredis.Redis)
    assert isinstance(connect(redis_cluster.url, cluster=False), aioredis.Redis)  # MMR_REDIS_CLUSTER=0 is obeyed
    with pytest.raises(ValueError, match="DB 6"):
        connect(redis_cluster.url + "/6")


def test_many_pools_on_every_master_equal_a_single_redis(redis_cluster: LocalCluster, redis_url: str,
                                                         tmp_path: Path) -> None:
    """Pools spread over all three masters (each pool in its slot); the processor's snapshot and
    commit, the leaderboards and the export give exactly what a single Redis gives."""
    msgs = _msgs(POOLS, 0, 120)
    prefix = f"c{uuid.uuid4().hex[:6]}"
    exported: list[dict[str, Any]] = []

    async def run() -> None:
        single = RedisStore.from_url(redis_url, prefix=prefix)
        store = RedisStore.from_url(redis_cluster.url, prefix=prefix)
        assert store.is_cluster and not single.is_cluster
        want = await _run(msgs, single)
        got = await _run(msgs, store)
        assert got.dead == [] == want.dead
        assert sorted((o.pool, o.player, o.rating, o.version) for o in got.outputs) == \
            sorted((o.pool, o.player, o.rating, o.version) for o in want.outputs)
        exported.extend(await _rows(store))
        assert exported == await _rows(single)
        learned = {p: await store.advantages(p) for p in POOLS}
        assert all(learned.values()) and learned == {p: await single.advantages(p) for p in POOLS}
        assert await store.pools() == sorted(POOLS)
        for pool in POOLS:
            assert (await store.page(pool, 0, 3))[0] == (await single.page(pool, 0, 3))[0]
        owners = {redis_cluster.slot_owner(key_slot(store.key(p, "gen").encode())) for p in POOLS}
        assert len(owners) == 3
        for i in range(3):  # every master holds keys of the test
            assert any(True for _ in redis_cluster.node(i).scan_iter(match=f"{prefix}:*", count=1000))
        assert await store.ping()
        await store.close()
        await single.close()

    asyncio.run(run())
    # the command line, with REDIS_URL naming one node and nothing else said
    out = tmp_path / "export.jsonl"
    env = {**os.environ, "REDIS_URL": f"redis://127.0.0.1:{redis_cluster.ports[2]}", "MMR_KEY_PREFIX": prefix}
    env.pop("MMR_REDIS_CLUSTER", None)
    subprocess.run([sys.executable, "-m", "stream.cli", "export", "--out", str(out)], env=env, check=True,
                   capture_output=True, timeout=120)
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert len(rows) == len(exported) > 200 and rows == orjson.loads(orjson.dumps(exported))


@pytest.mark.parametrize(("raw", "want"), [("", None), ("auto", None), ("1", True), ("yes", True), ("0", False)])
def test_mmr_redis_cluster_setting(raw: str, want: bool | None) -> None:
    from stream.service.config import from_env

    assert from_env({"MMR_REDIS_CLUSTER": raw}).redis_cluster is want


def test_a_moved_slot_and_a_slot_being_migrated_are_infrastructure_errors(redis_cluster: LocalCluster) -> None:
    """A pool's slot moves to another master: the cluster client follows MOVED and the next batches
    land. While the slot is half-migrated a commit cannot run (TRYAGAIN: its keys are on two nodes):
    the store raises StoreUnavailable -- retry later -- never an error that would dead-letter the
    events, and writes nothing; once the move ends the same commit lands. A plain client pointed at
    one node of a cluster (MOVED for other slots) gets StoreUnavailable too."""
    pool = "moving:pool"
    prefix = f"m{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        store = RedisStore.from_url(redis_cluster.url, prefix=prefix)
        assert (await _run(_msgs([pool], 0, 5), store)).dead == []
        slot = key_slot(store.key(pool, "gen").encode())
        src = redis_cluster.slot_owner(slot)
        dst = (src + 1) % 3
        redis_cluster.move_slot(slot, dst)
        res = await _run(_msgs([pool], 5, 5), store)  # the client's slot map is stale: MOVED, followed
        assert res.dead == [] and res.outputs
        assert redis_cluster.slot_owner(slot) == dst

        snap = await store.snapshot(pool, ["p0"], [])
        redis_cluster.move_slot(slot, src, keys_first=2)  # half-migrated: some of the pool's keys moved
        c = Commit(beliefs={"direct": b"\x01z"}, scores={"direct": 1.0}, event_ids=["late"])
        with pytest.raises(StoreUnavailable):
            await store.commit(pool, snap.gen, c)
        redis_cluster.finish_move(slot, dst, src)
        assert await store.commit(pool, snap.gen, c) == int(snap.gen) + 1
        assert await store.beliefs(pool, ["direct"]) == {"direct": b"\x01z"}

        # the worker's processor meets the same half-migrated slot: it waits, nothing is dead-lettered
        redis_cluster.move_slot(slot, dst, keys_first=2)
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(Settings(system="elo"), store, ex)

            async def worker_batch() -> Any:  # as the worker runs it: retried until Redis takes it
                return await proc.start(_msgs([pool], 10, 4), safe=True)

            task = asyncio.ensure_future(worker_batch())
            await asyncio.sleep(1.0)
            assert not task.done()
            redis_cluster.finish_move(slot, src, dst)
            res = await asyncio.wait_for(task, 30)
        assert res.dead == [] and {o.event_id.split("-")[1] for o in res.outputs} <= {"m10", "m11", "m12", "m13"}
        assert len(res.outputs) > 0
        await store.close()

        other = next(i for i in range(3) if i != redis_cluster.slot_owner(slot))
        plain = RedisStore(aioredis.Redis(port=redis_cluster.ports[other]), prefix)
        with pytest.raises(StoreUnavailable, match="MovedError"):
            await plain.snapshot(pool, ["p0"], [])
        await plain.close()

    asyncio.run(run())


def test_redis_unreachable_is_store_unavailable() -> None:
    """Nothing listens: every store call raises StoreUnavailable (the worker's retry), and asking
    whether it is a cluster gives up after its wait with the same error. The port is held bound
    without listening for the whole test: it refuses every connection, and no other process can
    start listening on it meanwhile (a port only known to be free when it was picked can be)."""
    with socket.socket() as held:
        held.bind(("127.0.0.1", 0))
        url = f"redis://127.0.0.1:{held.getsockname()[1]}"
        with pytest.raises(StoreUnavailable, match="MMR_REDIS_CLUSTER"):
            is_cluster(url, wait_s=0.3)

        async def run() -> None:
            store = RedisStore.from_url(url, cluster=False, socket_connect_timeout=0.5)
            with pytest.raises(StoreUnavailable):
                await store.snapshot("p", ["a"], ["e"])
            with pytest.raises(StoreUnavailable):
                await store.commit("p", "0", Commit(beliefs={"a": b"x"}, scores={"a": 1.0}))
            with pytest.raises(StoreUnavailable):
                await store.meta("p")
            with pytest.raises(StoreUnavailable):
                await store.ping()
            await store.close()

        asyncio.run(run())


def test_rounds_assembled_from_results_on_a_cluster(redis_cluster: LocalCluster, redis_url: str) -> None:
    """Round results of several pools, saved as pending (a transaction in the pool's slot), then
    completed by a second processor (a worker restarted: it reads them back), and a round left
    open and expired by it: the same ratings, rows and dead letters as on a single Redis."""
    def ev(offset: int, pool: str, body: dict[str, Any]) -> Message:
        return Message("r", 0, offset, orjson.dumps({"pool": pool, **body}))

    pools = ["r:1", "r{2}", "plain"]
    first, second = [], []
    for k, pool in enumerate(pools):
        for j in range(3):
            first.append(ev(10 * k + j, pool, {"type": "round_result", "event_id": f"{pool}-res{j}", "round_id": "R:1",
                                               "time": 5, "player": f"pl:{j}", "rank": j + 1}))
        first.append(ev(10 * k + 5, pool, {"type": "round_result", "event_id": f"{pool}-open", "round_id": "open:1",
                                           "time": 5, "player": "early", "rank": 1}))
        second.append(ev(100 + 10 * k, pool, {"type": "round_completed", "event_id": f"{pool}-done",
                                              "round_id": "R:1", "time": 6, "participants": 3}))
        second.append(ev(101 + 10 * k, pool, {"type": "round_result", "event_id": f"{pool}-open2",
                                              "round_id": "open:1", "time": 6, "player": "later", "rank": 2}))

    async def run(url: str, prefix: str) -> tuple[list[Any], list[Any], list[dict[str, Any]]]:
        store = RedisStore.from_url(url, prefix=prefix)
        with ThreadPoolExecutor(1) as ex:
            a = await Processor(Settings(system="elo-mmr"), store, ex).process(first)
            proc = Processor(Settings(system="elo-mmr"), store, ex)
            b = await proc.process(second)
            expired = await proc.expire(now_ms=2**62)
        rows = await export_rows(store)
        done = [await store.round_state(p, ["open:1", "R:1"]) for p in pools]
        await store.close()
        assert all(d == ({"open:1", "R:1"}, {}) for d in done), done
        outs = sorted((o.pool, o.player, o.rating, o.version) for o in [*a.outputs, *b.outputs])
        return outs, sorted((d.pool, d.reason) for d in [*a.dead, *b.dead, *expired]), rows

    async def both() -> None:
        prefix = f"r{uuid.uuid4().hex[:6]}"
        got = await run(redis_cluster.url, prefix)
        assert got == await run(redis_url, prefix)
        assert len(got[0]) == 9 and len(got[1]) == 3 and len(got[2]) == 9

    asyncio.run(both())
