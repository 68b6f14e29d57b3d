"""A pool written before names were escaped whose own name needs escaping (``a:b``, ``50%``, ``x{y}``):
its keys move from the old hash tag ``{a:b}`` to the new one ``{a%3Ab}``.

The old keys are ``<prefix>:{<pool>}:`` and the pool's fixed suffixes, ``p:<player>`` for every
member of its old leaderboard and ``pend:<round>`` for its pending rounds. The two hash tags are two
slots of a Redis Cluster, so the move is three steps, each safe to repeat and to run from two
workers at once:

1. every old key but the meta is copied (``DUMP``, then ``RESTORE ... REPLACE`` by a script in the
   new slot that does nothing once the new meta exists);
2. the new meta is written: the old meta's fields, the key format, and ``legacy_keys`` (the old
   keys are still to be deleted), by a script that does nothing once the new meta exists. From here
   on the pool is in the new format;
3. the old keys are deleted (the old meta last), then ``legacy_keys`` is removed; ``meta`` finishes
   this step whenever it finds ``legacy_keys`` (a worker stopped in between).

Copies and the new meta are confirmed by the replicas like a commit before any old key is deleted.
In the old layout two names could spell one key (pool ``kc}:p:x``'s ``gen`` was pool ``kc``'s player
``x}:gen``), so a pool whose name starts with another listed pool's name followed by ``}:`` (or the
other way round) is refused (``StateError``) and left as it was.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from typing import Any

from stream.state.keys import KEY_FORMAT, POOL_SUFFIXES
from stream.state.redis_scripts import ADOPT_LUA, RESTORE_LUA

log = logging.getLogger(__name__)

#: ``stream.state.redis_store.RedisStore``, which calls this module (named here only as a type, so that the
#: two modules do not import each other)
RedisStore = Any

#: the new meta's field that says the old keys are still to be deleted (step 3)
LEGACY_KEYS = b"legacy_keys"
#: keys copied per script, and deleted per command
CHUNK = 500


async def overlapping(store: RedisStore, pool: str) -> str | None:
    """A listed pool whose old keys may be this pool's (see the module docstring), or None."""
    async for member in store.r.sscan_iter(store.keys.pools_key(), count=1000):
        other = member.decode()
        if other != pool and (other.startswith(pool + "}:") or pool.startswith(other + "}:")):
            return other
    return None


async def old_keys(store: RedisStore, pool: str) -> tuple[list[tuple[str, str]], list[str]]:
    """(old key, new key) of everything the pool held in the old layout but its meta, and the old keys
    in the order they are deleted (players and pending rounds before the leaderboard that lists them)."""
    legacy = store.keys.legacy_base(pool)
    moves: list[tuple[str, str]] = []
    async for member, _ in store.r.zscan_iter(legacy + "lb", count=1000):
        name = member.decode()
        moves.append((legacy + "p:" + name, store.player_key(pool, name)))
    async for k in store.r.scan_iter(match=glob_escape(legacy + "pend:") + "*", count=1000):
        key = k.decode()
        moves.append((key, store.pend_key(pool, key[len(legacy) + 5:])))
    moves += [(legacy + s, store.key(pool, s)) for s in POOL_SUFFIXES if s != "meta"]
    return moves, [old for old, _ in moves]


async def migrate(store: RedisStore, pool: str) -> None:
    """Steps 1 to 3 of the module docstring (the caller checked that the old meta is of the old layout and
    that no other pool ``overlapping``)."""
    legacy = store.keys.legacy_base(pool)
    new_meta = store.key(pool, "meta")
    old_meta = await store.r.hgetall(legacy + "meta")
    if b"system" not in old_meta or b"keys" in old_meta:
        return  # moved meanwhile (by another worker): the caller reads the new meta
    moves, _ = await old_keys(store, pool)
    copied = 0
    for i in range(0, len(moves), CHUNK):
        chunk = moves[i:i + CHUNK]
        pipe = store.r.pipeline(transaction=False)
        for old, _ in chunk:
            pipe.dump(old)
        payloads = await pipe.execute()
        keys = [new for (_, new), p in zip(chunk, payloads, strict=True) if p is not None]
        if not keys:
            continue
        args = [p for p in payloads if p is not None]
        done = await _script(store, pool, RESTORE_LUA, [new_meta, *keys], args)
        if done < 0:
            return  # another worker adopted the pool meanwhile
        copied += done
    fields = [x for k, v in old_meta.items() if k not in (b"keys", LEGACY_KEYS) for x in (k, v)]
    if await _script(store, pool, ADOPT_LUA, [new_meta], [*fields, b"keys", KEY_FORMAT, LEGACY_KEYS, b"1"]) < 0:
        return
    log.info("pool %r: key format %s (%d keys copied from hash tag %r)", pool, KEY_FORMAT, copied, pool)
    await finish(store, pool)


async def finish(store: RedisStore, pool: str) -> None:
    """Step 3: delete the old keys (the old meta last), then the new meta's ``legacy_keys``."""
    _, olds = await old_keys(store, pool)
    for i in range(0, len(olds), CHUNK):
        await store.r.unlink(*olds[i:i + CHUNK])
    await store.r.unlink(store.keys.legacy_base(pool) + "meta")
    await store.r.hdel(store.key(pool, "meta"), LEGACY_KEYS)


async def _script(store: RedisStore, pool: str, script: str, keys: Sequence[str], args: Sequence[object]) -> int:
    """Runs ``script`` in the slot of ``keys[0]``, confirmed by the replicas like a commit."""
    reply = await store._replicated(pool, keys[0], [("EVAL", script, len(keys), *keys, *args)],
                                    wrote=lambda r: int(r[0]) >= 0)
    return int(reply[0])


def glob_escape(text: str) -> str:
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
