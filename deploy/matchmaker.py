"""Example matchmaker: follows the ratings topic and pairs waiting players by win probability.

It keeps the newest rating of every player (by ``version``: duplicates and stale messages
after a worker crash are dropped), and every few seconds proposes pairings per pool: players
sorted by rating, each one matched with the neighbour (within a small window) whose win
probability -- asked from the worker's HTTP API, i.e. the pool's own rating model -- is
closest to 1/2. A real matchmaker would pair only players in its queue; here "waiting" is
"rated recently".

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 MMR_API=http://127.0.0.1:6066 python deploy/matchmaker.py
"""

from __future__ import annotations

import asyncio
import json
import os
import time

import aiohttp
from aiokafka import AIOKafkaConsumer

WINDOW = 4  # neighbours considered on each side
INTERVAL = 5.0  # seconds between pairing rounds
QUEUE_SECONDS = 600.0  # players rated within this many seconds count as waiting


async def pair_pool(http: aiohttp.ClientSession, api: str, pool: str, players: dict[str, dict]) -> list[tuple]:
    now = time.time()
    waiting = sorted((p for p, r in players.items() if now - r["_seen"] < QUEUE_SECONDS),
                     key=lambda p: players[p]["rating"])
    taken: set[str] = set()
    pairs = []
    for i, a in enumerate(waiting):
        if a in taken:
            continue
        best = None
        for b in waiting[i + 1:i + 1 + WINDOW]:
            if b in taken:
                continue
            url = f"{api}/pools/{pool}/win-probability"
            async with http.get(url, params={"a": a, "b": b}) as resp:
                if resp.status != 200:
                    continue
                p = (await resp.json())["p_a"]
            if best is None or abs(p - 0.5) < abs(best[1] - 0.5):
                best = (b, p)
        if best is not None:
            taken.update((a, best[0]))
            pairs.append((a, best[0], best[1]))
    return pairs


async def main() -> None:
    bootstrap = os.environ.get("KAFKA_BOOTSTRAP_SERVERS", "127.0.0.1:9092")
    topic = os.environ.get("MMR_TOPIC_RATINGS", "mmr-ratings")
    api = os.environ.get("MMR_API", "http://127.0.0.1:6066")
    consumer = AIOKafkaConsumer(topic, bootstrap_servers=bootstrap, group_id="mmr-example-matchmaker",
                                auto_offset_reset="earliest")
    await consumer.start()
    ratings: dict[str, dict[str, dict]] = {}
    last = time.monotonic()
    async with aiohttp.ClientSession() as http:
        try:
            while True:
                batches = await consumer.getmany(timeout_ms=500, max_records=10000)
                for records in batches.values():
                    for rec in records:
                        r = json.loads(rec.value)
                        pool = ratings.setdefault(r["pool"], {})
                        old = pool.get(r["player"])
                        if old is None or r["version"] > old["version"]:
                            r["_seen"] = time.time()
                            pool[r["player"]] = r
                if time.monotonic() - last >= INTERVAL:
                    last = time.monotonic()
                    for pool, players in ratings.items():
                        pairs = await pair_pool(http, api, pool, players)
                        for a, b, p in pairs[:10]:
                            print(f"[{pool}] {a} vs {b}: P({a} wins) = {p:.3f}", flush=True)
                        if len(pairs) > 10:
                            print(f"[{pool}] ... {len(pairs)} pairings", flush=True)
        finally:
            await consumer.stop()


if __name__ == "__main__":
    asyncio.run(main())
