"""Example matchmaker: rebuilds every player's newest rating from the ratings topic, then pairs
waiting players by win probability.

Start-up. The ratings topic is compacted: at least the last message of every pool+player key
survives, so reading it from the beginning rebuilds the whole table. The consumer therefore
belongs to no group and commits nothing: every start assigns itself every partition, seeks to
the first offset and reads up to the end offsets seen at start before it pairs anyone. (A group
with committed offsets would resume after them and start with an empty table.)

The newest rating of a player is the one with the highest ``version`` (strictly increasing per
player): duplicates and stale messages, which at-least-once delivery and compaction (it keeps
the last *written* message of a key) can both leave, are dropped.

Pairing. Every ``INTERVAL`` seconds, per pool, the players rated within ``QUEUE_SECONDS`` (by
the rating message's timestamp; at most ``QUEUE_MAX`` of them, the most recent) are sorted by
rating and each is matched with the neighbour within ``WINDOW`` whose win probability, asked
from the worker's HTTP API (the pool's own rating model), is closest to 1/2. A real
matchmaker pairs the players of its queue; here "waiting" means "rated recently".

Configuration: ``KAFKA_BOOTSTRAP_SERVERS``, ``MMR_TOPIC_RATINGS`` and the Kafka security
variables as for the worker; ``MMR_API``, the worker's HTTP API (default
http://127.0.0.1:6066); ``MMR_MATCHMAKER_HEARTBEAT``, a file touched after every poll of the
topic, so that a health check can tell a live loop from a stuck one.

    KAFKA_BOOTSTRAP_SERVERS=127.0.0.1:9092 MMR_API=http://127.0.0.1:6066 python deploy/matchmaker.py
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import aiohttp
import orjson
from aiokafka import AIOKafkaConsumer, ConsumerRecord, TopicPartition

from stream.service.config import Settings, from_env

log = logging.getLogger("matchmaker")

WINDOW = 4  # neighbours considered on each side
INTERVAL = 5.0  # seconds between pairing rounds
QUEUE_SECONDS = 600.0  # players rated within this many seconds count as waiting
QUEUE_MAX = 200  # waiting players per pool considered in one round (each costs up to WINDOW API calls)


@dataclass
class RatingTable:
    """pool -> player -> the rating message with the highest version seen, plus ``seen_s``:
    the message's timestamp in seconds."""

    pools: dict[str, dict[str, dict[str, Any]]] = field(default_factory=dict)

    def apply(self, rating: dict[str, Any], seen_s: float) -> bool:
        """Keep ``rating`` if it is newer than the player's; True if it was kept."""
        players = self.pools.setdefault(rating["pool"], {})
        old = players.get(rating["player"])
        if old is not None and rating["version"] <= old["version"]:
            return False
        players[rating["player"]] = {**rating, "seen_s": seen_s}
        return True

    def apply_records(self, records: Iterable[ConsumerRecord[Any, Any]]) -> None:
        for rec in records:
            if rec.value is None:  # a tombstone: nothing publishes them, nothing to keep
                continue
            self.apply(orjson.loads(rec.value), rec.timestamp / 1000.0)

    def waiting(self, pool: str, now: float) -> list[str]:
        """Players of ``pool`` rated within QUEUE_SECONDS (the QUEUE_MAX most recent), by rating."""
        players = self.pools.get(pool, {})
        recent = sorted((p for p, r in players.items() if now - r["seen_s"] < QUEUE_SECONDS),
                        key=lambda p: players[p]["seen_s"], reverse=True)[:QUEUE_MAX]
        return sorted(recent, key=lambda p: players[p]["rating"])


def make_consumer(s: Settings) -> AIOKafkaConsumer:
    """No group, no commits: positions live in this process only, so every start reads the
    topic from the beginning (partitions assigned later also start at their first offset)."""
    return AIOKafkaConsumer(bootstrap_servers=s.kafka_bootstrap, group_id=None, enable_auto_commit=False,
                            auto_offset_reset="earliest", **s.aiokafka_kwargs())


class TopicMissing(RuntimeError):
    pass


async def assign_all(consumer: AIOKafkaConsumer, topic: str) -> set[TopicPartition]:
    """Assign every partition of ``topic`` (again, when partitions were added); returns the new ones."""
    await consumer.topics()  # refreshes the metadata
    parts = consumer.partitions_for_topic(topic)
    if not parts:
        raise TopicMissing(f"topic {topic!r} does not exist (the worker creates it on start)")
    tps = {TopicPartition(topic, p) for p in parts}
    new = tps - consumer.assignment()
    if new:
        kept = {tp: await consumer.position(tp) for tp in consumer.assignment()}
        consumer.assign(sorted(tps))  # a new assignment forgets positions: restore the old partitions'
        for tp, offset in kept.items():
            consumer.seek(tp, offset)
    return new


