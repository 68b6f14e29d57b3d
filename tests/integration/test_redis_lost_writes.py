"""Redis faults under a running ``mmr worker`` (real processes: the broker, a private ``redis-server``):

* Redis SIGKILLed **without persistence** and started again empty: every commit the worker had
  acknowledged is gone. The worker stays alive, publishes no rating from the empty state, answers
  ``/readyz`` 503 naming the lost writes, and shows them in ``mmr_redis_lost_writes_partitions``;
  ``mmr rebuild`` then rates the input topics into Redis again, the worker goes on by itself, and the
  state equals the embedded replay bit for bit, with no two different ratings of one version on the
  ratings topic and no version going back.
* A Redis Cluster master SIGKILLed and started again empty (no persistence, no replica promoted), under
  a worker or while none runs: one holding pools but not the marks' key, so the marks, intact, cover every
  acknowledged offset. The pools' own marks (their commit counters) show the loss: the same report
  (``mmr_redis_lost_writes_pools``), nothing published from the lost state, and after ``mmr rebuild`` the
  state equals the embedded replay.
* Redis down for ~12 s under a stream of commits (AOF ``always``): the documented metrics move
  (``mmr_store_unavailable``, ``mmr_store_retries_total``, ``mmr_fetch_paused_partitions``), ``/readyz``
  says why, ``mmr_inflight_messages`` stays within ``MMR_MAX_INFLIGHT`` plus a take batch and stops
  growing while fetching is paused, and afterwards the state equals the embedded replay.
"""

from __future__ import annotations

import asyncio
import shutil
import subprocess
import time
import uuid
from collections import defaultdict
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
from cluster_utils import LocalCluster
from cluster_utils import available as cluster_available
from local_servers import AOF_ALWAYS, RedisServer
from outage_stream import MATCH_POOLS, ROUND_POOLS, SETTINGS, events, history, messages, outage_pools, replayed
from redis.crc import key_slot
from service_utils import (
    MMR,
    ROOT,
    BackgroundPublish,
    WorkerProcess,
    announced_port,
    env_for,
    export_state,
    http_get,
    make_settings,
    metric,
    publish,
    read_json_topic,
    sample,
    wait_caught_up,
    wait_for,
)

from stream.service.config import Settings
from stream.service.export import export_rows
from stream.service.processor import Processor
from stream.state.keys import KeySpace
from stream.state.marks import marks_key
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(300)]

#: no AOF and no RDB snapshots: a killed server starts again empty
NO_PERSISTENCE = ("--appendonly", "no", "--save", "")
#: an event as published (outage_stream.events)
Event = dict[str, Any]
#: the exported rows of a state, by (pool, player)
State = dict[tuple[str, str], dict[str, Any]]


@pytest.fixture
def forgetful_redis(tmp_path: Path) -> Iterator[RedisServer]:
    """A ``redis-server`` of this test alone with no persistence: killed and started again, it is empty."""
    with RedisServer(tmp_path / "redis", *NO_PERSISTENCE) as server:
        yield server


def _split_history(kafka_bootstrap: str, server: RedisServer, tmp_path: Path, rounds: int, seed: int,
                   cut: int) -> tuple[list[Event], list[Event], State, Settings]:
    """The events published before Redis loses its writes and after, the embedded replay of all of
    them (what the state must end as), and the settings of a worker on ``server``."""
    evs = [ev for batch in events(rounds, 30, seed=seed) for ev in batch]
    return evs[:cut], evs[cut:], replayed([evs], tmp_path), make_settings(kafka_bootstrap, server.url,
                                                                          pools=outage_pools())


def _durable_worker(s: Settings, log: Path) -> WorkerProcess:
    """A worker whose commits count as durable after 0.5 s (how soon it may trust Redis to keep them)."""
    worker = WorkerProcess(s, log)
    worker.extra_env = {"MMR_REDIS_DURABLE_AFTER_S": "0.5"}
    return worker


def _rates_nothing_over_the_lost_writes(s: Settings, port: int, worker: WorkerProcess, published_before: int) -> None:
    """Redis came back empty: the worker reports the lost writes, answers /readyz 503 saying so, stays
    alive, and neither publishes a rating nor writes to Redis (given the time to do it, were it wrong)."""
    wait_for("the lost writes reported", lambda: metric(port, "mmr_redis_lost_writes_partitions") > 0, worker)
    status, body = http_get(port, "/readyz")
    assert status == 503 and "lost acknowledged writes" in body["reason"], body
    time.sleep(3.0)  # a worker rating over the empty state would have published by now
    assert worker.alive(), worker.log_tail()
    assert len(read_json_topic(s, s.topic_ratings)) == published_before  # nothing from the lost state
    assert export_state(s) == {}  # nothing written into the restarted server


