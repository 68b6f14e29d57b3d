"""Driving ``mmr worker`` subprocesses for the service benchmarks: free ports, the worker's
Prometheus metrics (its own ``mmr_messages_done`` is the clock), producing load, comparing the final
state in Redis with ``mmr replay --embedded``, clearing a run's Redis keys and naming the processes
whose CPU a run reports.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import os
import random
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any
from urllib.parse import urlparse

import click
import orjson
import redis

from stream.engine.embedded import EmbeddedPipeline
from stream.events.inputs import read_records
from stream.service.config import Settings
from stream.service.export import export_rows
from stream.state.redis_store import RedisStore


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_port(port: int, timeout: float = 20) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise click.ClickException(f"nothing listens on {port}")


def _families(port: int) -> Iterable[Any]:
    """The worker's /metrics, parsed (prometheus_client's metric families)."""
    from prometheus_client.parser import text_string_to_metric_families

    body = urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=60).read().decode()
    return text_string_to_metric_families(body)


def _metric(port: int, name: str, **labels: str) -> float:
    """The sum of the samples of ``name`` (those with ``labels``, if given)."""
    total = 0.0
    for fam in _families(port):
        for sample in fam.samples:
            if sample.name == name and all(sample.labels.get(k) == v for k, v in labels.items()):
                total += sample.value
    return total


def _stage_totals(port: int) -> dict[str, dict[str, float]]:
    """Per ``mmr_stage_seconds`` stage (and ``mmr_batch_messages`` as "messages"): its sum, count and
    cumulative bucket counts (keyed by the bucket's upper bound, as text)."""
    out: dict[str, dict[str, float]] = {}
    for fam in _families(port):
        if fam.name not in ("mmr_stage_seconds", "mmr_batch_messages"):
            continue
        for sample in fam.samples:
            key = sample.labels.get("stage", "messages")
            field = sample.name.rsplit("_", 1)[1]  # sum, count, bucket (created: ignored)
            if field == "bucket":
                out.setdefault(key, {})[sample.labels["le"]] = sample.value
            elif field in ("sum", "count"):
                out.setdefault(key, {})[field] = sample.value
    return out


def _stage_summary(before: dict[str, dict[str, float]], after: dict[str, dict[str, float]]) -> dict[str, list[float]]:
    """Per batch between two ``_stage_totals``: [mean, p99] of each stage in ms (the p99 as the
    upper bound of its histogram bucket), and of "messages" as counts."""
    out = {}
    for key, now in after.items():
        was = before.get(key, {})
        n = now.get("count", 0.0) - was.get("count", 0.0)
        if n <= 0:
            continue
        scale = 1.0 if key == "messages" else 1000.0
        mean = (now.get("sum", 0.0) - was.get("sum", 0.0)) / n
        bounds = sorted((float(le), c - was.get(le, 0.0)) for le, c in now.items() if le not in ("sum", "count"))
        p99 = next((le for le, c in bounds if c >= 0.99 * n), math.inf)
        out[key] = [round(scale * mean, 1), round(scale * p99, 1)]
    return out


#: seconds between two reads of the worker's /metrics while waiting (each read costs the worker's
#: event loop time the bench would count as the worker's)
DONE_POLL_S = 0.5
DONE = "mmr_messages_done_total"


def _done(ports: Sequence[int]) -> float:
    """Messages the workers on ``ports`` committed to Redis *and* published, in all."""
    return sum(_metric(port, DONE) for port in ports)


def _wait_done(ports: Sequence[int], target: float, timeout: float) -> float:
    """When the workers' ``mmr_messages_done_total`` reached ``target`` in all, on this process's
    ``perf_counter`` clock, by the last worker's own stamp (``mmr_messages_done_timestamp_seconds``).
    Why: a scrape costs the worker's event loop time the bench would count as the worker's, so it
    polls only every ``DONE_POLL_S``, and the stamp is exact, not up to a poll late."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if _done(ports) >= target:
            stamp = max(_metric(port, "mmr_messages_done_timestamp_seconds") for port in ports)
            return time.perf_counter() - max(0.0, time.time() - stamp)
        time.sleep(DONE_POLL_S)
    raise click.ClickException(f"{DONE} stuck at {_done(ports)} < {target}")


def _measure(ports: Sequence[int], s: Settings, topic: str, items: list[tuple[bytes, bytes]],
             timeout: float) -> float:
    """Produce ``items`` (in a thread) while polling ``mmr_messages_done``: the seconds from the start
    of producing to the last message committed and published (end to end) by the workers on ``ports``."""
    import threading

    target = _done(ports) + len(items)
    b0, m0 = (sum(_metric(p, f"mmr_batch_messages_{x}") for p in ports) for x in ("count", "sum"))
    produced: list[float] = []
    th = threading.Thread(target=lambda: produced.append(asyncio.run(_produce(s, topic, items))), daemon=True)
    t0 = time.perf_counter()
    th.start()
    seconds = _wait_done(ports, target, timeout) - t0
    th.join()
    batches, msgs = (sum(_metric(p, f"mmr_batch_messages_{x}") for p in ports) for x in ("count", "sum"))
    click.echo(f"  produced in {produced[0]:.2f} s, handled in {seconds:.2f} s, {batches - b0:.0f} batches of "
               f"{(msgs - m0) / max(batches - b0, 1):,.0f} messages on average", err=True)
    return seconds


async def _produce(s: Settings, topic: str, items: list[tuple[bytes, bytes]]) -> float:
    from aiokafka import AIOKafkaProducer

    p = AIOKafkaProducer(bootstrap_servers=s.kafka_bootstrap, linger_ms=5, enable_idempotence=False,
                         max_request_size=32 * 1024 * 1024, max_batch_size=1024 * 1024, **s.aiokafka_kwargs())
    await p.start()
    t0 = time.perf_counter()
    try:
        futs = [await p.send(topic, v, key=k) for k, v in items]
        await asyncio.gather(*futs)
    finally:
        await p.stop()
    return time.perf_counter() - t0


async def _delete_prefix(s: Settings) -> int:
    """Remove everything this run wrote to Redis (its keys all start with its own prefix)."""
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix)
    n = 0
    try:
        keys = [k async for k in store.r.scan_iter(match=f"{s.key_prefix}:*", count=10_000)]
        for i in range(0, len(keys), 5_000):
            n += await store.r.unlink(*keys[i:i + 5_000])
    finally:
        await store.close()
    return n


def _match(i: int, pool: str, n_players: int, rng: random.Random, neutral: bool = True) -> dict[str, Any]:
    """A random match between two of ``n_players``: neutral unless told, since its result is drawn
    with no side advantage (and a match that is not neutral is rated one at a time, docs/advantage.md)."""
    a = rng.randrange(n_players)
    b = (a + 1 + rng.randrange(n_players - 1)) % n_players
    m: dict[str, Any] = {"event_id": f"{pool}-{i}", "time": 1_700_000_000_000 + i, "a": f"p{a}", "b": f"p{b}",
                         "score": rng.choice((0.0, 1.0))}
    if neutral:
        m["neutral"] = True
    return m


def suffixed(s: Settings, tag: str, **changes: Any) -> Settings:
    """``s`` with topics of its own (each name followed by ``-tag``) and ``changes``."""
    return replace(s, topic_matches=f"{s.topic_matches}-{tag}", topic_rounds=f"{s.topic_rounds}-{tag}",
                   topic_results=f"{s.topic_results}-{tag}", topic_ratings=f"{s.topic_ratings}-{tag}",
                   topic_dead=f"{s.topic_dead}-{tag}", **changes)


def message(kind: str, pool: str, k: int, size: int, players: int, rng: random.Random,
            neutral: bool = True) -> bytes:
    """Message ``k`` of ``pool``: a ``match``, or a ``match_batch``/``match_columns`` of ``size`` matches
    among ``players`` (neutral unless told)."""
    ms = [_match(k * size + i, pool, players, rng, neutral) for i in range(size)]
    if kind == "match":
        return orjson.dumps({"type": kind, "pool": pool, **ms[0]})
    if kind == "match_batch":
        return orjson.dumps({"type": kind, "pool": pool, "matches": ms})
    return orjson.dumps({"type": kind, "pool": pool, **{c: [m[c] for m in ms] for c in ms[0]}})


def load(kind: str, pool: str, n: int, players: int, rng: random.Random,
         neutral: bool = True) -> list[tuple[bytes, bytes]]:
    """``n`` messages of ``kind`` of ``pool`` (``message``; batches of 1,000), keyed by the pool."""
    size = 1 if kind == "match" else 1000
    return [(pool.encode(), message(kind, pool, k, size, players, rng, neutral)) for k in range(n)]


def worker_environment(s: Settings, port: int, pools: Path, extra: Mapping[str, str] | None = None) -> dict[str, str]:
    """The bench's worker's environment: this process's, the bench's topics, keys and port, then ``extra``
    (``mmr bench service --worker-env``: a setting for the worker alone, the replays beside it without it)."""
    return {**os.environ, "MMR_POOLS_FILE": str(pools), "KAFKA_BOOTSTRAP_SERVERS": s.kafka_bootstrap,
            "REDIS_URL": s.redis_url, "MMR_APP_ID": s.app_id, "MMR_TOPIC_MATCHES": s.topic_matches,
            "MMR_TOPIC_ROUNDS": s.topic_rounds, "MMR_TOPIC_ROUND_RESULTS": s.topic_results,
            "MMR_TOPIC_RATINGS": s.topic_ratings, "MMR_TOPIC_DEAD_LETTERS": s.topic_dead,
            "MMR_KEY_PREFIX": s.key_prefix, "MMR_HTTP_PORT": str(port), "MMR_PARTITIONS": str(s.partitions),
            "MMR_LOG_LEVEL": "warning", **(extra or {})}


class _Worker:
    def __init__(self, s: Settings, port: int, log: Path, pools: Path, extra: Mapping[str, str] | None = None) -> None:
        env = worker_environment(s, port, pools, extra)
        mmr = Path(sys.executable).parent / "mmr"
        self.proc = subprocess.Popen([str(mmr), "worker"], env=env, stdout=log.open("wb"), stderr=subprocess.STDOUT)
        self.port = port

    def ready(self) -> None:
        """Wait until its HTTP port answers (a first start compiles the numba kernels: minutes)."""
        _wait_port(self.port, 600)

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(20)
        except subprocess.TimeoutExpired:
            self.proc.kill()


def _pids(s: Settings, worker: _Worker | None, tansu: subprocess.Popen[bytes] | None) -> dict[str, int]:
    """The processes that share this machine during the latency run (Redis only when local)."""
    pids = {"load_generator": os.getpid()}
    if worker is not None:
        pids["worker"] = worker.proc.pid
    if tansu is not None:
        pids["broker"] = tansu.pid
    if urlparse(s.redis_url).hostname in ("127.0.0.1", "localhost", "::1"):
        with contextlib.suppress(Exception), redis.Redis.from_url(s.redis_url, **s.redis_kwargs()) as client:
            pids["redis"] = int(client.info("server")["process_id"])  # only a figure of the report: may fail
    return pids


def compare_with_embedded(path: str | Path, s: Settings, system: str, pools: Sequence[str],
                          pool: str | None) -> tuple[int, int]:
    """(players, players whose final rating row in Redis differs from ``mmr replay --embedded`` on
    ``path``) over ``pools`` (``pool``: the pool every event is read into; None: their own)."""
    pipe = EmbeddedPipeline(system, {}, pool_systems={p: (system, {}) for p in pools})
    pipe.run(read_records(path, pool))
    return _count_differing({(r["pool"], r["player"]): r for r in pipe.final_ratings()},
                            {(r["pool"], r["player"]): r for r in _stored_rows(s, pools)})


def differing_rows(embedded_out: Path, s: Settings, pool: str) -> tuple[int, int]:
    """(players, players whose final rating row differs) between an ``mmr replay --embedded --out``
    file and what Redis holds for ``pool`` (the pool names themselves aside: the two runs name it
    differently)."""
    def key(row: dict[str, Any]) -> tuple[str, tuple[Any, ...]]:
        return row["player"], (row["rating"], row["mu"], row["sigma"], row["rounds"])

    with open(embedded_out, "rb") as fh:
        want = dict(key(orjson.loads(line)) for line in fh if line.strip())
    return _count_differing(want, dict(key(r) for r in _stored_rows(s, [pool])))


def _stored_rows(s: Settings, pools: Sequence[str]) -> list[dict[str, Any]]:
    """The rating rows Redis holds for ``pools``, as ``mmr export`` writes them."""

    async def stored() -> list[dict[str, Any]]:
        store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, **s.redis_kwargs())
        try:
            return await export_rows(store, list(pools))
        finally:
            await store.close()

    return asyncio.run(stored())


def _count_differing(want: dict[Any, Any], got: dict[Any, Any]) -> tuple[int, int]:
    """(players wanted, players whose row is missing on either side or differs)."""
    return len(want), sum(1 for p in want.keys() | got.keys() if want.get(p) != got.get(p))
