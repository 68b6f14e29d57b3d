"""Redis losing its last second loses no event: a private ``redis-server`` with ``appendfsync everysec``
is SIGKILLed under load and started again from an AOF that lacks its last second, twice -- once while
the worker keeps running, once together with the worker -- and the final state equals the embedded
replay bit for bit, nothing dead-lettered, every event id recorded exactly once. Half of the round pools
report their rounds player by player, assembled across batches (and across the rewinds).

How the last second is lost: a SIGKILL alone loses nothing Redis had written to its AOF (the kernel
still holds the file's pages), only what ``everysec`` left unsynced when the *host* fails. So the test
does what a host crash does to the file: it cuts the AOF back to the size it had one second before the
kill (sampled every 20 ms), i.e. to what the last fsync of ``everysec`` may have left on disk. It
checks that commits the worker already had were lost (the pools' commit counters went back).
"""

from __future__ import annotations

import asyncio
import os
import shutil
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import orjson
import pytest
import redis
from cluster_utils import LocalCluster
from cluster_utils import available as cluster_available
from local_servers import RedisServer
from outage_stream import MATCH_POOLS, ROUND_POOLS, SETTINGS, events, outage_pools, replayed
from service_utils import (
    BackgroundPublish,
    WorkerProcess,
    export_state,
    make_settings,
    publish,
    read_json_topic,
    read_topic,
    wait_caught_up,
)

from stream.service.processor import Message, Processor
from stream.state.fence import ServerFence, StoreRestarted, Superseded
from stream.state.id_index import DIGEST
from stream.state.redis_store import RedisStore

pytestmark = [pytest.mark.integration, pytest.mark.timeout(240)]

LOST_S = 1.0  # how far back the AOF is cut at each kill (everysec: the last fsync was at most ~1 s ago)


class EverysecRedis(RedisServer):
    """A redis-server of this test alone (AOF, ``appendfsync everysec``) whose AOF size is sampled, so that
    a kill can leave the file as a host crash would: without its last ``LOST_S`` seconds. ``stop`` kills it."""

    def __init__(self, data: Path) -> None:
        super().__init__(data, "--appendonly", "yes", "--appendfsync", "everysec", "--auto-aof-rewrite-percentage", "0")
        self.samples: list[tuple[float, Path, int]] = []
        self._stop = threading.Event()
        self._sampler: threading.Thread | None = None
        self._copy = data.parent / f"{data.name}-copy"  # the files as the last ``crash`` left them

    def start(self, timeout: float = 20.0) -> None:
        super().start(timeout)
        self.samples = []
        self._stop.clear()
        self._sampler = threading.Thread(target=self._sample, daemon=True)
        self._sampler.start()

    def _incr_file(self) -> Path | None:
        manifest = self.data / "appendonlydir" / "appendonly.aof.manifest"
        if not manifest.exists():
            return None
        incr = [line.split()[1] for line in manifest.read_text().splitlines() if line.endswith("type i")]
        return self.data / "appendonlydir" / incr[-1] if incr else None

    def _sample(self) -> None:
        while not self._stop.is_set():
            f = self._incr_file()
            if f is not None and f.exists():
                self.samples.append((time.monotonic(), f, f.stat().st_size))
            time.sleep(0.02)

    def unsynced(self) -> int:
        """Bytes the AOF grew by in the last ``LOST_S`` seconds (sampled): what a crash now would cut."""
        now = time.monotonic()
        samples = list(self.samples)
        if not samples:
            return 0
        f = samples[-1][1]
        older = [n for t, p, n in samples if t <= now - LOST_S and p == f]
        return samples[-1][2] - (older[-1] if older else 0)

    def crash(self) -> int:
        """SIGKILL, then cut the AOF back to its size ``LOST_S`` ago; returns the bytes cut."""
        assert self.proc is not None and self._sampler is not None
        self.kill()
        killed = time.monotonic()
        self._stop.set()
        self._sampler.join()
        f = self._incr_file()
        assert f is not None
        before = [(t, p, n) for t, p, n in self.samples if t <= killed - LOST_S and p == f]
        keep = before[-1][2] if before else 0
        cut = f.stat().st_size - keep
        os.truncate(f, keep)
        shutil.rmtree(self._copy, ignore_errors=True)
        shutil.copytree(self.data, self._copy)  # as the restarted server starts from it (``commits_on_disk``)
        return cut

    def commits_on_disk(self, prefix: str) -> int:
        """The pools' commit counters as the AOF left by the last ``crash`` holds them: read by a server of
        its own on a copy of the files taken then, so that the worker, which may reach the restarted server
        at once and rate the lost batches again, does not change the count."""
        server = RedisServer(self._copy, "--appendonly", "yes", binary=self.binary)
        try:
            server.start()  # it answers once it has loaded the AOF
            return _commits(server.url, prefix)
        finally:
            server.kill()
            shutil.rmtree(self._copy, ignore_errors=True)

    def stop(self) -> None:
        self._stop.set()
        self.kill()