def _rebuild(s: Settings) -> str:
    """``mmr rebuild`` of the pools' state from the input topics; what it said on stderr."""
    done = subprocess.run([str(MMR), "rebuild", "--no-progress"], env=env_for(s), cwd=ROOT, capture_output=True,
                          text=True, timeout=180)
    assert done.returncode == 0, done.stderr
    return done.stderr


def _rebuild_and_resume(s: Settings, port: int, worker: WorkerProcess, gauge: str,
                        ) -> tuple[dict[tuple[str, str], dict[str, Any]], list[dict[str, Any]]]:
    """``mmr rebuild`` while the worker waits, then the worker ready again with ``gauge`` (the lost
    partitions' or pools') and ``mmr_store_unavailable`` at 0: the exported state and every rating published."""
    said = _rebuild(s)
    assert "rebuilt" in said and "0 dead letters" in said, said
    wait_caught_up(s, worker)
    wait_for("readiness again", lambda: http_get(port, "/readyz")[0] == 200, worker)
    assert metric(port, gauge) == 0 and metric(port, "mmr_store_unavailable") == 0
    return export_state(s), read_json_topic(s, s.topic_ratings)


def _versions_consistent(ratings: list[dict[str, Any]]) -> None:
    """Every (pool, player, version) on the ratings topic carries one set of numbers, and each player's
    versions never go back (a player's messages are on one partition, read in order)."""
    seen: dict[tuple[str, str, int], tuple[float, float]] = {}
    last: dict[tuple[str, str], int] = defaultdict(int)
    for r in ratings:
        key = (r["pool"], r["player"], r["version"])
        numbers = (r["mu"], r["sigma"])
        assert seen.setdefault(key, numbers) == numbers, f"two ratings of version {key}: {seen[key]} and {numbers}"
        assert r["version"] >= last[key[:2]], f"version of {key[:2]} went back from {last[key[:2]]} to {r['version']}"
        last[key[:2]] = r["version"]


def test_redis_restarted_empty_is_not_rated_over_and_rebuild_restores_it(kafka_bootstrap: str,
                                                                         forgetful_redis: RedisServer,
                                                                         tmp_path: Path) -> None:
    server = forgetful_redis
    before, after, want, s = _split_history(kafka_bootstrap, server, tmp_path, 20, seed=5, cut=300)
    worker = _durable_worker(s, tmp_path / "worker.log")
    worker.start()
    try:
        port = announced_port(worker)
        publish([history([before], tmp_path, "before.jsonl")], s, batch_size=10)
        wait_caught_up(s, worker)  # every offset acknowledged and committed: its commits are in Redis
        assert export_state(s) == replayed([before], tmp_path)
        published_before = len(read_json_topic(s, s.topic_ratings))

        server.kill()
        server.start()  # empty
        publish([history([after], tmp_path, "after.jsonl")], s, batch_size=10)
        _rates_nothing_over_the_lost_writes(s, port, worker, published_before)
        log = worker.log_tail(200_000)
        assert log.count("[ERROR] Redis lost acknowledged writes") == 1, log  # one ERROR line, not one per poll
        assert metric(port, "mmr_redis_lost_writes_partitions") > 0 and metric(port, "mmr_store_unavailable") == 1

        state, ratings = _rebuild_and_resume(s, port, worker, "mmr_redis_lost_writes_partitions")
    finally:
        worker.stop()
    assert state == want  # every float bit for bit
    _versions_consistent(ratings)
    latest = {}
    for r in ratings:
        latest[(r["pool"], r["player"])] = r
    assert {k: (v["mu"], v["sigma"]) for k, v in latest.items()} == {k: (v["mu"], v["sigma"]) for k, v in want.items()}
    assert read_json_topic(s, s.topic_dead) == []


