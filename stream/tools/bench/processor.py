"""The worker's processor alone: real Redis, no broker (``python -m stream.tools.bench.processor``).

The worker's processor on pre-built input messages in take batches (started one after the
other as the worker's pipeline does; the worker's settings apply, ``MMR_SEEN_MAX_IDS`` bounding
the recorded ids as in the worker), plus
the serialisation the publisher does per rating; prints results/s. Shows the pipeline's own
cost without Faust and Tansu. Keys go under a fresh prefix, deleted at the end. Never asserted in tests.

    python -m stream.tools.bench.processor single elo 20000 4096   # kind system n take_batch
    python -m stream.tools.bench.processor batch elo 50 5          # n match_batch messages of 1,000
    python -m stream.tools.bench.processor columns elo 50 5        # the same as match_columns
    python -m stream.tools.bench.processor columns elo 50 5 1000000  # players in the pool (default 10,000)
    python -m stream.tools.bench.processor rounds elo-mmr 40 4     # n rounds of 3,000 players (results/s)
    python -m stream.tools.bench.processor history elo-mmr FILE 16  # a history file, takes of 16 MiB

``history``: the file as ``mmr replay --broker`` publishes it, taken as the worker takes it (batches
closed at ``MMR_TAKE_MAX_BYTES``, here the last argument in MiB): the worker's chain of reads,
ratings and commits without the broker, the publisher and Faust beside it on the machine.

With 10,000 players a batch of many thousand matches touches every player once, so the cost
per *player* (decode, encode, summaries, one rating message each) is spread over ~10 matches;
with a million players nearly every match brings two players the batch has not touched yet,
as in a large live pool.
"""

from __future__ import annotations

import asyncio
import random
import sys
import time
import uuid
from collections import deque
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import orjson

from stream.service.config import BENCH_REDIS_URL, PoolConfig, from_env
from stream.service.messages import rating_value
from stream.service.metrics import Metrics
from stream.service.processor import Message, Processor, rating_key
from stream.state.redis_store import RedisStore


def _match(i: int, n: int, rng: random.Random) -> dict[str, Any]:
    a = rng.randrange(n)
    b = (a + 1 + rng.randrange(n - 1)) % n
    return {"event_id": f"x-{i}", "time": 1_700_000_000_000 + i, "a": f"p{a}", "b": f"p{b}",
            "score": rng.choice((0.0, 1.0))}


async def _redis_cpu(store: RedisStore) -> float:
    info = await store.r.info("cpu")
    return float(info["used_cpu_user"]) + float(info["used_cpu_sys"])


