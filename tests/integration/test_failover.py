"""Failover loses nothing: on a Redis Cluster with replicas a batch counts as committed only once a
replica holds it (``WAIT`` on the commit's connection), so a master SIGKILLed mid-stream takes no
acked batch with it; its replica is promoted and the worker carries on by itself.

Each test starts its own cluster of three masters and three replicas (the ``replicated`` fixture of
tests/conftest.py: ``cluster-node-timeout`` 1 s, so a dead master's replica is promoted within a few
seconds).
"""

from __future__ import annotations

import asyncio
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from cluster_utils import LocalCluster
from outage_stream import MATCH_POOLS, ROUND_POOLS, SETTINGS, events, messages, replayed
from redis.crc import key_slot

from stream.service.config import Settings
from stream.service.export import export_rows
from stream.service.processor import Message, Processor
from stream.state.redis_client import StoreUnavailable
from stream.state.redis_store import Commit, RedisStore

#: in one process under pytest-xdist with the other modules of group "heavy" (tests/conftest.py)
pytestmark = [pytest.mark.integration, pytest.mark.timeout(240), pytest.mark.xdist_group("heavy")]

#: every pool rated by elo (the outage stream's SETTINGS take only its own pools)
ANY_POOL = Settings(system="elo")


def wait_calls(cluster: LocalCluster, i: int) -> int:
    """How many WAIT commands node ``i`` has run."""
    stats = cluster.node(i).info("commandstats")
    return int(stats.get("cmdstat_wait", {}).get("calls", 0))


def _matches(pool: str, start: int, n: int) -> list[Message]:
    return [Message("in", 0, k, orjson.dumps({"type": "match", "event_id": f"{pool}-{k}", "pool": pool, "time": k,
                                              "a": f"p{k % 3}", "b": f"q{k % 4}", "score": (k % 3) / 2}))
            for k in range(start, start + n)]


def test_a_commit_returns_only_once_the_replica_holds_it(replicated: LocalCluster) -> None:
    """Commits run WAIT on the pool's master, and the replica holds each commit when it returns.
    With the replica stopped (SIGSTOP) the commit is not confirmed: StoreUnavailable, and the pool's
    next read waits too (the unconfirmed commit must not be acked by a retry that finds it applied);
    a worker's batch waits, nothing dead-lettered, and goes through once the replica runs again."""
    pool = "wait:pool"
    prefix = f"w{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        store = RedisStore.from_url(replicated.url, prefix=prefix, wait_timeout_ms=300)
        gen_key = store.key(pool, "gen")
        master = replicated.slot_owner(key_slot(gen_key.encode()))
        replica = replicated.replicas_of(master)[0]
        before = wait_calls(replicated, master)
        with ThreadPoolExecutor(1) as ex:
            assert (await Processor(ANY_POOL, store, ex).process(_matches(pool, 0, 5))).dead == []
        assert wait_calls(replicated, master) > before

        on_replica = replicated.node(replica)
        on_replica.execute_command("READONLY")
        for k in range(5):  # right after each commit returns, the replica has it
            snap = await store.snapshot(pool, ["direct"], [])
            gen = await store.commit(pool, snap.gen, Commit(beliefs={"direct": b"\x01%d" % k}, scores={"direct": k},
                                                            event_ids=[f"direct-{k}"]))
            assert int(on_replica.get(gen_key) or 0) == gen

        snap = await store.snapshot(pool, ["direct"], [])
        replicated.pause(replica)
        try:
            with pytest.raises(StoreUnavailable, match="replicas"):
                await store.commit(pool, snap.gen, Commit(beliefs={"direct": b"\x01z"}, scores={"direct": 9.0},
                                                          event_ids=["late"]))
            with pytest.raises(StoreUnavailable, match="replicas"):
                await store.snapshot(pool, ["direct"], ["late"])
            with ThreadPoolExecutor(1) as ex:
                proc = Processor(ANY_POOL, store, ex)

                async def worker_batch() -> Any:  # as the worker runs it: retried until Redis takes it
                    return await proc.start(_matches(pool, 5, 4), safe=True)

                task = asyncio.ensure_future(worker_batch())
                await asyncio.sleep(1.5)
                assert not task.done()
                replicated.resume(replica)
                res = await asyncio.wait_for(task, 60)
        finally:
            replicated.resume(replica)
        assert res.dead == [] and {o.event_id for o in res.outputs} <= {f"{pool}-{k}" for k in range(5, 9)}
        after = await store.snapshot(pool, ["direct"], ["late"])
        assert after.seen == {"late"} and after.beliefs == {"direct": b"\x01z"}
        await store.close()

    asyncio.run(run())