def test_redis_restarted_empty_with_the_worker_is_not_rated_over(kafka_bootstrap: str, forgetful_redis: RedisServer,
                                                                tmp_path: Path) -> None:
    """The worker stopped, Redis restarted empty, a new worker started: it takes its partitions at the group's
    committed offsets, finds Redis without the marks of what was acknowledged, and rates nothing until
    ``mmr rebuild``; then the state equals the embedded replay."""
    server = forgetful_redis
    before, after, want, s = _split_history(kafka_bootstrap, server, tmp_path, 10, seed=6, cut=150)
    first = _durable_worker(s, tmp_path / "worker1.log")
    first.start()
    try:
        announced_port(first)
        publish([history([before], tmp_path, "before.jsonl")], s, batch_size=10)
        wait_caught_up(s, first)
    finally:
        first.stop()
    published_before = len(read_json_topic(s, s.topic_ratings))
    server.kill()
    server.start()  # empty
    worker = WorkerProcess(s, tmp_path / "worker2.log")
    worker.start()
    try:
        port = announced_port(worker)
        publish([history([after], tmp_path, "after.jsonl")], s, batch_size=10)
        _rates_nothing_over_the_lost_writes(s, port, worker, published_before)

        _rebuild(s)
        wait_caught_up(s, worker)
        wait_for("readiness again", lambda: http_get(port, "/readyz")[0] == 200, worker)
        state = export_state(s)
        ratings = read_json_topic(s, s.topic_ratings)
    finally:
        worker.stop()
    assert state == want  # every float bit for bit
    _versions_consistent(ratings)
    assert read_json_topic(s, s.topic_dead) == []


@pytest.mark.xdist_group("heavy")
@pytest.mark.parametrize("with_the_worker", [False, True], ids=["under-the-worker", "with-the-worker"])
def test_cluster_master_restarted_empty_is_not_rated_over(kafka_bootstrap: str, tmp_path: Path,
                                                          with_the_worker: bool) -> None:
    """A master of a Redis Cluster without replicas, holding pools but not the marks' key, SIGKILLed and
    started again empty (its AOF deleted, its cluster config kept: it serves its slots again, without their
    keys), under a running worker or while none runs (a new worker then takes the partitions at their
    committed offsets). The partition marks, on another master, cover every acknowledged offset; the pools'
    counters do not: no rating of those pools is published from the empty master, and after ``mmr rebuild``
    the state equals the embedded replay."""
    if not cluster_available():
        pytest.skip("redis-server / redis-cli not on PATH")
    with LocalCluster(tmp_path / "cluster", masters=3, timeout=60) as cluster:
        evs = [ev for batch in events(20, 30, seed=7) for ev in batch]
        before, after, want = evs[:300], evs[300:], replayed([evs], tmp_path)
        # REDIS_URL names node 0 (`mmr rebuild`, `mmr export` connect through it): node 1 restarts empty, with
        # pools and the set of pools (listed again by the rebuild), the marks on another master
        victim = 1
        while True:
            s = make_settings(kafka_bootstrap, cluster.url, pools=outage_pools())
            keys = KeySpace(s.key_prefix)
            marks_node = cluster.slot_owner(key_slot(marks_key(s.key_prefix).encode()))
            if marks_node != victim and cluster.slot_owner(key_slot(keys.pools_key().encode())) == victim:
                break
        owner = {p: cluster.slot_owner(key_slot(keys.key(p, "gen").encode())) for p in MATCH_POOLS + ROUND_POOLS}
        lost_pools = {p for p, i in owner.items() if i == victim}
        assert lost_pools and len(lost_pools) < len(owner)
        worker = _durable_worker(s, tmp_path / "worker.log")
        worker.start()
        try:
            port = announced_port(worker)
            publish([history([before], tmp_path, "before.jsonl")], s, batch_size=10)
            wait_caught_up(s, worker)  # every offset acknowledged: the pools' counters with them
            assert export_state(s) == replayed([before], tmp_path)
            published_before = {orjson.dumps(r) for r in read_json_topic(s, s.topic_ratings)}
            if with_the_worker:  # the counters it acknowledged reach the marks (its housekeeping tick), then it stops
                fields = {f"pool:{p}".encode() for p in lost_pools}
                wait_for("the pools' counters in the marks",
                         lambda: fields <= set(cluster.node(marks_node).hkeys(marks_key(s.key_prefix))), worker)
                worker.stop()

            cluster.kill(victim)
            shutil.rmtree(cluster.dirs[victim] / "appendonlydir")
            cluster.restart(victim)  # empty, serving its slots
            assert cluster.node(victim).dbsize() == 0
            if with_the_worker:
                worker = _durable_worker(s, tmp_path / "worker2.log")
                worker.start()
                port = announced_port(worker)
            publish([history([after], tmp_path, "after.jsonl")], s, batch_size=10)
            wait_for("the lost writes reported", lambda: metric(port, "mmr_redis_lost_writes_pools") > 0, worker)
            status, body = http_get(port, "/readyz")
            assert status == 503 and "lost acknowledged writes" in body["reason"], body
            assert "Redis holds none of its commits" in body["reason"], body
            time.sleep(3.0)  # a worker rating over the empty pools would have published by now
            assert worker.alive(), worker.log_tail()
            # the pools of the other masters may be rated until the worker meets the restarted one; of its own, only
            # ratings published before may be published again (a batch taken back re-publishes what it rated)
            again = [r for r in read_json_topic(s, s.topic_ratings) if r["pool"] in lost_pools]
            assert all(orjson.dumps(r) in published_before for r in again), again
            assert cluster.node(victim).dbsize() == 0  # nothing written into the restarted master
            assert metric(port, "mmr_redis_lost_writes_pools") == len(lost_pools)
            assert metric(port, "mmr_redis_lost_writes_partitions") == 0  # the partition marks are intact
            log = worker.log_tail(200_000)
            assert log.count("[ERROR] Redis lost acknowledged writes") == 1, log

            state, ratings = _rebuild_and_resume(s, port, worker, "mmr_redis_lost_writes_pools")
        finally:
            worker.stop()
    assert state == want  # every float bit for bit
    _versions_consistent(ratings)
    assert read_json_topic(s, s.topic_dead) == []


