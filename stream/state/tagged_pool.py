"""A worker step's stored values with the beliefs it rates held in one arena (``TaggedPool``).

Why: a ``bytes`` read, cut and stored per player and round took more of a step of rounds than the
kernel. The step's beliefs are held as the embedded replay holds them (a ``PackedPool``), behind
the store's format: each value is a codec's tag byte, then the packed belief.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Iterator, Mapping, Sequence
from itertools import compress, repeat
from operator import is_not
from typing import cast

import numba as nb
import numpy as np

from stream.ratings.base import FloatArray, IntArray
from stream.runtime.copies import copy_into
from stream.state.packed_pool import FlatBeliefs, PackedPool

#: room (values) a step's belief is given when placed or moved in the step's arena: a player is in a few
#: rounds of a step, and an Elo-MMR belief grows by 3 values a round, so most are placed once and not moved
#: again (BENCHMARKS.md, "Service"); the arena lives for one step
STEP_SLACK = 24


@nb.njit(cache=True, nogil=True)
def _tagged(raw, lengths, tag):  # type: ignore[no-untyped-def]
    """Whether every value of ``raw`` (one after another, ``lengths`` bytes each) starts with ``tag``."""
    skip = tag.shape[0]
    src = 0
    for k in range(lengths.shape[0]):
        for j in range(skip):
            if raw[src + j] != tag[j]:
                return False
        src += lengths[k]
    return True


@nb.njit(cache=True, nogil=True)
def _untag_into(raw, lengths, skip, arena, start, idx):  # type: ignore[no-untyped-def]
    """Value k of ``raw`` (one after another, ``lengths`` bytes each) without its first ``skip``
    bytes into player ``idx[k]``'s slot of ``arena`` (bytes; the slot starts at float64 value
    ``start[idx[k]]``)."""
    src = 0
    for k in range(lengths.shape[0]):
        copy_into(arena, 8 * start[idx[k]], raw, src + skip, lengths[k] - skip)
        src += lengths[k]


class TaggedPool(Mapping[str, bytes]):
    """A step's stored values (what Redis holds) with the beliefs of the players rated so far in a
    ``PackedPool`` (``pool``): a round is gathered by index and its output block taken back in one
    copy. A player's value is read from ``stored`` (never changed) once, at first sight; ``get``
    answers with the value as the store would hold it now; a commit's values are ``encoded``.

    With ``order`` (each of the step's players → their place, numbered by the event loop while it
    planned the step), a round's players are found by their places (``indices(players, at)``): one
    numpy take instead of a look-up by name per player-round (BENCHMARKS.md, "Service")."""

    def __init__(self, stored: Mapping[str, bytes | None], tag: bytes,
                 order: Mapping[str, int] | None = None) -> None:
        self.stored = stored
        self.tag = tag
        self.order = order
        self.pool = PackedPool(slack=STEP_SLACK)
        self._read_all = False  # whether ``indices`` tried to read all of ``stored`` at once
        #: place in ``order`` → index in ``pool`` (−1: none yet, the prior): once every stored value of
        #: ``order``'s players is in ``pool`` (else None, and the players are looked up by name)
        self._by_place: IntArray | None = None

    def __len__(self) -> int:
        return sum(1 for _ in self)

    def __iter__(self) -> Iterator[str]:
        held = [p for p, raw in self.stored.items() if raw is not None]
        yield from compress(held, (self.pool.index.lookup(held) < 0).tolist())
        yield from self.pool.names

    def __contains__(self, player: object) -> bool:
        return player in self.pool.index or self.stored.get(player) is not None  # type: ignore[call-overload]

    def __getitem__(self, player: str) -> bytes:
        if player in self.pool.index:
            return self.tag + self.pool[player]
        raw = self.stored.get(player)
        if raw is None:
            raise KeyError(player)
        return raw

    def indices(self, players: Sequence[str], at: IntArray | None = None) -> IntArray | None:
        """Each player's index in ``pool``, those first seen read from ``stored`` (−1: no value, the
        prior). None when one of those values is not ``tag`` and whole float64 values: the caller's
        per-belief path then names it. ``at``: the players' places in ``order``.

        The first call reads every value of ``stored`` into ``pool`` at once when all are beliefs
        (else each is read when a round first names it), so rounds pay nothing for newcomers."""
        if not self._read_all:
            self._read_all = True
            self._read_stored()
        if at is not None and self._by_place is not None and len(at) == len(players):
            return self._by_place[at]
        pool = self.pool
        idx = pool.indices(players)
        miss = np.flatnonzero(idx < 0)
        if not miss.size:
            return idx
        names = [players[k] for k in miss.tolist()]
        raws = list(map(self.stored.get, names))
        have = [k for k, raw in enumerate(raws) if raw is not None]
        if not have:
            return idx
        if self._read([names[k] for k in have], cast("list[bytes]", [raws[k] for k in have])) is None:
            return None
        known = miss[have]
        idx[known] = pool.indices([players[k] for k in known.tolist()])
        return idx

    def _read_stored(self) -> None:
        """Every value of ``stored`` (of ``order``'s players, when given) into ``pool`` at once,
        unless one of them is not a belief (then nothing: each is read as a round names it)."""
        stored, index, order = self.stored, self.pool.index, self.order
        if order is not None and not index:
            vals = list(map(stored.get, order))
            held = list(map(is_not, vals, repeat(None)))
            idx = self._read(list(compress(order, held)), cast("list[bytes]", list(compress(vals, held))))
            if idx is not None:
                self._by_place = np.full(len(order), -1, dtype=np.int64)
                self._by_place[np.flatnonzero(np.fromiter(held, dtype=np.bool_, count=len(held)))] = idx
            return
        names = [p for p, raw in stored.items() if raw is not None]
        if index:
            names = list(compress(names, (index.lookup(names) < 0).tolist()))
        self._read(names, cast("list[bytes]", list(map(stored.__getitem__, names))) if index else
                   cast("list[bytes]", [raw for raw in stored.values() if raw is not None]))

    def _read(self, names: list[str], vals: list[bytes]) -> IntArray | None:
        """Values ``vals`` of players ``names`` (none in ``pool`` yet) into ``pool`` in one copy; their
        indices there, or None (nothing read) when one is not ``tag`` and whole float64 values."""
        if not names:
            return np.empty(0, dtype=np.int64)
        tag = self.tag
        skip = len(tag)
        lengths = np.fromiter(map(len, vals), dtype=np.int64, count=len(vals))
        nbytes = lengths - skip
        if bool((nbytes % 8).any()) or bool((nbytes < 0).any()):
            return None
        # all values in one buffer, their tags checked, then cut out straight into their slots: no object
        # per value, and no buffer of their own between (BENCHMARKS.md, "Service")
        raw = np.frombuffer(b"".join(vals), dtype=np.uint8)
        if not _tagged(raw, lengths, np.frombuffer(tag, dtype=np.uint8)):
            return None
        pool = self.pool
        idx = pool.place(names, np.full(len(names), -1, dtype=np.int64), nbytes // 8)
        _untag_into(raw, lengths, skip, pool.arena.view(np.uint8), pool.start, idx)
        return idx

    def update(self, changed: Mapping[str, bytes]) -> None:  # type: ignore[override]
        """New values: a ``FlatBeliefs`` gathered from ``pool`` in one copy, others value by value
        (``tag`` and whole float64 values, as the codec writes them)."""
        if isinstance(changed, FlatBeliefs) and changed.pool is self.pool:
            self.put(changed)
            return
        skip = len(self.tag)
        for player, raw in changed.items():
            if raw[:skip] != self.tag:
                raise ValueError(f"a value of player {player!r} without the tag {self.tag!r}")
            self.pool[player] = raw[skip:]
        if self._by_place is not None:
            players = list(changed)
            self._placed(players, self.pool.indices(players), None)

    def _placed(self, players: Sequence[str], idx: IntArray, at: IntArray | None) -> None:
        """Note the indices ``idx`` of ``players`` (at places ``at`` of ``order``, if known) in ``pool``
        for ``indices`` by place."""
        by_place, order = self._by_place, self.order
        if by_place is None or order is None:
            return
        if at is None or len(at) != len(players):
            places = np.fromiter(map(order.get, players, repeat(-1)), dtype=np.int64, count=len(players))
            known = places >= 0  # (a player outside ``order`` is found by name)
            at, idx = places[known], idx[known]
        by_place[at] = idx

    def put(self, changed: FlatBeliefs) -> IntArray:
        """``update`` with a ``FlatBeliefs`` gathered from ``pool``; the players' indices in ``pool``
        (those new to it registered in order)."""
        pool = self.pool
        if changed.pool is not pool:
            raise ValueError("new values gathered from another pool")
        idx = changed.idx.copy()
        new = np.flatnonzero(idx < 0)
        base = len(pool.names)
        pool.update(changed)  # (registers the players new to it, in order, from ``base`` on)
        if new.size:
            idx[new] = np.arange(base, base + new.size, dtype=np.int64)
            self._placed(changed.players, idx, changed.at)
        return idx

    def release(self) -> None:
        """End the step: its arena's memory goes to the next step's (``PackedPool.release``)."""
        self.pool.release()
        self._by_place = None

    def encoded(self, players: Sequence[str], idx: IntArray | None = None) -> tuple[FloatArray, IntArray]:
        """The beliefs of ``players`` (each in ``pool``; ``idx``: their indices, if known) one after
        another and their offsets: what the commit's values are written from."""
        if idx is None:
            idx = self.pool.indices(players)
        if len(idx) and int(idx.min()) < 0:
            raise KeyError(players[int(np.flatnonzero(idx < 0)[0])])
        return self.pool.gather(idx, np.empty(0, dtype=np.float64))


def warmup() -> None:
    """Compile (or load from numba's cache) the cut of the tags, on two values."""
    stored: dict[str, bytes | None] = {"a": b"\x01" + bytes(8), "b": b"\x01" + bytes(16)}
    TaggedPool(stored, b"\x01").indices(["a", "b"])