async def rebuild(consumer: AIOKafkaConsumer, topic: str, table: RatingTable, heartbeat: Path | None = None) -> None:
    """Read every partition of ``topic`` from its first offset up to its end offset at call time."""
    await assign_all(consumer, topic)
    tps = sorted(consumer.assignment())
    await consumer.seek_to_beginning(*tps)
    ends = await consumer.end_offsets(tps)
    pending = set(tps)
    while pending:
        for tp in list(pending):
            if await consumer.position(tp) >= ends[tp]:
                pending.discard(tp)
        if pending:
            batches = await consumer.getmany(*pending, timeout_ms=500, max_records=10000)
            for records in batches.values():
                table.apply_records(records)
            if heartbeat is not None:
                heartbeat.touch()


async def wait_for_topic(consumer: AIOKafkaConsumer, topic: str, heartbeat: Path | None) -> None:
    """Started before any worker: wait (alive) until the topic exists."""
    while True:
        try:
            await assign_all(consumer, topic)
            return
        except TopicMissing as exc:
            log.info("%s; waiting", exc)
            if heartbeat is not None:
                heartbeat.touch()
            await asyncio.sleep(5)


async def poll(consumer: AIOKafkaConsumer, table: RatingTable, timeout_ms: int = 500) -> None:
    """Apply whatever arrived within ``timeout_ms``."""
    batches = await consumer.getmany(timeout_ms=timeout_ms, max_records=10000)
    for records in batches.values():
        table.apply_records(records)


async def win_probability(http: aiohttp.ClientSession, api: str, pool: str, a: str, b: str) -> float | None:
    async with http.get(f"{api}/pools/{pool}/win-probability", params={"a": a, "b": b}) as resp:
        if resp.status != 200:
            return None
        return float((await resp.json())["p_a"])


async def pair_pool(http: aiohttp.ClientSession, api: str, pool: str,
                    waiting: list[str]) -> list[tuple[str, str, float]]:
    """Greedy pairing along the rating order: each player with the closest-to-even neighbour."""
    taken: set[str] = set()
    pairs = []
    for i, a in enumerate(waiting):
        if a in taken:
            continue
        best: tuple[str, float] | None = None
        for b in waiting[i + 1:i + 1 + WINDOW]:
            if b in taken:
                continue
            p = await win_probability(http, api, pool, a, b)
            if p is not None and (best is None or abs(p - 0.5) < abs(best[1] - 0.5)):
                best = (b, p)
        if best is not None:
            taken.update((a, best[0]))
            pairs.append((a, best[0], best[1]))
    return pairs


async def pair_all(http: aiohttp.ClientSession, api: str, table: RatingTable, heartbeat: Path | None) -> None:
    for pool in list(table.pools):
        try:
            pairs = await pair_pool(http, api, pool, table.waiting(pool, time.time()))
        except aiohttp.ClientError as exc:  # the worker restarting: pair again next round
            log.warning("pool %r: worker API unreachable (%s)", pool, exc)
            continue
        for a, b, p in pairs[:10]:
            print(f"[{pool}] {a} vs {b}: P({a} wins) = {p:.3f}", flush=True)
        if len(pairs) > 10:
            print(f"[{pool}] ... {len(pairs)} pairings", flush=True)
        if heartbeat is not None:
            heartbeat.touch()


async def main() -> None:
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    s = from_env()
    api = os.environ.get("MMR_API", "http://127.0.0.1:6066")
    beat = os.environ.get("MMR_MATCHMAKER_HEARTBEAT")
    heartbeat = Path(beat) if beat else None
    consumer = make_consumer(s)
    await consumer.start()
    table = RatingTable()
    try:
        await wait_for_topic(consumer, s.topic_ratings, heartbeat)
        started = time.monotonic()
        await rebuild(consumer, s.topic_ratings, table, heartbeat)
        log.info("rebuilt %d players in %d pools from %s in %.1f s", sum(map(len, table.pools.values())),
                 len(table.pools), s.topic_ratings, time.monotonic() - started)
        last = time.monotonic()
        async with aiohttp.ClientSession() as http:
            while True:
                await poll(consumer, table)
                if heartbeat is not None:
                    heartbeat.touch()
                if time.monotonic() - last >= INTERVAL:
                    last = time.monotonic()
                    for tp in await assign_all(consumer, s.topic_ratings):
                        log.info("new partition %s: reading it from the beginning", tp)
                    await pair_all(http, api, table, heartbeat)
    finally:
        await consumer.stop()


if __name__ == "__main__":
    with contextlib.suppress(KeyboardInterrupt):  # Ctrl-C: main's finally stopped the consumer
        asyncio.run(main())