DOWN_S = 12.0


def test_redis_outage_under_commits_is_reported_paused_and_bounded(kafka_bootstrap: str, tmp_path: Path) -> None:
    server = RedisServer(tmp_path / "redis", *AOF_ALWAYS)
    server.start()
    evs = [ev for batch in events(40, 60, seed=9) for ev in batch]  # 2,400 events
    want = replayed([evs], tmp_path)
    s = make_settings(kafka_bootstrap, server.url, pools=outage_pools())
    worker = WorkerProcess(s, tmp_path / "worker.log")
    worker.extra_env = {"MMR_TAKE_MAX": "100"}
    worker.start()
    samples: list[tuple[float, float, float, float]] = []  # (unavailable, retries, paused, inflight)
    try:
        port = announced_port(worker)
        stream = BackgroundPublish([history([evs], tmp_path)], s, batch_size=1, rate=120.0).start()  # ~20 s
        wait_for("ratings flowing", lambda: metric(port, "mmr_messages_done_total") >= 200, worker)
        server.kill()
        down_at = time.monotonic()
        reasons = set()
        while time.monotonic() - down_at < DOWN_S:
            samples.append((metric(port, "mmr_store_unavailable"), metric(port, "mmr_store_retries_total"),
                            metric(port, "mmr_fetch_paused_partitions"), metric(port, "mmr_inflight_messages")))
            status, body = http_get(port, "/readyz")
            assert status == 503, body
            reasons.add(body.get("reason") or body.get("redis"))
            time.sleep(0.5)
        assert worker.alive(), worker.log_tail()
        server.start()
        stream.join()
        wait_caught_up(s, worker)
        wait_for("readiness again", lambda: http_get(port, "/readyz")[0] == 200, worker)
        after = (metric(port, "mmr_store_unavailable"), metric(port, "mmr_fetch_paused_partitions"))
        state = export_state(s)
    finally:
        worker.stop()
        server.stop()
    assert any(u == 1 for u, _, _, _ in samples), samples
    assert samples[-1][1] >= 2, samples  # attempts counted
    assert any(p == s.partitions * len(s.input_topics()) for _, _, p, _ in samples), samples  # every partition paused
    bound = s.max_inflight + 100  # MMR_MAX_INFLIGHT plus the one take batch admitted early
    assert max(i for *_, i in samples) <= bound, samples
    paused = [i for u, _, p, i in samples if u == 1 and p > 0]
    assert len(paused) >= 8 and len(set(paused[4:])) == 1, samples  # nothing more taken once paused
    assert reasons, reasons
    assert after == (0, 0)
    assert state == want  # every float bit for bit
    assert read_json_topic(s, s.topic_dead) == []


