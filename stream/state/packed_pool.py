"""One embedded pool's packed beliefs in a single arena: no Python object per player and round.

Why: a dict of one ``bytes`` per player makes every round pay per-player Python work around the
kernels (look-ups, a join to gather, a ``bytes`` cut per player from the output), which over the
Codeforces history costs more than the kernels (BENCHMARKS.md, "Elo-MMR"). Here a player gets a
dense index at first sight; a round is gathered into the kernels' flat layout by one numba loop
and its output block written back into the players' slots by another.

``names[i]`` is player i's id (first-seen order: the final ratings' order), ``index[name] == i``;
player i's belief is ``arena[start[i] : start[i] + length[i]]`` (the packed belief's float64 values)
in a slot of ``slot_size(cls[i])`` values. A belief that outgrows its slot (Elo-MMR's grow by a term
a round) moves to a slot of its new size class, and the old slot is reused by the next belief of
that class: the arena holds at most 3/2 of the live values plus free slots, never compacted.

A ``Mapping[str, bytes]``, so every per-player path of the engine works on it unchanged; only whole
rounds use the dense form (``indices`` / ``gather`` / ``FlatBeliefs``).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import mmap
import threading
from collections.abc import Iterator, Mapping, Sequence

import numba as nb
import numpy as np

from stream.ratings.base import FloatArray, IntArray
from stream.runtime.copies import copy_into, prefetch
from stream.state import name_index
from stream.state.name_index import NameIndex

_MIN_VALUES = 1 << 10  # arena values allocated at first (8 KiB)
_MAP_MIN_VALUES = 1 << 20  # an arena this large (8 MiB) or larger is a memory map (``_grow``)
_MIN_PLAYERS = 1 << 6
_AHEAD_MAX = 4096  # look-ahead answers kept (a reader runs at most a queue's depth ahead)
#: ``_gather`` / ``_scatter`` ask for the slot this many beliefs ahead (``prefetch``): the slots lie all
#: over the arena, so each copy would otherwise start with a cache miss of its own
_AHEAD = 16
#: per thread, the memory map a released pool left (``PackedPool.release``) for the next one it grows
_SPARE = threading.local()


@nb.njit(cache=True, nogil=True)
def _offsets(length, idx, prior_length: int):  # type: ignore[no-untyped-def]
    """Where the beliefs of players ``idx`` (−1: the prior) start one after another."""
    n = idx.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for k in range(n):
        i = idx[k]
        offsets[k + 1] = offsets[k] + (length[i] if i >= 0 else prior_length)
    return offsets


@nb.njit(cache=True, nogil=True)
def _gather(values, start, length, idx, prior, offsets, flat):  # type: ignore[no-untyped-def]
    """The beliefs of players ``idx`` (−1: ``prior``) into ``flat`` at ``offsets``."""
    n = idx.shape[0]
    for k in range(n):
        if k + _AHEAD < n and idx[k + _AHEAD] >= 0:
            _prefetch_slot(values, start[idx[k + _AHEAD]])
        i = idx[k]
        if i >= 0:
            copy_into(flat, offsets[k], values, start[i], length[i])
        else:
            copy_into(flat, offsets[k], prior, 0, prior.shape[0])


@nb.njit(cache=True, nogil=True)
def _scatter(values, start, idx, flat, offsets):  # type: ignore[no-untyped-def]
    """Belief k of ``flat`` (``offsets``) into player ``idx[k]``'s slot."""
    n = idx.shape[0]
    for k in range(n):
        if k + _AHEAD < n:
            _prefetch_slot(values, start[idx[k + _AHEAD]])
        copy_into(values, start[idx[k]], flat, offsets[k], offsets[k + 1] - offsets[k])


@nb.njit(cache=True, nogil=True)
def _prefetch_slot(values, s: int) -> None:  # type: ignore[no-untyped-def]
    """The first two cache lines of the slot at ``s`` (the processor's own prefetcher follows on)."""
    prefetch(values, s, False)
    prefetch(values, s + 8, False)


def slot_class(lengths: IntArray) -> IntArray:
    """The size class of beliefs of ``lengths`` values: the smallest slot that holds them, of the sizes
    1, 2, 3, 4, 6, 8, 12, … (a power of two or 3/4 of one: a slot wastes at most a third of itself)."""
    k = np.frexp(np.maximum(lengths, 2) - 1)[1].astype(np.int64)  # 2**(k-1) < length <= 2**k
    return np.where(4 * lengths <= 3 << k, 2 * k - 1, 2 * k)


def _slot_sizes(classes: IntArray) -> IntArray:
    """``slot_size`` of each of ``classes`` (a class below 0, no slot, as class 0)."""
    base = np.left_shift(1, np.maximum(classes, 0) >> 1)
    return np.where(classes & 1, base + (base >> 1), base)


