"""The worker's processor alone: real Redis, no broker (``python -m stream.tools.bench_processor``).

``Processor.process`` on pre-built input messages in take batches, plus the serialisation
the publisher does per rating; prints results/s. Shows the pipeline's own cost without
Faust and Tansu (see BENCHMARKS.md, "Service"). Keys go under a fresh prefix, deleted at the
end. Never asserted in tests.

    python -m stream.tools.bench_processor single elo 20000 4096   # kind system n take_batch
    python -m stream.tools.bench_processor batch elo 50 5          # n match_batch messages of 1,000
"""

from __future__ import annotations

import asyncio
import os
import random
import sys
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import orjson

from stream.service.config import PoolConfig, Settings
from stream.service.metrics import Metrics
from stream.service.processor import Message, Processor, rating_key
from stream.state.redis_store import RedisStore


def _match(i: int, n: int, rng: random.Random) -> dict[str, Any]:
    a = rng.randrange(n)
    b = (a + 1 + rng.randrange(n - 1)) % n
    return {"event_id": f"x-{i}", "time": 1_700_000_000_000 + i, "a": f"p{a}", "b": f"p{b}",
            "score": rng.choice((0.0, 1.0))}


async def run(kind: str, system: str, n: int, take: int, redis_url: str) -> float:
    tag = uuid.uuid4().hex[:6]
    s = replace(Settings(), redis_url=redis_url, key_prefix=f"benchp-{tag}", pools={"x": PoolConfig(system)})
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix)
    proc = Processor(s, store, ThreadPoolExecutor(max_workers=1), Metrics())
    rng = random.Random(1)
    if kind == "single":
        vals = [orjson.dumps({"type": "match", "pool": "x", **_match(i, 2000, rng)}) for i in range(n)]
        results = n
    else:
        vals = [orjson.dumps({"type": "match_batch", "pool": "x",
                              "matches": [_match(k * 1000 + i, 10000, rng) for i in range(1000)]}) for k in range(n)]
        results = 1000 * n
    msgs = [Message("t", 0, i, v) for i, v in enumerate(vals)]
    warm = orjson.dumps({"type": "match", "pool": "x", **_match(10**9, 2000, rng)})
    await proc.process([Message("t", 0, -1, warm)])  # compile/caches outside the clock
    from stream.service.worker import tune_gc

    tune_gc()  # as the worker does after its warm-up
    t0 = time.perf_counter()
    for i in range(0, len(msgs), take):
        res = await proc.process(msgs[i:i + take])
        for o in res.outputs:
            rating_key(o.pool, o.player)
            orjson.dumps(o.as_dict())
    dt = time.perf_counter() - t0
    keys = [k async for k in store.r.scan_iter(match=f"benchp-{tag}:*", count=10000)]
    for i in range(0, len(keys), 5000):
        await store.r.delete(*keys[i:i + 5000])
    await store.close()
    return results / dt


def main() -> None:
    kind, system, n, take = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
    url = os.environ.get("REDIS_URL", "redis://127.0.0.1:6379/14")
    rate = asyncio.run(run(kind, system, n, take, url))
    print(f"{kind} {system} n={n} take={take}: {rate:,.0f} results/s")


if __name__ == "__main__":
    main()
