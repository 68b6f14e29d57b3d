"""The index of open rounds that round expiry sweeps (``:open`` and ``open-rounds:<source>`` of
stream.state.redis_store's layout; the service's side: stream.service.round_book).

A pool's ``:open`` (round id -> when its first result was saved, ms) is written with the round's
pending results and emptied by the scripts that mark rounds done. The hint of an input partition
(pool -> its earliest open round from there) is outside every pool's slot, written before the
round's own entry (a hint without rounds is dropped by a sweep; a round without a hint would not be
found) and moved by the sweep of its owner.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from redis.exceptions import ResponseError

from stream.state.redis_store import RedisStore

log = logging.getLogger(__name__)


async def hint_open(store: RedisStore, pool: str, sources: Sequence[str], first: int) -> None:
    """Record that ``pool`` has a round open since ``first`` (ms) from each input ``source``, unless an
    earlier time is recorded; confirmed by the replicas like a commit (a lost hint would leave the round to
    be found only by its next event)."""
    for source in sources:
        key = store.open_rounds_key(source)
        async with store._io():
            await store._replicated(f"{pool}\0open", key, [("ZADD", key, "LT", first, pool)], wrote=lambda _: True)


async def due_pools(store: RedisStore, sources: Sequence[str], before: int, limit: int) -> dict[str, list[str]]:
    """Per input source: up to ``limit`` pools whose hint is before ``before`` (ms), earliest first."""
    if not sources:
        return {}
    async with store._io():
        pipe = store.r.pipeline(transaction=False)
        for source in sources:
            pipe.zrangebyscore(store.open_rounds_key(source), "-inf", f"({before}", start=0, num=limit)
        res = await pipe.execute()
    return {s: [p.decode() for p in pools] for s, pools in zip(sources, res, strict=True) if pools}


async def due_rounds(store: RedisStore, pools: Sequence[str], before: int, limit: int,
                     ) -> dict[str, tuple[list[tuple[str, int]], int | None]]:
    """Per pool: up to ``limit`` open rounds (id, opened at) opened before ``before`` (ms), earliest first,
    and the earliest time in its ``:open`` (None: no open round). A pool whose key holds another type is
    logged and left out."""
    if not pools:
        return {}
    async with store._io():
        pipe = store.r.pipeline(transaction=False)
        for pool in pools:
            key = store.key(pool, "open")
            pipe.zrangebyscore(key, "-inf", f"({before}", start=0, num=limit, withscores=True)
            pipe.zrange(key, 0, 0, withscores=True)
        res = await pipe.execute(raise_on_error=False)
    out: dict[str, tuple[list[tuple[str, int]], int | None]] = {}
    for k, pool in enumerate(pools):
        rows, first = res[2 * k], res[2 * k + 1]
        if isinstance(rows, ResponseError) or isinstance(first, ResponseError):
            log.error("open rounds of %r not readable: %s", pool, rows)
            continue
        for r in (rows, first):
            if isinstance(r, Exception):
                raise r
        out[pool] = ([(r.decode(), int(t)) for r, t in rows], int(first[0][1]) if first else None)
    return out


async def set_hints(store: RedisStore, hints: Sequence[tuple[str, str, int | None]]) -> None:
    """(source, pool, earliest open time or None): the pools' hints as a sweep found them (None: removed)."""
    if not hints:
        return
    async with store._io():
        pipe = store.r.pipeline(transaction=False)
        for source, pool, first in hints:
            key = store.open_rounds_key(source)
            if first is None:
                pipe.zrem(key, pool)
            else:
                pipe.zadd(key, {pool: first})
        await pipe.execute()