def slot_size(c: int) -> int:
    """Values in a slot of class ``c``: 2**(c/2) for even ``c``, 3/4 of 2**((c+1)/2) for odd."""
    base = 1 << (c >> 1)
    return base + (base >> 1) if c & 1 else base


class FlatBeliefs(Mapping[str, bytes]):
    """A round's new packed beliefs as the kernel wrote them (``flat[offsets[k] : offsets[k + 1]]``:
    ``players[k]``'s), a ``Mapping[str, bytes]`` (each value after ``tag``: a ``TaggedPool``'s, as the
    store holds them); the ``PackedPool`` it was gathered from takes it in one copy. ``at``: the players'
    places in a step's order, when the round was found by them (``TaggedPool.indices``)."""

    def __init__(self, players: Sequence[str], idx: IntArray, flat: FloatArray, offsets: IntArray,
                 pool: PackedPool, tag: bytes = b"", at: IntArray | None = None) -> None:
        self.players = players
        self.idx = idx  # the players' indices in ``pool`` when gathered (−1: not there yet)
        self.flat = flat
        self.offsets = offsets
        self.pool = pool
        self.tag = tag
        self.at = at
        self._pos: dict[str, int] | None = None

    def __len__(self) -> int:
        return len(self.players)

    def __iter__(self) -> Iterator[str]:
        return iter(self.players)

    def __getitem__(self, player: str) -> bytes:
        if self._pos is None:
            self._pos = {p: k for k, p in enumerate(self.players)}
        k = self._pos[player]
        return self.tag + self.flat[self.offsets[k]: self.offsets[k + 1]].astype("<f8", copy=False).tobytes()