def test_a_step_retrying_its_commit_reports_the_outage(private_redis: RedisServer, tmp_path: Path) -> None:
    """Redis dies between a step's read and its commit: the step retries the commit by itself (with its ops in
    hand), and each attempt is counted and reported like a failed batch (the gauge, the counter, the fetch
    pause's callback); once Redis is back the batch commits and the gauge drops to 0."""
    batches = events(6, 20, seed=4)
    want = replayed(batches, tmp_path)

    async def run() -> tuple[list[dict[str, Any]], list[bool], list[tuple[float, float, list[bool]]], float]:
        store = RedisStore.from_url(private_redis.url, prefix=f"rs{uuid.uuid4().hex[:6]}", cluster=False,
                                    socket_connect_timeout=1)
        calls: list[bool] = []
        during: list[tuple[float, float, list[bool]]] = []  # 2 s into the outage: gauge, counter, callbacks
        with ThreadPoolExecutor(1) as ex:
            proc = Processor(SETTINGS, store, ex)

            async def told(down: bool) -> None:
                calls.append(down)

            proc.on_store_down = told
            commit = store.commit
            killed = False

            async def commit_after_a_kill(*args: Any, **kwargs: Any) -> int:
                nonlocal killed
                if not killed:  # the first commit of batch 3 meets a dead server
                    killed = True
                    private_redis.kill()
                    loop = asyncio.get_running_loop()
                    loop.call_later(2.0, lambda: during.append((sample(proc.metrics, "mmr_store_unavailable"),
                                                                sample(proc.metrics, "mmr_store_retries_total"),
                                                                list(calls))))
                    loop.call_later(3.0, private_redis.start)
                return await commit(*args, **kwargs)

            for b, msgs in enumerate(messages(batches)):
                if b == 3:
                    store.commit = commit_after_a_kill  # type: ignore[method-assign]
                assert (await proc.start(msgs, safe=True)).dead == []
            retries = sample(proc.metrics, "mmr_store_retries_total")
            assert sample(proc.metrics, "mmr_store_unavailable") == 0
        rows = await export_rows(store)
        await store.close()
        return rows, calls, during, retries

    rows, calls, during, retries = asyncio.run(run())
    assert len(during) == 1 and during[0][0] == 1 and during[0][1] >= 2, during  # while Redis is down
    assert during[0][2] == [True], during  # the fetch paused during the outage, not after it
    assert calls[-1] is False and retries >= during[0][1]  # resumed once the batch committed
    assert {(r["pool"], r["player"]): r for r in rows} == want


def test_rebuild_with_wipe_replaces_what_the_prefix_held(kafka_bootstrap: str, redis_url: str,
                                                         tmp_path: Path) -> None:
    """``mmr rebuild --wipe`` (in process): every key of the prefix deleted first -- a state that is not a
    prefix of the history, here a foreign key and a pool rated with other events -- and the input topics
    rated again: the export equals the embedded replay, the marks cover every partition read, and the keys
    of another prefix are untouched."""
    import redis

    from stream.service.rebuild import run_rebuild

    evs = [ev for batch in events(5, 30, seed=8) for ev in batch]
    s = make_settings(kafka_bootstrap, redis_url, pools=outage_pools())
    publish([history([evs], tmp_path)], s, batch_size=7)
    other = redis.Redis.from_url(redis_url)
    try:
        other.set(f"{s.key_prefix}:{{m0}}:p:ghost", b"not a belief")
        other.sadd(f"{s.key_prefix}:pools", "m0")
        other.set(f"{s.key_prefix}x:keep", b"another prefix")
        done = asyncio.run(run_rebuild(s, wipe_first=True))
        assert done.deleted_keys == 2 and done.dead_letters == 0 and done.halted == []
        assert export_state(s) == replayed([evs], tmp_path)  # every float bit for bit
        marks = asyncio.run(_marks(redis_url, s.key_prefix))
        assert marks == {tp: last for tp, (_, last) in done.read.items()} and marks
        assert other.get(f"{s.key_prefix}x:keep") == b"another prefix"
    finally:
        other.delete(f"{s.key_prefix}x:keep")
        other.close()


async def _marks(url: str, prefix: str) -> dict[str, int]:
    from stream.state.marks import read_marks

    store = RedisStore.from_url(url, prefix=prefix, cluster=False)
    try:
        return await read_marks(store.r, prefix)
    finally:
        await store.close()