@pytest.fixture
def everysec_redis(tmp_path: Path) -> Iterator[EverysecRedis]:
    with EverysecRedis(tmp_path / "redis") as server:
        yield server


def _split_rounds(batches: list[list[dict[str, Any]]], pools: set[str]) -> list[list[dict[str, Any]]]:
    """The whole rounds of ``pools`` reported player by player instead: half of a round's results in its
    batch, the other half and its completion in the next, so that rounds are assembled across batches
    (and across a rewind)."""
    out: list[list[dict[str, Any]]] = [[] for _ in batches]
    for i, batch in enumerate(batches):
        for ev in batch:
            if ev["type"] != "round" or ev["pool"] not in pools:
                out[i].append(ev)
                continue
            common = {"pool": ev["pool"], "round_id": ev["round_id"], "time": ev["time"]}
            results = [{"type": "round_result", "event_id": f"{ev['event_id']}-{s['player']}", **common,
                        "player": s["player"], "rank": s["rank"]} for s in ev["standings"]]
            done = {"type": "round_completed", "event_id": f"{ev['event_id']}-done", **common,
                    "participants": len(results)}
            half = len(results) // 2
            out[i] += results[:half]
            out[min(i + 1, len(batches) - 1)] += [*results[half:], done]
    return out


def _commits(url: str, prefix: str) -> int:
    """The pools' commit counters, summed: how many commits Redis holds."""
    r = redis.Redis.from_url(url)
    try:
        return sum(int(r.get(k) or 0) for k in r.scan_iter(match=f"{prefix}:*:gen", count=1000))
    finally:
        r.close()


def _recorded_ids(url: str, prefix: str) -> dict[str, list[bytes]]:
    r = redis.Redis.from_url(url)
    try:
        out: dict[str, list[bytes]] = {}
        for k in r.scan_iter(match=f"{prefix}:*:ids", count=1000):
            log = r.get(k) or b""
            assert isinstance(log, bytes)  # no decode_responses
            out[k.decode()] = [log[i:i + DIGEST] for i in range(0, len(log), DIGEST)]
        return out
    finally:
        r.close()


