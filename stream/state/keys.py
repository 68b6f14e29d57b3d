"""Redis key names of the service: one injective encoding of (pool, player) and of round ids.

Names may hold the ``{``, ``}`` and ``:`` that structure a key: left as they are, two names could
spell one key (pool ``kc}:p:x``'s ``mmr:{kc}:p:x}:lb`` is pool ``kc``'s player ``x}:lb``), and a ``}``
would move a pool's keys out of its hash slot. So ``%``, ``{``, ``}`` and ``:`` are escaped as
``%25``, ``%7B``, ``%7D`` and ``%3A``, and a key parses back into exactly one (kind, pool, name)::

    <prefix>:{<pool>}:p:<player>     <prefix>:{<pool>}:pend:<round>     <prefix>:{<pool>}:<suffix>
    <prefix>:{<pool>}:h:<player>

(the prefix holds no brace, so Redis Cluster's hash tag is exactly the escaped pool). ``KEY_FORMAT``
is recorded in each pool's meta; stream.state.redis_store refuses a pool of another format.
"""

from __future__ import annotations

import struct
from collections.abc import Sequence

#: version of the key layout, stored in each pool's meta as ``keys`` (pre-release builds wrote none)
KEY_FORMAT = "2"

#: the suffixes of a pool's own keys (besides players and pending rounds)
POOL_SUFFIXES = ("gen", "ids", "ids:old", "ids:epoch", "lb", "done", "done:old", "wm", "chg", "meta", "adv")


def escape(name: str) -> str:
    """``name`` with ``%``, ``{``, ``}`` and ``:`` percent-encoded (injective; the identity on other names).
    Four ``str.replace`` (``%`` first): faster than ``str.translate`` with a mapping."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D").replace(":", "%3A")


def escape_all(names: list[str]) -> list[str]:
    """``escape`` of each name; ``names`` itself when none needs it (one scan of their join)."""
    joined = "".join(names)
    if "%" in joined or "{" in joined or "}" in joined or ":" in joined:
        return list(map(escape, names))
    return names


def check_prefix(prefix: str) -> str:
    """A key prefix must not open or close a hash tag: the pool's braces must be the key's first."""
    if "{" in prefix or "}" in prefix:
        raise ValueError(f"key prefix {prefix!r}: must not contain '{{' or '}}' (they delimit the pool's hash tag)")
    return prefix


class KeySpace:
    """The key names under one prefix."""

    __slots__ = ("prefix",)

    def __init__(self, prefix: str) -> None:
        self.prefix = check_prefix(prefix)

    def pool_base(self, pool: str) -> str:
        """``<prefix>:{<escaped pool>}:``, the start of every key of the pool."""
        if not pool:
            raise ValueError("a pool name must not be empty (its hash tag would be empty)")
        return f"{self.prefix}:{{{escape(pool)}}}:"

    def key(self, pool: str, suffix: str) -> str:
        return self.pool_base(pool) + suffix

    def player_prefix(self, pool: str) -> str:
        return self.pool_base(pool) + "p:"

    def player_key(self, pool: str, player: str) -> str:
        return self.pool_base(pool) + "p:" + escape(player)

    def player_keys(self, pool: str, players: Sequence[str]) -> list[str]:
        """``player_key`` of each of ``players``: the pool's part made once, the names escaped in one scan."""
        base = self.pool_base(pool) + "p:"
        return [base + name for name in escape_all(list(players))]

    def history_prefix(self, pool: str) -> str:
        """Where the pool's per-player history lists start (stream.state.history)."""
        return self.pool_base(pool) + "h:"

    def history_key(self, pool: str, player: str) -> str:
        return self.pool_base(pool) + "h:" + escape(player)

    def pend_prefix(self, pool: str) -> str:
        return self.pool_base(pool) + "pend:"

    def pend_key(self, pool: str, round_id: str) -> str:
        return self.pool_base(pool) + "pend:" + escape(round_id)

    def pools_key(self) -> str:
        """The set of pool names: outside every pool's slot, written by its own idempotent command."""
        return f"{self.prefix}:pools"

    def open_rounds_key(self, source: str) -> str:
        """Pools with rounds open from input ``source`` ("topic/partition"): outside every pool's slot."""
        return f"{self.prefix}:open-rounds:{source}"



def strings_blob(items: Sequence[str]) -> bytes:
    """Length-prefixed list for the scripts: all little-endian u32 lengths first, then the bytes."""
    enc = [it.encode() for it in items]
    return struct.pack(f"<{len(enc)}I", *[len(b) for b in enc]) + b"".join(enc)


def glob_escape(text: str) -> str:
    """``text`` as a literal in a SCAN ``MATCH`` pattern."""
    return "".join("\\" + ch if ch in "*?[]\\" else ch for ch in text)