def test_without_replicas_nothing_waits_unless_replicas_are_required(redis_cluster: LocalCluster) -> None:
    """Masters without replicas: the default asks for none (no WAIT is run); MMR_REDIS_MIN_REPLICAS=1
    cannot be met there, so the commit is refused as StoreUnavailable (retried, never acked)."""
    pool = "no:replica"
    prefix = f"n{uuid.uuid4().hex[:6]}"

    async def run() -> None:
        store = RedisStore.from_url(redis_cluster.url, prefix=prefix)
        before = [wait_calls(redis_cluster, i) for i in range(3)]
        with ThreadPoolExecutor(1) as ex:
            assert (await Processor(ANY_POOL, store, ex).process(_matches(pool, 0, 5))).dead == []
        assert [wait_calls(redis_cluster, i) for i in range(3)] == before
        strict = RedisStore.from_url(redis_cluster.url, prefix=prefix, min_replicas=1, wait_timeout_ms=100)
        snap = await strict.snapshot(pool, [], [])
        with pytest.raises(StoreUnavailable, match="0 of the 1 replicas"):
            await strict.commit(pool, snap.gen, Commit(beliefs={"x": b"\x01"}, scores={"x": 1.0}, event_ids=["x"]))
        await strict.close()
        await store.close()

    asyncio.run(run())


def _kill_soon(cluster: LocalCluster, i: int) -> None:
    time.sleep(0.02)
    cluster.kill(i)


def test_a_master_killed_mid_stream_loses_nothing(replicated: LocalCluster, tmp_path: Path) -> None:
    """Many pools on every master, streamed in batches; one master SIGKILLed while a batch is being
    committed. The batches on its slots fail (StoreUnavailable) and are retried until its replica is
    promoted; at the end the exported state equals the embedded replay bit for bit and nothing was
    dead-lettered."""
    batches = events(40, 30, seed=7)
    prefix = f"f{uuid.uuid4().hex[:6]}"
    want = replayed(batches, tmp_path)

    async def run() -> tuple[list[dict[str, Any]], list[Any], int]:
        store = RedisStore.from_url(replicated.url, prefix=prefix, wait_timeout_ms=500)
        owners = {replicated.slot_owner(key_slot(store.key(p, "gen").encode())) for p in MATCH_POOLS + ROUND_POOLS}
        assert len(owners) == 3  # every master holds pools
        victim = replicated.slot_owner(key_slot(store.key("m0", "gen").encode()))
        dead: list[Any] = []
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(SETTINGS, store, ex)
            for b, msgs in enumerate(messages(batches)):
                killing = None
                if b == 15:  # SIGKILL while this batch is under way
                    killing = asyncio.get_running_loop().run_in_executor(None, _kill_soon, replicated, victim)
                res = await proc.start(msgs, safe=True)
                if killing is not None:
                    await killing
                dead.extend(res.dead)
        rows = await export_rows(store)
        await store.close()
        return rows, dead, victim

    rows, dead, victim = asyncio.run(run())
    assert victim not in replicated.running()
    assert dead == []
    got = {(r["pool"], r["player"]): r for r in rows}
    assert got == want  # every float bit for bit
    assert {p for p, _ in got} == set(MATCH_POOLS + ROUND_POOLS)
