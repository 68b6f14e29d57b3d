"""What the tests of rating ahead (a step while the step before it commits, a batch's first step
while the batch before it commits) share: rounds of one pool, outputs as comparable tuples, the
pool's state, and another writer slipped in around a commit."""

from __future__ import annotations

import random
import uuid
from collections.abc import Awaitable, Callable
from typing import Any

import orjson
import redis.asyncio as aioredis

from stream.service.config import Settings
from stream.service.metrics import Metrics
from stream.service.processor import BatchResult, Message, Processor
from stream.state.redis_store import RedisStore

POOL = "h"
PLAYERS = [f"p{i}" for i in range(120)]


def make_round(k: int, size: int = 40, seed: int = 0, pool: str = POOL) -> Message:
    """Round ``k`` of ``seed``'s sequence: ``size`` of the players, in a random order, ranked."""
    who = random.Random(seed * 1000 + k).sample(PLAYERS, size)
    body = {"type": "round", "pool": pool, "event_id": f"r{seed}-{k}", "round_id": f"r{seed}-{k}",
            "time": 1000 + k, "standings": [{"player": p, "rank": j + 1} for j, p in enumerate(who)]}
    return Message("rounds", 0, k, orjson.dumps(body))


def two_player_round(offset: int, event_id: str, time: int, winner: str, loser: str) -> Message:
    return Message("rounds", 0, offset, orjson.dumps(
        {"type": "round", "pool": POOL, "event_id": event_id, "round_id": event_id, "time": time,
         "standings": [{"player": winner, "rank": 1}, {"player": loser, "rank": 2}]}))


def outputs(res: BatchResult) -> list[tuple[Any, ...]]:
    return [(o.pool, o.player, o.rating, o.mu, o.sigma, o.version, o.event_id, o.explain) for o in res.outputs]


def rated_ahead(metrics: Metrics, outcome: str) -> float:
    return metrics.rated_ahead.labels(outcome)._value.get()


def total(metrics: Metrics, name: str) -> float:
    """The sum of counter ``name`` over all its labels."""
    return sum(s.value for m in metrics.registry.collect() for s in m.samples if s.name == f"{name}_total")


def new_store(redis_url: str, **kw: Any) -> RedisStore:
    """A store under a key prefix of its own, so every run starts from an empty pool."""
    return RedisStore.from_url(redis_url, prefix=f"ahead{uuid.uuid4().hex[:6]}", **kw)


async def pool_state(store: RedisStore, pool: str = POOL) -> dict[str, bytes | None]:
    return await store.beliefs(pool, PLAYERS)


def other_writer(redis_url: str, store: RedisStore, settings: Settings, ex: Any) -> tuple[RedisStore, Processor]:
    """A second processor writing the same pool under the same key prefix as ``store``."""
    other = RedisStore(aioredis.Redis.from_url(redis_url), prefix=store.keys.prefix)
    return other, Processor(settings, other, ex)


def around_commit(store: RedisStore, n: int, action: Callable[[], Awaitable[None]], before: bool = False) -> None:
    """Run ``action`` (another writer) once, right after (or right before) ``store``'s ``n``-th commit."""
    commit = store.commit
    calls = 0

    async def wrapped(*args: Any, **kwargs: Any) -> int:
        nonlocal calls
        calls += 1
        if before and calls == n:
            await action()
        gen = await commit(*args, **kwargs)
        if not before and calls == n:
            await action()
        return gen

    store.commit = wrapped  # type: ignore[method-assign]


async def poisoned_round(store: RedisStore, first: Message, offset: int = 1) -> Message:
    """A round ``bad`` of a player not in ``first`` whose stored value is not a belief: rating it
    makes one dead letter (cause "rating")."""
    named = {s["player"] for s in orjson.loads(first.value)["standings"]}
    bad_player = next(p for p in PLAYERS if p not in named)
    await store.r.set(store.player_key(POOL, bad_player), b"not a belief")
    return two_player_round(offset, "bad", 2000, bad_player, "q1")


#: a round of players no other round names: a commit of it is in the way only by the pool's ``gen``
UNRELATED_ROUND = two_player_round(9, "o", 1500, "o1", "o2")