def _wait_committing(url: str, prefix: str, timeout: float = 60.0) -> None:
    """Until a commit lands within ``LOST_S / 4``: the worker is committing right now (it may stall on a
    loaded machine, and a crash while it stalls loses nothing, which would prove nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        t0, n0 = time.monotonic(), _commits(url, prefix)
        while _commits(url, prefix) <= n0 and time.monotonic() - t0 < LOST_S / 4:
            time.sleep(0.02)
        if _commits(url, prefix) > n0:
            return
        assert time.monotonic() < deadline, "the worker stopped committing"


def _wait_losable(server: EverysecRedis, prefix: str, timeout: float = 60.0) -> None:
    """Until the worker is committing (``_wait_committing``) and the AOF holds writes of the last ``LOST_S``:
    a crash now cuts acknowledged commits (one that cut nothing would prove nothing)."""
    deadline = time.monotonic() + timeout
    while True:
        _wait_committing(server.url, prefix, timeout)
        if server.unsynced() > 0:
            return
        assert time.monotonic() < deadline, "the AOF stopped growing"


def _wait_commits(url: str, prefix: str, more_than: int, timeout: float = 60.0) -> int:
    deadline = time.monotonic() + timeout
    while (n := _commits(url, prefix)) <= more_than:
        assert time.monotonic() < deadline, f"no commits beyond {more_than}"
        time.sleep(0.05)
    return n


def test_redis_losing_its_last_second_twice_loses_no_event(kafka_bootstrap: str, everysec_redis: EverysecRedis,
                                                            tmp_path: Path) -> None:
    batches = _split_rounds(events(60, 50, seed=23), set(ROUND_POOLS[:4]))
    want = replayed(batches, tmp_path)
    # steps of at most 6 players: a take's rounds of a pool (5 players each) are mostly one step each, so
    # the restarts also meet a batch between two of its steps' commits
    s = make_settings(kafka_bootstrap, everysec_redis.url, pools=outage_pools(),
                      take_max=64, max_step_players=6)
    warmup, history = tmp_path / "warmup.jsonl", tmp_path / "history.jsonl"
    warmup.write_bytes(b"".join(orjson.dumps(ev) + b"\n" for b in batches[:2] for ev in b))
    history.write_bytes(b"".join(orjson.dumps(ev) + b"\n" for b in batches[2:] for ev in b))
    log = tmp_path / "worker.log"
    worker = WorkerProcess(s, log).start()
    publish([warmup], s)
    lost: list[int] = []
    cut: list[int] = []
    try:
        start = _wait_commits(everysec_redis.url, s.key_prefix, 0)  # the worker runs
        producer = BackgroundPublish([history], s, batch_size=10, rate=300.0).start()  # ~10 s of streaming
        # 1. Redis alone: the worker keeps running and must notice the restart by itself
        _wait_commits(everysec_redis.url, s.key_prefix, start + 30)
        time.sleep(LOST_S + 0.5)
        _wait_losable(everysec_redis, s.key_prefix)
        before = _commits(everysec_redis.url, s.key_prefix)
        cut.append(everysec_redis.crash())
        everysec_redis.start()  # the worker meets it down, then restarted: it must notice by itself
        after = everysec_redis.commits_on_disk(s.key_prefix)  # not the live count: the worker rates again
        lost.append(before - after)
        # 2. Redis and the worker together: the new worker resumes from the offsets committed to Kafka
        _wait_commits(everysec_redis.url, s.key_prefix, after + 30)
        time.sleep(LOST_S + 0.5)
        assert worker.alive(), worker.log_tail()
        _wait_losable(everysec_redis, s.key_prefix)
        before = _commits(everysec_redis.url, s.key_prefix)
        worker.kill()
        cut.append(everysec_redis.crash())
        everysec_redis.start()
        lost.append(before - _commits(everysec_redis.url, s.key_prefix))
        worker = WorkerProcess(s, log).start()
        producer.join()
        wait_caught_up(s, worker, timeout=120)
        print(f"AOF bytes cut {cut}; commits lost {lost}")
        assert all(n > 0 for n in lost), (lost, cut)  # each crash took commits the worker already had
        assert read_topic(s, s.topic_dead) == []
        state = export_state(s)
        assert {p for p, _ in state} == set(MATCH_POOLS + ROUND_POOLS)
        assert state == want, _diff_hint(state, want)  # every event applied, in order, bit for bit
        _check_ratings(read_json_topic(s, s.topic_ratings), state)
        ids = _recorded_ids(everysec_redis.url, s.key_prefix)
        n_events = sum(len(b) for b in batches)
        assert sum(len(v) for v in ids.values()) == n_events  # each event applied once: ...
        assert all(len(set(v)) == len(v) for v in ids.values())  # ... none twice
        assert "Redis restarted: rating" in log.read_text()  # the running worker noticed the restart by itself
    finally:
        worker.stop()


def test_a_restarted_server_is_refused_until_the_owner_accepts_it(everysec_redis: EverysecRedis) -> None:
    """The fence (stream/state/fence.py) trips on the first connection to the restarted server, before any
    command of the caller reaches it, and keeps refusing until ``accept``."""
    async def run() -> None:
        fence = ServerFence()
        trips: list[int] = []
        fence.on_trip.append(lambda: trips.append(1))
        store = RedisStore.from_url(everysec_redis.url, prefix="fence", cluster=False, fence=fence)
        await store.r.set("k", "before")
        assert await store.ping()
        everysec_redis.stop()
        everysec_redis.start()
        errors = []
        for _ in range(3):  # the pooled connection to the old server fails first (closed by the kill)
            with pytest.raises(redis.ConnectionError) as err:
                await store.r.set("k", "after")
            errors.append(err.type)
        assert errors[-2:] == [StoreRestarted, StoreRestarted]
        assert fence.tripped and trips == [1]
        plain = redis.Redis.from_url(everysec_redis.url)
        assert plain.get("k") != b"after"  # nothing was sent to the restarted server
        fence.accept()
        await store.r.set("k", "after")
        assert plain.get("k") == b"after" and not fence.tripped
        plain.close()
        await store.close()

    asyncio.run(run())


def _matches(pool: str, start: int, n: int) -> list[Message]:
    return [Message("in", 0, k, orjson.dumps({"type": "match", "event_id": f"{pool}-{k}", "pool": pool, "time": k,
                                              "a": f"p{k % 3}", "b": f"q{k % 4}", "score": (k % 3) / 2}))
            for k in range(start, start + n)]


@pytest.mark.parametrize("settle", [False, True], ids=["fence-alone", "settled-by-the-rewind"])
def test_a_step_begun_before_a_restart_never_writes_after_it(everysec_redis: EverysecRedis, settle: bool) -> None:
    """A pool step whose commit met Redis down retries by itself (stream.service.processor); Redis comes back
    restarted, the fence trips and is accepted (what the worker's rewind does once it took the batch
    back). That step must not commit its batch to the restarted server: the rewind rates the batch again
    after the batches before it, and a commit of it now would land ahead of them (out of order). With
    ``settle`` the rewind's own order: the processor's steps are cancelled and waited for before the
    fence accepts; without, the step runs on after ``accept`` (its cancellation never reached it) and
    the fence's epoch alone must refuse it."""
    pool = "m0"

    async def run() -> None:
        fence = ServerFence()
        store = RedisStore.from_url(everysec_redis.url, prefix="stale", cluster=False, fence=fence)
        plain = redis.Redis.from_url(everysec_redis.url)
        with ThreadPoolExecutor(max_workers=1) as ex:
            proc = Processor(SETTINGS, store, ex)
            assert (await proc.process(_matches(pool, 0, 5))).dead == []
            entered, release = asyncio.Event(), asyncio.Event()
            commit = store.commit

            async def held_commit(*args: Any, **kwargs: Any) -> int:
                entered.set()
                await release.wait()
                return await commit(*args, **kwargs)

            store.commit = held_commit  # type: ignore[method-assign]
            batch = asyncio.create_task(proc.process(_matches(pool, 5, 5)))
            await asyncio.wait_for(entered.wait(), 30)
            everysec_redis.stop()  # its commit meets Redis down: the step retries it by itself
            release.set()
            await asyncio.sleep(0.4)
            assert not batch.done()
            everysec_redis.start()  # a new run_id (and what its AOF held; a postponed write may be missing)
            plain.close()
            plain = redis.Redis.from_url(everysec_redis.url)
            gen = plain.get(store.key(pool, "gen"))
            for _ in range(3):  # the pooled connection to the old server fails first, then the fence trips
                with pytest.raises(redis.ConnectionError):
                    await store.ping()
            assert fence.tripped
            # the batch's step is still running, unless its own retry met the tripped fence first
            # (a race with the step's back-off): then the fence ended it with Superseded already
            settled = await proc.settle() if settle else 0
            fence.accept()
            await asyncio.wait({batch}, timeout=60)  # returns once it is done
            assert batch.done()
            if settled:
                assert settled == 1 and batch.cancelled()
            else:
                with pytest.raises(Superseded):
                    batch.result()
            assert plain.get(store.key(pool, "gen")) == gen  # nothing of the batch reached the restarted server
            proc.reset()
            store.commit = commit  # type: ignore[method-assign]
            assert (await proc.process(_matches(pool, 5, 5))).dead == []  # a batch begun after it commits
            assert int(plain.get(store.key(pool, "gen")) or 0) > int(gen or 0)
            plain.close()
        await store.close()

    asyncio.run(run())


