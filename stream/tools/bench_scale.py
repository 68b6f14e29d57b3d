"""The pure parts of ``mmr bench service --only scale``: pools on partitions, the workload, the checks.

The phase (run by ``stream.tools.bench_service``) starts N workers in one consumer group on
topics of ``--partitions`` partitions and publishes ``match_batch`` messages spread over
``--pools`` pools, keyed by pool as ``mmr replay --broker`` keys them. What it checks besides
results/s:

* the group's assignment (DescribeGroups) gives every partition of the matches topic to exactly
  one member, and is the same before and after the measured run (no rebalance in between);
* each worker handled exactly the messages of the pools whose partition it was assigned, the
  partition computed here as Kafka's default partitioner does (``partition_of``): so every
  pool's events were handled by one worker, and the partitioner here is the producer's;
* the final Redis state of every pool equals ``mmr replay --embedded`` on the same events,
  bit for bit.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import orjson
from aiokafka.partitioner import murmur2


def partition_of(pool: str, partitions: int) -> int:
    """The partition of a record keyed by ``pool`` under Kafka's default partitioner (the Java
    client's and aiokafka's): murmur2 of the key bytes, sign bit cleared, modulo the count."""
    return (murmur2(pool.encode()) & 0x7FFFFFFF) % partitions


def pools_by_partition(pools: Iterable[str], partitions: int) -> dict[int, list[str]]:
    """Every partition (also the empty ones) and the pools keyed onto it."""
    out: dict[int, list[str]] = {p: [] for p in range(partitions)}
    for pool in pools:
        out[partition_of(pool, partitions)].append(pool)
    return out


def pools_moved(pools: Iterable[str], old: int, new: int) -> list[str]:
    """The pools whose partition changes when the topic goes from ``old`` to ``new`` partitions."""
    return [p for p in pools if partition_of(p, old) != partition_of(p, new)]


def one_pool_per_partition(partitions: int, prefix: str = "warm") -> list[str]:
    """Pool names, one keyed onto each partition (warm-up traffic that reaches every worker)."""
    found: dict[int, str] = {}
    i = 0
    while len(found) < partitions:
        found.setdefault(partition_of(f"{prefix}{i}", partitions), f"{prefix}{i}")
        i += 1
    return [found[p] for p in range(partitions)]


def scale_pools(n: int) -> list[str]:
    return [f"s{i:02d}" for i in range(n)]


def write_workload(path: Path, pools: Sequence[str], messages: int, matches: int, players: int,
                   seed: int = 5) -> list[tuple[bytes, bytes]]:
    """``messages`` ``match_batch`` messages of ``matches`` each, the pools taken in turn; written to
    ``path`` as a JSONL input of ``mmr replay`` and returned as (key, value) keyed by pool."""
    rng = random.Random(seed)
    items: list[tuple[bytes, bytes]] = []
    with path.open("wb") as f:
        for k in range(messages):
            pool = pools[k % len(pools)]
            ms = []
            for i in range(matches):
                a = rng.randrange(players)
                b = (a + 1 + rng.randrange(players - 1)) % players
                ms.append({"event_id": f"{pool}-{k}-{i}", "time": 1_700_000_000_000 + k * matches + i,
                           "a": f"p{a}", "b": f"p{b}", "score": rng.choice((0.0, 1.0))})
            value = orjson.dumps({"type": "match_batch", "pool": pool, "matches": ms})
            f.write(value + b"\n")
            items.append((pool.encode(), value))
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


def differing_players(path: Path, system: str, pools: Sequence[str], redis_url: str, prefix: str,
                      **redis_kwargs: Any) -> tuple[int, int]:
    """(players, players whose final row in Redis differs from ``mmr replay --embedded`` on ``path``)."""
    import asyncio

    from stream.engine.embedded import EmbeddedPipeline
    from stream.events.inputs import read_records
    from stream.service.export import export_rows
    from stream.state.redis_store import RedisStore

    pipe = EmbeddedPipeline(system, {}, pool_systems={p: (system, {}) for p in pools})
    pipe.run(read_records(path))
    want = {(r["pool"], r["player"]): r for r in pipe.final_ratings()}

    async def stored() -> list[dict[str, Any]]:
        store = RedisStore.from_url(redis_url, prefix=prefix, **redis_kwargs)
        try:
            return await export_rows(store, list(pools))
        finally:
            await store.close()

    got = {(r["pool"], r["player"]): r for r in asyncio.run(stored())}
    return len(want), sum(1 for k in want.keys() | got.keys() if want.get(k) != got.get(k))
