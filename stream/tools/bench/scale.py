"""``mmr bench service --only scale`` (docs/scaling.md): N workers in one consumer group, results/s,
and the checks that every pool stayed on one worker (whole partitions per worker, computed as Kafka's
default partitioner does: ``partition_of``) and that its final state equals ``mmr replay --embedded``.
"""

from __future__ import annotations

import asyncio
import itertools
import json
import os
import random
import subprocess
import time
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

import click
from aiokafka.partitioner import murmur2

from stream.service.config import Settings
from stream.tools.bench.cpu_meter import CpuMeter
from stream.tools.bench.worker import (
    _delete_prefix,
    _done,
    _free_port,
    _measure,
    _pids,
    _produce,
    _Worker,
    compare_with_embedded,
    message,
    suffixed,
)


def partition_of(pool: str, partitions: int) -> int:
    """The partition of a record keyed by ``pool`` under Kafka's default partitioner (the Java
    client's and aiokafka's): murmur2 of the key bytes, sign bit cleared, modulo the count."""
    return (murmur2(pool.encode()) & 0x7FFFFFFF) % partitions


def per_partition(pools: Iterable[str], partitions: int) -> list[int]:
    """How many of ``pools`` (names, repeats counted) are keyed onto each partition."""
    counts = Counter(partition_of(pool, partitions) for pool in pools)
    return [counts[p] for p in range(partitions)]


def one_pool_per_partition(partitions: int, prefix: str = "warm") -> list[str]:
    """Pool names, one keyed onto each partition (warm-up traffic that reaches every worker)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        found.setdefault(partition_of(f"{prefix}{i}", partitions), f"{prefix}{i}")
        i += 1
    return [found[p] for p in range(partitions)]


def write_workload(path: Path, pools: Sequence[str], messages: int, matches: int, players: int,
                   seed: int = 5) -> list[tuple[bytes, bytes]]:
    """``messages`` ``match_batch`` messages of ``matches`` each (neutral: drawn without a side advantage),
    the pools taken in turn; written to ``path`` as a JSONL input of ``mmr replay`` and returned as
    (key, value) keyed by pool."""
    rng = random.Random(seed)
    items = []
    for k in range(messages):
        pool = pools[k % len(pools)]
        items.append((pool.encode(), message("match_batch", pool, k, matches, players, rng)))
    path.write_bytes(b"".join(value + b"\n" for _, value in items))
    return items


def split_by_partitions(per_partition: Sequence[int], handled: Sequence[int]) -> list[list[int]] | None:
    """Partitions per worker such that each worker handled exactly its partitions' messages, each
    partition given to one worker; None when no such split exists (a pool's messages were split
    between workers, or handled twice). ``per_partition``: messages published to each partition;
    ``handled``: messages each worker handled. A depth-first search, heaviest partitions first."""
    order = sorted(range(len(per_partition)), key=lambda p: -per_partition[p])
    left = list(handled)
    owned: list[list[int]] = [[] for _ in handled]

    def place(i: int) -> bool:
        if i == len(order):
            return all(x == 0 for x in left)
        p = order[i]
        tried: set[int] = set()
        for w in range(len(left)):
            if left[w] >= per_partition[p] and left[w] not in tried:  # equal remainders: one try is enough
                tried.add(left[w])
                left[w] -= per_partition[p]
                owned[w].append(p)
                if place(i + 1):
                    return True
                left[w] += per_partition[p]
                owned[w].pop()
        return False

    return [sorted(ps) for ps in owned] if place(0) else None


def _scale_run(s: Settings, tmp: Path, tansu: subprocess.Popen[bytes] | None, n: int, pools_file: Path,
               items: list[tuple[bytes, bytes]], published: list[int], workload: Path, system: str,
               pools: list[str], worker_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """One run of the scale phase: ``n`` workers in one group on ``s``'s (fresh) topics."""
    from stream.service.topics import ensure_topics

    asyncio.run(ensure_topics(s))
    workers: list[_Worker] = []
    try:
        for i in range(n):
            workers.append(_Worker(s, _free_port(), tmp / f"{s.app_id}-{i}.log", pools_file, worker_env))
        for w in workers:
            w.ready()
        # warm-up, one match per partition, until every worker has handled some: all joined the group and
        # got partitions (each of n <= partitions workers gets at least one), first-use costs paid
        warm_pools = one_pool_per_partition(s.partitions)
        deadline = time.monotonic() + 300
        ports = [w.port for w in workers]
        for k in itertools.count():
            warm = [(p.encode(), message("match", p, k, 1, 100, random.Random(k))) for p in warm_pools]
            asyncio.run(_produce(s, s.topic_matches, warm))
            time.sleep(2.0)
            done = [_done([port]) for port in ports]
            if sum(done) >= (k + 1) * len(warm) and min(done) > 0:
                break
            if time.monotonic() > deadline:
                raise click.ClickException(f"the group of {n} did not settle: messages done per worker {done}")
        meter = CpuMeter({**{f"worker{i}": w.proc.pid for i, w in enumerate(workers)}, **_pids(s, None, tansu)})
        meter.start()
        seconds = _measure(ports, s, s.topic_matches, items, 1800)
        cpu = meter.stop()
        handled = [int(_done([port]) - was) for port, was in zip(ports, done, strict=True)]
        split = split_by_partitions(published, handled)
        players, differing = compare_with_embedded(workload, s, system, pools, None)
        return {"workers": n, "seconds": round(seconds, 2), "results_per_s": round(1000 * len(items) / seconds),
                "messages_per_worker": handled, "cpu_cores": {k: round(v, 2) for k, v in cpu.items()},
                "load_average": [round(x, 2) for x in os.getloadavg()],
                # one split of whole partitions explaining each worker's count (partitions carrying equal
                # counts are interchangeable in it, so it need not be the broker's assignment)
                "whole_partitions_per_worker": split, "every_pool_on_one_worker": split is not None,
                "players": players, "players_differing": differing}
    finally:
        for w in workers:
            w.stop()
        asyncio.run(_delete_prefix(s))