async def run(kind: str, system: str, n: int, take: int, redis_url: str,
              players: int = 10_000, history: str = "") -> tuple[float, float, float]:
    """(results/s by the wall clock, this process's CPU µs per result, Redis's CPU µs per result).

    The CPU times are what to compare on a shared, noisy machine: stolen time and other
    tenants move the wall clock between identical runs much more than the CPU spent."""
    tag = uuid.uuid4().hex[:6]
    s = from_env().with_(redis_url=redis_url, key_prefix=f"benchp-{tag}", pools={"x": PoolConfig(system)})
    store = RedisStore.from_url(s.redis_url, prefix=s.key_prefix, seen_max_ids=s.seen_max_ids)
    proc = Processor(s, store, ThreadPoolExecutor(max_workers=1), Metrics())
    rng = random.Random(1)
    if kind == "history":
        from stream.tools.bench.history import history_messages

        _, records, results = history_messages(history, s.with_(pools={}))
        vals = [v.replace(b'"pool":"hist"', b'"pool":"x"', 1) for _, v in records]
    elif kind == "rounds":
        vals = []
        for k in range(n):
            who = rng.sample(range(players), 3000)
            vals.append(orjson.dumps({"type": "round", "pool": "x", "event_id": f"r-{k}", "round_id": f"r-{k}",
                                      "time": 1_700_000_000_000 + k,
                                      "standings": [{"player": f"p{i}", "rank": j + 1} for j, i in enumerate(who)]}))
        results = 3000 * n
    elif kind == "single":
        vals = [orjson.dumps({"type": "match", "pool": "x", **_match(i, 2000, rng)}) for i in range(n)]
        results = n
    else:
        batches = [[_match(k * 1000 + i, players, rng) for i in range(1000)] for k in range(n)]
        if kind == "columns":
            vals = [orjson.dumps({"type": "match_columns", "pool": "x",
                                  **{c: [m[c] for m in ms] for c in ("event_id", "time", "a", "b", "score")}})
                    for ms in batches]
        else:
            vals = [orjson.dumps({"type": "match_batch", "pool": "x", "matches": ms}) for ms in batches]
        results = 1000 * n
    msgs = [Message("t", 0, i, v) for i, v in enumerate(vals)]
    warm = orjson.dumps({"type": "match", "pool": "x", **_match(10**9, 2000, rng)}) if kind != "rounds" else \
        orjson.dumps({"type": "round", "pool": "x", "event_id": "w", "round_id": "w", "time": 1,
                      "standings": [{"player": "w1", "rank": 1}, {"player": "w2", "rank": 2}]})
    await proc.process([Message("t", 0, -1, warm)])  # compile/caches outside the clock
    from stream.service.worker import tune_gc

    tune_gc()  # as the worker does after its warm-up
    r0 = await _redis_cpu(store)
    c0 = time.process_time()
    t0 = time.perf_counter()
    pending: deque[asyncio.Future[Any]] = deque()
    cuts = take_cuts(msgs, take) if kind == "history" else list(range(0, len(msgs) + take, take))
    for k, i in enumerate(cuts):
        j = cuts[k + 1] if k + 1 < len(cuts) else len(msgs)
        if i < len(msgs):
            pending.append(await proc.start(msgs[i:j], safe=False))
        while pending and (len(pending) > 1 or i >= len(msgs)):  # publish in order, one batch behind
            res = await pending.popleft()
            for o in res.outputs:
                rating_key(o.pool, o.player)
                rating_value(o)
    dt = time.perf_counter() - t0
    cpu = time.process_time() - c0
    redis_cpu = await _redis_cpu(store) - r0
    keys = [k async for k in store.r.scan_iter(match=f"benchp-{tag}:*", count=10000)]
    for i in range(0, len(keys), 5000):
        await store.r.delete(*keys[i:i + 5000])
    await store.close()
    return results / dt, 1e6 * cpu / results, 1e6 * redis_cpu / results


def take_cuts(msgs: list[Message], take_mib: int) -> list[int]:
    """Where take batches of at most ``take_mib`` MiB of values start (as ``BatchDelivery`` closes them)."""
    cuts, size = [0], 0
    for i, m in enumerate(msgs):
        size += len(m.value)
        if size >= take_mib << 20 and i + 1 < len(msgs):
            cuts.append(i + 1)
            size = 0
    return cuts


def main() -> None:
    kind, system = sys.argv[1], sys.argv[2]
    history = sys.argv[3] if kind == "history" else ""
    n, take = (0, int(sys.argv[4])) if kind == "history" else (int(sys.argv[3]), int(sys.argv[4]))
    players = int(sys.argv[5]) if len(sys.argv) > 5 else 10_000
    url = from_env(redis_url=BENCH_REDIS_URL).redis_url
    t0 = time.perf_counter()
    rate, cpu, redis_cpu = asyncio.run(run(kind, system, n, take, url, players, history))
    what = f"{history} takes of {take} MiB" if history else f"n={n} take={take}"
    print(f"{kind} {system} {what} players={players:,}: {rate:,.0f} results/s; "
          f"CPU per result: {cpu:.2f} µs here, {redis_cpu:.2f} µs in Redis ({time.perf_counter() - t0:.0f} s in all)")


if __name__ == "__main__":
    main()