def _check_ratings(outputs: list[dict[str, Any]], final: dict[tuple[str, str], dict[str, Any]]) -> None:
    """Per player: a version always carries the same numbers (what a lost commit published is what its
    replay publishes again), and the highest version, which consumers keep, is the final state, as is the
    last message (what compaction keeps)."""
    by_player: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for o in outputs:
        by_player.setdefault((o["pool"], o["player"]), []).append(o)
    assert set(by_player) == set(final)
    for key, msgs in by_player.items():
        seen: dict[int, tuple[float, float, float]] = {}
        for m in msgs:
            assert seen.setdefault(m["version"], (m["rating"], m["mu"], m["sigma"])) == (
                m["rating"], m["mu"], m["sigma"]), (key, m["version"])
        f = final[key]
        for m in (max(msgs, key=lambda m: m["version"]), msgs[-1]):
            assert (m["rating"], m["mu"], m["sigma"], m["version"]) == (f["rating"], f["mu"], f["sigma"],
                                                                        f["rounds"]), key


def test_a_server_that_refuses_info_is_used_without_the_fence(everysec_redis: EverysecRedis,
                                                              caplog: pytest.LogCaptureFixture) -> None:
    """A user whose ACL denies INFO (as some managed services do) still gets a working store: the fence
    cannot tell restarts apart there, says so once, and never refuses the server."""
    plain = redis.Redis.from_url(everysec_redis.url)
    plain.execute_command("ACL", "SETUSER", "noinfo", "on", ">pw", "~*", "&*", "+@all", "-info")
    plain.close()

    async def run() -> None:
        fence = ServerFence()
        store = RedisStore.from_url(everysec_redis.url, prefix="blind", cluster=False, fence=fence,
                                    username="noinfo", password="pw")
        await store.r.set("k", "1")
        assert await store.r.get("k") == b"1" and not fence.tripped
        await store.close()

    asyncio.run(run())
    assert any("refused INFO" in r.getMessage() for r in caplog.records)


