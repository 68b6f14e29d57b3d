"""The state of rounds being assembled from per-player results: the ``RoundState`` half of ``RedisStore``
(keys ``:pend:<round_id>``, ``:done``, ``:done:old``, ``:open``, ``open-rounds:<source>``;
stream.state.redis_store). The round book (stream.service.round_book) mirrors its rounds here, and
round expiry closes them, apart from the atomic step (whose commit marks the rounds it rated done).

The index of open rounds that expiry sweeps: a pool's ``:open`` (round id -> when its first result
was saved, ms) is written with the round's pending results and emptied by the scripts that mark
rounds done. The hint of an input partition (pool -> its earliest open round from there) is outside
every pool's slot, written before the round's own entry (a hint without rounds is dropped by a
sweep; a round without a hint would not be found) and moved by the sweep of its owner.

``RedisStore`` inherits these methods; they use the state declared below, which ``RedisStore.__init__``
sets. ``StateError``: a pool's keys hold what the scripts cannot write over.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Sequence
from itertools import chain
from typing import TYPE_CHECKING, Any

from redis.exceptions import NoScriptError, ResponseError

from stream.state.keys import KeySpace, escape
from stream.state.replication import Exchange
from stream.state.store_errors import StateError, raise_state

log = logging.getLogger(__name__)


class RoundState:
    """The round assembly state of ``RedisStore`` (module docstring)."""

    if TYPE_CHECKING:  # set by RedisStore.__init__, defined by RedisStore and ReplicatedWrites
        r: Any
        keys: KeySpace
        seen_max_ids: int
        _expire: Any
        _current: set[str]

        def _io(self) -> contextlib.AbstractAsyncContextManager[None]: ...
        def key(self, pool: str, suffix: str) -> str: ...
        async def meta(self, pool: str) -> dict[str, Any] | None: ...
        async def _confirm(self, pool: str) -> None: ...
        async def _replicated(self, mark: str, key: str, commands: list[tuple[Any, ...]] | Exchange,
                              wrote: Callable[[list[Any]], bool]) -> list[Any]: ...
        async def _load_script(self, script: Any, key: str) -> None: ...

    async def round_state(self, pool: str, round_ids: Sequence[str]) -> tuple[set[str], dict[str, dict[str, bytes]]]:
        """Which rounds are done, and the persisted pending entries of the others."""
        async with self._io():
            if pool not in self._current:
                await self.meta(pool)  # a pool of another key format is refused before its rounds are touched
            await self._confirm(pool)
            pipe = self.r.pipeline(transaction=False)
            pipe.smismember(self.key(pool, "done"), list(round_ids))
            pipe.smismember(self.key(pool, "done:old"), list(round_ids))
            for rid in round_ids:
                pipe.hgetall(self.keys.pend_key(pool, rid))
            res = await pipe.execute()
        done = {rid for rid, a, b in zip(round_ids, res[0], res[1], strict=True) if a or b}
        pend = {rid: {k.decode(): v for k, v in h.items()} for rid, h in zip(round_ids, res[2:], strict=True) if h}
        return done, pend

    async def save_pending(self, pool: str, entries: dict[str, dict[str, bytes]], event_ids: Sequence[str],
                           opened: dict[str, int] | None = None) -> None:
        """Persist results/completions of rounds still open (idempotent: keyed by event id). ``opened``:
        round id -> when it opened (ms), recorded in ``:open`` unless the round is there already."""
        if not entries:
            return
        async with self._io():
            if pool not in self._current:
                await self.meta(pool)
            await self._confirm(pool)
            cmds: list[tuple[Any, ...]] = []
            if opened:  # first: an open entry without its pend hash only expires a round of 0 results
                cmds.append(("ZADD", self.key(pool, "open"), "NX",
                             *chain.from_iterable((t, rid) for rid, t in opened.items())))
            cmds += [("HSET", self.keys.pend_key(pool, rid), *chain.from_iterable(fields.items()))
                     for rid, fields in entries.items()]  # idempotent, each written again by a retry
            await self._replicated(pool, self.key(pool, "gen"), cmds, wrote=lambda _: True)

    def _expire_args(self, pool: str, round_ids: Sequence[str]) -> tuple[list[str], list[Any]]:
        return ([self.key(pool, "done"), self.key(pool, "done:old")],
                [self.seen_max_ids, self.keys.pend_prefix(pool),
                 *chain.from_iterable((r, escape(r)) for r in round_ids)])

    async def expire_round(self, pool: str, round_id: str) -> None:
        async with self._io():
            keys, args = self._expire_args(pool, [round_id])
            try:
                await self._expire(keys=keys, args=args)
            except ResponseError as exc:
                raise_state(pool, exc)

    async def expire_rounds(self, rounds: Sequence[tuple[str, str]]) -> dict[str, tuple[list[str], int | None]]:
        """``expire_round`` for many (pool, round id) in one round trip: one script a pool (marks its rounds
        done, deletes their pending hashes, bounds ``:done``), atomic per pool. A pool whose keys the script
        refuses (StateError) is logged and skipped: its rounds stay closed in memory, the others are done.

        Returns per pool: the rounds it closed (those not done already), and the earliest time left in its
        ``:open`` (None: no open round left)."""
        by_pool: dict[str, list[str]] = {}
        for pool, round_id in rounds:
            by_pool.setdefault(pool, []).append(round_id)
        todo = list(by_pool)
        closed: dict[str, tuple[list[str], int | None]] = {}
        async with self._io():
            for _ in range(2):  # again for the pools whose server lacked the script (restarted, promoted)
                pipe = self.r.pipeline(transaction=False)
                for pool in todo:
                    keys, args = self._expire_args(pool, by_pool[pool])
                    pipe.execute_command("EVALSHA", self._expire.sha, len(keys), *keys, *args)
                res = await pipe.execute(raise_on_error=False)
                missing = [pool for pool, r in zip(todo, res, strict=True) if isinstance(r, NoScriptError)]
                for pool, r in zip(todo, res, strict=True):
                    if isinstance(r, list):
                        closed[pool] = ([x.decode() for x in r[1:]], int(float(r[0])) if r[0] else None)
                    if isinstance(r, NoScriptError) or not isinstance(r, Exception):
                        continue
                    if not isinstance(r, ResponseError):
                        raise r
                    try:
                        raise_state(pool, r)
                    except StateError as exc:
                        log.error("rounds of %r not marked done: %s", pool, exc)
                if not missing:
                    return closed
                await self._load_script(self._expire, self.key(missing[0], "done"))
                todo = missing
        return closed

    async def hint_open(self, pool: str, sources: Sequence[str], first: int) -> None:
        """Record that ``pool`` has a round open since ``first`` (ms) from each input ``source``, unless an
        earlier time is recorded; confirmed by the replicas like a commit (a lost hint would leave the round to
        be found only by its next event)."""
        for source in sources:
            key = self.keys.open_rounds_key(source)
            async with self._io():
                await self._replicated(f"{pool}\0open", key, [("ZADD", key, "LT", first, pool)], wrote=lambda _: True)

    async def due_pools(self, sources: Sequence[str], before: int, limit: int) -> dict[str, list[str]]:
        """Per input source: up to ``limit`` pools whose hint is before ``before`` (ms), earliest first."""
        if not sources:
            return {}
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            for source in sources:
                pipe.zrangebyscore(self.keys.open_rounds_key(source), "-inf", f"({before}", start=0, num=limit)
            res = await pipe.execute()
        return {s: [p.decode() for p in pools] for s, pools in zip(sources, res, strict=True) if pools}

    async def due_rounds(self, pools: Sequence[str], before: int, limit: int,
                         ) -> dict[str, tuple[list[tuple[str, int]], int | None]]:
        """Per pool: up to ``limit`` open rounds (id, opened at) opened before ``before`` (ms), earliest first,
        and the earliest time in its ``:open`` (None: no open round). A pool whose key holds another type is
        logged and left out."""
        if not pools:
            return {}
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            for pool in pools:
                key = self.key(pool, "open")
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

    async def set_hints(self, hints: Sequence[tuple[str, str, int | None]]) -> None:
        """(source, pool, earliest open time or None): the pools' hints as a sweep found them (None: removed)."""
        if not hints:
            return
        async with self._io():
            pipe = self.r.pipeline(transaction=False)
            for source, pool, first in hints:
                key = self.keys.open_rounds_key(source)
                if first is None:
                    pipe.zrem(key, pool)
                else:
                    pipe.zadd(key, {pool: first})
            await pipe.execute()