class PackedPool(Mapping[str, bytes]):
    """Player → packed belief (raw little-endian float64 bytes), held in one arena (module doc)."""

    def __init__(self, slack: int = 0) -> None:
        #: values of room a moved belief's slot is given beyond it: 0 keeps every belief in the smallest
        #: slot (a long-lived pool's memory); a pool living a few rounds (a worker's step) moves fewer
        self.slack = slack
        self._empty()

    def _empty(self) -> None:
        """Hold nothing: no player, a small arena of its own (no memory map), no free slot."""
        self.names: list[str] = []
        self.index = NameIndex()
        self._map: mmap.mmap | None = None
        self.arena = np.empty(0, dtype=np.float64)
        self.tail = 0  # end of the last slot ever cut from ``arena``
        self._grow(_MIN_VALUES)
        self.start = np.zeros(_MIN_PLAYERS, dtype=np.int64)
        self.length = np.zeros(_MIN_PLAYERS, dtype=np.int64)
        self.cls = np.full(_MIN_PLAYERS, -1, dtype=np.int64)  # slot size class (−1: no slot)
        #: free slots of each size class: starts in ``_free[c][: _nfree[c]]``
        self._free: dict[int, IntArray] = {}
        self._nfree: dict[int, int] = {}
        #: ``look_ahead``'s answers by ``id`` of the players' list (with the list)
        self._ahead: dict[int, tuple[Sequence[str], IntArray]] = {}
        self._flat = np.empty(0, dtype=np.float64)  # ``gather``'s buffer

    # --- Mapping ------------------------------------------------------------------
    def __len__(self) -> int:
        return len(self.names)

    def __iter__(self) -> Iterator[str]:
        return iter(self.names)

    def __contains__(self, player: object) -> bool:
        return player in self.index

    def __getitem__(self, player: str) -> bytes:
        i = self.index[player]
        s = int(self.start[i])
        return self.arena[s: s + int(self.length[i])].astype("<f8", copy=False).tobytes()

    @property
    def memory_map(self) -> mmap.mmap | None:
        """The memory map the arena lives in (a large arena, ``_grow``); None while it is a plain array."""
        return self._map

    @property
    def free_values(self) -> int:
        """Values in free slots, kept for later beliefs of their size: with the players' slots, the ``tail``."""
        return sum(slot_size(c) * k for c, k in self._nfree.items())

    # --- dense form -----------------------------------------------------------------
    def indices(self, players: Sequence[str]) -> IntArray:
        """Each player's index, −1 for one not held yet (from ``look_ahead``'s answer when it had this list)."""
        hint = self._ahead.pop(id(players), None)
        if hint is None or hint[0] is not players:
            return self._lookup(players)
        idx = hint[1]
        missing = np.flatnonzero(idx < 0)
        if missing.size:
            idx[missing] = self._lookup([players[k] for k in missing.tolist()])
        return idx

    def look_ahead(self, players: Sequence[str]) -> None:
        """Look ``players`` up now, for a later ``indices`` of this very list: a reading thread calls it
        while the rating thread runs kernels. Safe from another thread: a player's index never changes
        once given, so an answer can only miss players registered since (−1), which ``indices`` asks
        again. Answers never asked for are dropped once ``_AHEAD_MAX`` wait."""
        if len(self._ahead) >= _AHEAD_MAX:
            self._ahead.clear()
        self._ahead[id(players)] = (players, self._lookup(players))  # holds the list: its id stays its own

    def _lookup(self, players: Sequence[str]) -> IntArray:
        return self.index.lookup(players)

    def gather(self, idx: IntArray, prior: FloatArray) -> tuple[FloatArray, IntArray]:
        """The beliefs of ``idx`` (−1: ``prior``) one after another and their offsets: the kernels' flat
        layout. ``flat`` is a view of one buffer (a round's largest temporary, allocated once rather
        than per round) that the next ``gather`` overwrites."""
        offsets = _offsets(self.length, idx, prior.shape[0])
        size = int(offsets[-1])
        if self._flat.shape[0] < size:
            self._flat = np.empty(max(size, self._flat.shape[0] * 3 // 2), dtype=np.float64)
        flat = self._flat[:size]
        _gather(self.arena, self.start, self.length, idx, prior, offsets, flat)
        return flat, offsets

    def update(self, changed: Mapping[str, bytes]) -> None:  # type: ignore[override]
        """Store new beliefs: a ``FlatBeliefs`` gathered from this pool in one copy, others one by one."""
        if isinstance(changed, FlatBeliefs) and changed.pool is self:
            self._put(changed.players, changed.idx, changed.flat, changed.offsets)
            return
        for player, raw in changed.items():
            self[player] = raw

    def __setitem__(self, player: str, raw: bytes) -> None:
        if len(raw) % 8:
            raise ValueError(f"a packed belief of {len(raw)} bytes is not a whole number of float64 values")
        values = np.frombuffer(raw, dtype="<f8")
        idx = np.array([self.index.get(player, -1)], dtype=np.int64)
        self._put([player], idx, values, np.array([0, values.shape[0]], dtype=np.int64))

    def _put(self, players: Sequence[str], idx: IntArray, values: FloatArray, offsets: IntArray) -> None:
        """Write ``values`` (the new beliefs of ``players``, whose indices were ``idx``) into their slots."""
        idx = self.place(players, idx, np.diff(offsets))
        _scatter(self.arena, self.start, idx, values, offsets)

    def place(self, players: Sequence[str], idx: IntArray, lengths: IntArray) -> IntArray:
        """``_put`` without the values: slots for beliefs of ``lengths`` values of ``players`` (indices
        ``idx``, −1: registered here, in order); their indices. The caller writes the values there."""
        new = np.flatnonzero(idx < 0)
        if new.size:
            idx = idx.copy()
            idx[new] = self._register([players[k] for k in new.tolist()])
        if self.slack:  # a belief moves only once it outgrows its slot, to one with room again
            cls = self.cls[idx]
            moving = np.flatnonzero((cls < 0) | (lengths > _slot_sizes(cls)))
            want = slot_class(lengths[moving] + self.slack)
        else:
            want = slot_class(lengths)
            moving = np.flatnonzero(want != self.cls[idx])
            want = want[moving]
        if moving.size:
            self._move(idx[moving], want)
        self.length[idx] = lengths
        return idx

    def _register(self, players: list[str]) -> IntArray:
        base = len(self.names)
        count = len(players)
        self.names.extend(players)
        self.index.add(players)
        if base + count > self.start.shape[0]:
            cap = max(2 * (base + count), _MIN_PLAYERS)
            for name, fill in (("start", 0), ("length", 0), ("cls", -1)):
                grown = np.full(cap, fill, dtype=np.int64)
                grown[:base] = getattr(self, name)[:base]
                setattr(self, name, grown)
        return np.arange(base, base + count, dtype=np.int64)

    def _move(self, players: IntArray, classes: IntArray) -> None:
        """Give ``players`` (indices) new slots of ``classes``: free ones first, then cut from the tail."""
        old = self.cls[players]
        held = old >= 0
        for c in np.unique(old[held]).tolist():
            self._release(c, self.start[players[held & (old == c)]])
        cuts: list[tuple[int, IntArray, int]] = []  # (class, its players, how many of them take a free slot)
        for c in np.unique(classes).tolist():
            who = players[classes == c]
            cuts.append((c, who, min(who.shape[0], self._nfree.get(c, 0))))
        # the tail grown once for all of them, not once per class (a step's arena starts empty)
        need = self.tail + sum((who.shape[0] - take) * slot_size(c) for c, who, take in cuts)
        if need > self.arena.shape[0]:
            self._grow(max(need, self.arena.shape[0] * 3 // 2))
        for c, who, take in cuts:
            k = who.shape[0]
            starts = np.empty(k, dtype=np.int64)
            if take:
                nfree = self._nfree[c]
                starts[:take] = self._free[c][nfree - take: nfree]
                self._nfree[c] = nfree - take
            if k > take:
                size = slot_size(c)
                starts[take:] = self._cut((k - take) * size) + size * np.arange(k - take, dtype=np.int64)
            self.start[who] = starts
        self.cls[players] = classes

    def _release(self, c: int, starts: IntArray) -> None:
        free = self._free.get(c)
        n = self._nfree.get(c, 0)
        need = n + starts.shape[0]
        if free is None or need > free.shape[0]:
            grown = np.empty(max(2 * need, 64), dtype=np.int64)
            if free is not None:
                grown[:n] = free[:n]
            self._free[c] = free = grown
        free[n:need] = starts
        self._nfree[c] = need

    def _cut(self, size: int) -> int:
        """``size`` new values at the tail (the arena grows by half when full); their start."""
        at = self.tail
        if at + size > self.arena.shape[0]:
            self._grow(max(at + size, self.arena.shape[0] * 3 // 2))
        self.tail = at + size
        return at

    def release(self) -> None:
        """End this pool (it holds nothing afterwards) and leave its memory map, its pages already in
        memory, to the next pool this thread grows to a map: a worker's step makes a large arena and
        drops it, and a new map's pages fault in one by one. A map something else still views is left."""
        mm = self._map
        self._empty()  # (drops this pool's view of the map: a stray use afterwards is of an empty pool)
        if mm is None:
            return
        try:
            mm.resize(len(mm))  # refused while another view of the map exists
        except (BufferError, OSError, ValueError, SystemError):
            return
        spare = getattr(_SPARE, "map", None)
        if spare is None or len(spare) < len(mm):
            _SPARE.map = mm

    def _grow(self, values: int) -> None:
        """Make the arena ``values`` long, keeping its first ``tail`` values. A large arena is a private
        anonymous memory map: resized, the kernel moves its pages (``mremap``) instead of copying, so the
        last growth of a long history does not hold two arenas at the replay's peak memory. Falls back
        to a copy while something still holds a view of the arena."""
        old = self.arena
        mm = self._map
        if mm is not None:
            del self.arena, old  # the map's only export
            try:
                mm.resize(8 * values)
            except (BufferError, OSError, ValueError, SystemError):
                pass
            else:
                self.arena = np.frombuffer(mm, dtype=np.float64)
                return
            self.arena = old = np.frombuffer(mm, dtype=np.float64)
        mm = None
        # a small pool keeps a plain array: a map per pool would count against the process's limit of
        # mappings (65,530 by default on Linux); a large one takes the thread's spare map first (``release``)
        if values >= _MAP_MIN_VALUES:
            mm = _spare_map(8 * values)
            if mm is None:
                try:
                    mm = mmap.mmap(-1, 8 * values, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
                except (OSError, ValueError):
                    mm = None
        grown = np.empty(values, dtype=np.float64) if mm is None else np.frombuffer(mm, dtype=np.float64)
        grown[: self.tail] = old[: self.tail]
        self.arena, self._map = grown, mm

    def columns(self, cols: Sequence[int]) -> FloatArray:
        """``out[j, i]`` = value ``cols[j]`` of player i's belief, every player in index order
        (every belief must be longer than ``max(cols)``)."""
        n = len(self.names)
        pos = self.start[:n][None, :] + np.asarray(cols, dtype=np.int64)[:, None]
        out: FloatArray = self.arena[pos]
        return out


def _spare_map(nbytes: int) -> mmap.mmap | None:
    """This thread's spare map (``PackedPool.release``) of at least ``nbytes``, if it has one."""
    mm: mmap.mmap | None = getattr(_SPARE, "map", None)
    if mm is None:
        return None
    _SPARE.map = None
    if len(mm) < nbytes:
        try:
            mm.resize(nbytes)
        except (BufferError, OSError, ValueError, SystemError):
            return None
    return mm


def warmup() -> None:
    """Compile (or load from numba's cache) the gather and scatter kernels on a tiny round, and the
    kernels of the players' index."""
    name_index.warmup()
    pool = PackedPool()
    prior = np.zeros(6)
    pool.update({"a": prior.tobytes()})
    idx = pool.indices(["a", "b"])
    flat, offsets = pool.gather(idx, prior)
    pool.update(FlatBeliefs(["a", "b"], idx, flat.copy(), offsets, pool))
    pool.gather(idx, np.frombuffer(prior.tobytes()))  # the engine's prior, decoded from bytes, is read-only