def test_a_restarted_cluster_node_is_refused_until_the_owner_accepts_it(tmp_path: Path) -> None:
    """On a Redis Cluster the fence checks each node at its address: the master of a pool's slot restarted
    in place trips it, and nothing reaches that node until ``accept``."""
    if not cluster_available():
        pytest.skip("redis-server / redis-cli not on PATH")

    async def run(cluster: LocalCluster) -> None:
        fence = ServerFence()
        store = RedisStore.from_url(cluster.url, prefix="cf", cluster=True, fence=fence)
        key = store.key("p", "gen")
        await store.r.set(key, "before")
        owner = cluster.ports.index(store.r.get_node_from_key(key).port)
        cluster.kill(owner)
        cluster.restart(owner)
        errors = []
        deadline = time.monotonic() + 30
        while not fence.tripped and time.monotonic() < deadline:
            with pytest.raises(redis.RedisError) as err:
                await store.r.set(key, "after")
            errors.append(err.type)
            await asyncio.sleep(0.1)
        assert fence.tripped and errors[-1] is StoreRestarted, errors
        await asyncio.sleep(cluster.node_timeout_ms / 1000 * 2)  # the others may mark it failing meanwhile
        cluster.wait_ok()
        assert cluster.node(owner).get(key) != b"after"  # nothing was sent to the restarted node
        fence.accept()
        while True:
            try:
                await store.r.set(key, "after")
                break
            except redis.ConnectionError:
                raise
            except redis.RedisError:  # the cluster settling after the restart (CLUSTERDOWN)
                assert time.monotonic() < deadline + 30
                await asyncio.sleep(0.2)
        assert cluster.node(owner).get(key) == b"after" and not fence.tripped
        await store.close()

    with LocalCluster(tmp_path / "cluster", masters=3) as cluster:
        asyncio.run(run(cluster))


def _diff_hint(got: dict[Any, Any], want: dict[Any, Any]) -> str:  # pragma: no cover - failure message only
    bad = [k for k in want if got.get(k) != want[k]]
    return f"{len(bad)} rows differ, e.g. {bad[:3]}"