def scale_phase(s: Settings, tmp: Path, tansu: subprocess.Popen[bytes] | None, *, workers: tuple[int, ...],
                repeats: int, pools: int, partitions: int, messages: int, system: str, players: int,
                worker_env: Mapping[str, str] | None = None) -> dict[str, Any]:
    """Results/s of 1, 2, 3 ... workers in one group (the scale phase),
    the worker counts alternated within each repetition, each run on fresh topics and keys."""
    names = [f"s{i:02d}" for i in range(pools)]
    workload = tmp / "scale.jsonl"
    items = write_workload(workload, names, messages, 1000, players)
    published = per_partition((key.decode() for key, _ in items), partitions)  # messages to each partition
    pools_file = tmp / "scale-pools.json"
    pools_file.write_text(json.dumps({"pools": {p: {"system": system} for p in names}}))
    out: dict[str, Any] = {"pools": pools, "partitions": partitions, "system": system, "messages": messages,
                           "results": 1000 * messages, "pools_per_partition": per_partition(names, partitions),
                           "runs": []}
    for r in range(repeats):
        for n in workers:
            tag = f"x{n}r{r}"
            run_s = suffixed(s, tag, app_id=f"{s.app_id}-{tag}", key_prefix=f"{s.key_prefix}-{tag}",
                             partitions=partitions)
            click.echo(f"scale: {n} worker(s), {partitions} partitions, {pools} pools (repetition {r + 1}) ...",
                       err=True)
            run = _scale_run(run_s, tmp, tansu, n, pools_file, items, published, workload, system, names, worker_env)
            click.echo(f"  {run['results_per_s']:,} results/s in {run['seconds']} s, per worker "
                       f"{run['messages_per_worker']}, load {run['load_average']}", err=True)
            out["runs"].append(run)
    return out
