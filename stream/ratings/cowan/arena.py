"""Cowan beliefs in one flat arena: the batch kernels' state, and a whole pool's in a replay.

Why: a dense ``(players, n + 1)`` matrix per batch costs tens of MB allocated, zeroed and copied
for windows of ~300-700 cells. Here slot ``p`` keeps its window only, ``vals[start[p] : start[p] +
width]`` for ``lohi[p] = [lo, hi]`` (``rounds[p]`` its match count), with ``cap[p]`` cells reserved
so that a window that fits is rewritten in place and a wider one moves to the end (a window grows
by at most the drift kernel's half-width a side per match). A match copies both windows into a
thread's dense scratch rows, runs ``kernels.update_pair_in`` (same operations, same bits) and
copies them back. ``run_arena_waves`` runs each conflict-free wave (``stream.ratings.waves``) on all
numba threads, ``run_arena_serial`` in arrival order on one (small batches: no schedule, no launch).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import mmap
from collections.abc import Sequence

import numpy as np
from numba import njit, prange

from stream.ratings.base import Belief, FloatArray, IntArray, split
from stream.ratings.cowan.kernels import update_pair_in, work_cells
from stream.ratings.cowan.quant import _ONE, _ZERO
from stream.ratings.cowan.windows import HEADER, moments, window_at
from stream.ratings.fastpath import Arena
from stream.runtime.balanced import claim
from stream.runtime.copies import prefetch


@njit(cache=True, nogil=True, inline="always")
def _prefetch_window(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray, p: int) -> None:
    """Prefetch slot ``p``'s window one match ahead: a pool's arena is far larger than the
    caches, and the window arrives from memory while the current match computes."""
    s = start[p]
    for t in range(s, s + lohi[p, 1] - lohi[p, 0] + 1, 8):  # 8 float64 = one 64-byte line
        prefetch(vals, t, False)


@njit(cache=True, nogil=True, inline="always")
def _prefetch_dest(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray, p: int, dest: int, grow: int) -> None:
    """Prefetch for writing the fresh cells slot ``p``'s new window moves to, if it moves."""
    if dest != start[p]:
        for t in range(dest, dest + lohi[p, 1] - lohi[p, 0] + 1 + 2 * grow, 8):
            prefetch(vals, t, True)


@njit(cache=True, nogil=True)
def _layout(start: np.ndarray, cap: np.ndarray, lohi: np.ndarray, slot: np.ndarray, a: np.ndarray, b: np.ndarray,
            order: np.ndarray, s0: int, cnt: int, end: int, grow: int, n1: int, dest: np.ndarray) -> int:
    """``dest[2q]`` / ``dest[2q + 1]``: where match ``order[s0 + q]`` writes A's / B's new window,
    in place if it cannot outgrow its reserve, else at the end (room for one more growth).
    Returns the new end."""
    for q in range(cnt):
        m = order[s0 + q]
        for side in range(2):
            p = slot[a[m]] if side == 0 else slot[b[m]]
            w = lohi[p, 1] - lohi[p, 0] + 1
            if min(n1, w + 2 * grow) <= cap[p]:
                dest[2 * q + side] = start[p]
            else:
                c = min(n1, w + 4 * grow)
                cap[p] = c
                dest[2 * q + side] = end
                end += c
    return end


@njit(cache=True, nogil=True)
def _grown(arr: np.ndarray, keep: int, need: int) -> np.ndarray:
    """``arr`` if it holds ``need`` values, else ``arr[:keep]`` copied into one ≥ 1.5 times as
    large (both exist while copying: a smaller step keeps that peak lower)."""
    if need <= arr.shape[0]:
        return arr
    out = np.empty(max(need, arr.shape[0] + arr.shape[0] // 2), dtype=arr.dtype)
    out[:keep] = arr[:keep]
    return out


@njit(cache=True, nogil=True)
def _arena_match(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray, rounds: np.ndarray,
                 pa: int, pb: int, dest_a: int, dest_b: int, score: float, dens: np.ndarray, codes: np.ndarray,
                 lh: np.ndarray, st: np.ndarray, a0: float, beta: float, soe: np.ndarray,
                 dtab: np.ndarray, dsoe: np.ndarray, form: int, taps: np.ndarray, drift_mode: int,
                 drift_rate: float, tail: float, quant: bool, qmin: int, h: float, ex: np.ndarray, lpar: np.ndarray,
                 work: np.ndarray) -> int:
    """``update_pair_in`` of slots ``pa`` and ``pb`` (A with advantage ``h``) on scratch rows
    ``dens`` (zero outside the windows, and left so), the new windows written at ``dest_a`` /
    ``dest_b``. Returns the status bits (1: A's belief came out non-finite, 2: B's)."""
    for row in range(2):
        p = pa if row == 0 else pb
        lo = lohi[p, 0]
        w = lohi[p, 1] - lo + 1
        s = start[p]
        src = vals[s : s + w]
        dst = dens[row, lo : lo + w]
        for t in range(w):
            dst[t] = src[t]
        lh[row, 0] = lo
        lh[row, 1] = lo + w - 1
    st[0] = 0
    st[1] = 0
    update_pair_in(dens, lh, _ZERO(), _ONE(), score, a0, beta, soe, dtab, dsoe, form, taps,
                   drift_mode, drift_rate, tail, quant, qmin, codes, st, h, ex, lpar, work)
    for row in range(2):
        p = pa if row == 0 else pb
        d = dest_a if row == 0 else dest_b
        lo = lh[row, 0]
        w = lh[row, 1] - lo + 1
        src = dens[row, lo : lo + w]
        dst = vals[d : d + w]
        for t in range(w):
            dst[t] = src[t]
            src[t] = 0.0
        start[p] = d
        lohi[p, 0] = lo
        lohi[p, 1] = lo + w - 1
        rounds[p] += 1.0
    return int(st[0]) + 2 * int(st[1])


@njit(cache=True, nogil=True, parallel=True)
def run_arena_waves(vals: np.ndarray, start: np.ndarray, cap: np.ndarray, lohi: np.ndarray,
                    rounds: np.ndarray, end: int, slot: np.ndarray, a: np.ndarray, b: np.ndarray,
                    scores: np.ndarray, order: np.ndarray, wave_starts: np.ndarray, dtab_index: np.ndarray,
                    dtabs: np.ndarray, dsoes: np.ndarray, a0: float, beta: float, soe: np.ndarray,
                    n1: int, form: int, taps: np.ndarray, drift_mode: int,
                    drift_rate: float, tail: float, quant: bool, qmin: int, grow: int,
                    status: np.ndarray, nt: int, advs: np.ndarray, ex: np.ndarray,
                    lpar: np.ndarray) -> tuple[np.ndarray, int]:
    """The matches ``(slot[a[m]], slot[b[m]])`` wave by wave, each wave on ``nt`` threads: the
    arena's values (a new array if it grew) and its end. ``status[i] = 1`` flags local player
    ``i``'s non-finite belief; ``advs[m]`` A's side advantage (empty: none), ``ex``/``lpar`` its
    tables (``shift.luck_tables``).

    Threads claim matches one at a time from a shared counter (``_claim``), not a fixed share:
    matches differ in cost, and a paused thread would hold its share back while the others wait.
    The next match is claimed first, so that its windows are prefetched meanwhile. Which thread
    runs a match changes no bit (a wave's matches share no player and no cells)."""
    nw = wave_starts.shape[0] - 1
    widest = 1
    for w in range(nw):
        widest = max(widest, wave_starts[w + 1] - wave_starts[w])
    dest = np.empty(2 * widest, dtype=np.int64)
    counter = np.zeros(1, dtype=np.int64)
    for w in range(nw):
        s0 = wave_starts[w]
        cnt = wave_starts[w + 1] - s0
        need = _layout(start, cap, lohi, slot, a, b, order, s0, cnt, end, grow, n1, dest)
        vals = _grown(vals, end, need)
        end = need
        chunks = min(nt, cnt)
        counter[0] = 0
        for _c in prange(chunks):
            dens = np.zeros((2, n1))
            codes = np.empty((2, n1), dtype=np.int64)
            lh = np.empty((2, 2), dtype=np.int64)
            st = np.zeros(2, dtype=np.uint8)
            work = np.empty(work_cells(n1, taps))
            q = claim(counter)
            while q < cnt:
                m = order[s0 + q]
                nq = claim(counter)
                if nq < cnt:  # this thread's next match: other players, not written before it
                    nxt = order[s0 + nq]
                    _prefetch_window(vals, start, lohi, slot[a[nxt]])
                    _prefetch_window(vals, start, lohi, slot[b[nxt]])
                    _prefetch_dest(vals, start, lohi, slot[a[nxt]], dest[2 * nq], grow)
                    _prefetch_dest(vals, start, lohi, slot[b[nxt]], dest[2 * nq + 1], grow)
                k = dtab_index[m]
                h = advs[m] if advs.shape[0] else 0.0
                bits = _arena_match(vals, start, lohi, rounds, slot[a[m]], slot[b[m]], dest[2 * q],
                                    dest[2 * q + 1], scores[m], dens, codes, lh, st, a0, beta, soe, dtabs[k],
                                    dsoes[k], form, taps, drift_mode, drift_rate, tail, quant, qmin, h, ex,
                                    lpar, work)
                if bits & 1:
                    status[a[m]] = 1
                if bits & 2:
                    status[b[m]] = 1
                q = nq
    return vals, end


@njit(cache=True, nogil=True)
def run_arena_serial(vals: np.ndarray, start: np.ndarray, cap: np.ndarray, lohi: np.ndarray,
                     rounds: np.ndarray, end: int, slot: np.ndarray, a: np.ndarray, b: np.ndarray,
                     scores: np.ndarray, dtab_index: np.ndarray, dtabs: np.ndarray, dsoes: np.ndarray, a0: float,
                     beta: float, soe: np.ndarray, n1: int, form: int, taps: np.ndarray,
                     drift_mode: int, drift_rate: float, tail: float, quant: bool, qmin: int,
                     grow: int, status: np.ndarray, advs: np.ndarray, ex: np.ndarray,
                     lpar: np.ndarray) -> tuple[np.ndarray, int]:
    """``run_arena_waves`` on one thread in arrival order (small batches), the same bits."""
    dens = np.zeros((2, n1))
    codes = np.empty((2, n1), dtype=np.int64)
    lh = np.empty((2, 2), dtype=np.int64)
    st = np.zeros(2, dtype=np.uint8)
    dest = np.empty(2, dtype=np.int64)
    one = np.zeros(1, dtype=np.int64)
    work = np.empty(work_cells(n1, taps))
    for m in range(a.shape[0]):
        one[0] = m
        if m + 1 < a.shape[0]:  # a hint only: the next match's windows may still move (same player)
            _prefetch_window(vals, start, lohi, slot[a[m + 1]])
            _prefetch_window(vals, start, lohi, slot[b[m + 1]])
        need = _layout(start, cap, lohi, slot, a, b, one, _ZERO(), _ONE(), end, grow, n1, dest)
        vals = _grown(vals, end, need)
        end = need
        k = dtab_index[m]
        h = advs[m] if advs.shape[0] else 0.0
        bits = _arena_match(vals, start, lohi, rounds, slot[a[m]], slot[b[m]], dest[0], dest[1], scores[m],
                            dens, codes, lh, st, a0, beta, soe, dtabs[k], dsoes[k], form, taps,
                            drift_mode, drift_rate, tail, quant, qmin, h, ex, lpar, work)
        if bits & 1:
            status[a[m]] = 1
        if bits & 2:
            status[b[m]] = 1
    return vals, end


@njit(cache=True, nogil=True)
def arena_from_flat(flat: np.ndarray, offsets: np.ndarray, cells: int) -> tuple[
        np.ndarray, np.ndarray, np.ndarray, np.ndarray, int]:
    """An arena over the beliefs ``flat[offsets[i]:offsets[i + 1]]`` in place (``vals`` is
    ``flat``): ``(start, cap, lohi, rounds, -1)``, or ``i`` last for the first malformed one."""
    n = offsets.shape[0] - 1
    start = np.empty(n, dtype=np.int64)
    cap = np.empty(n, dtype=np.int64)
    lohi = np.empty((n, 2), dtype=np.int64)
    rounds = np.empty(n)
    for i in range(n):
        lo, m = window_at(flat, offsets, i, cells)
        if lo < 0:
            return start, cap, lohi, rounds, i
        start[i] = offsets[i] + HEADER
        cap[i] = m
        lohi[i, 0] = lo
        lohi[i, 1] = lo + m - 1
        rounds[i] = flat[offsets[i] + 1]
    return start, cap, lohi, rounds, -1


@njit(cache=True, nogil=True)
def gather(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray, rounds: np.ndarray,
           slots: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The beliefs ``[lo, rounds, window...]`` of ``slots``, back to back: ``(flat, offsets)``."""
    n = slots.shape[0]
    offsets = np.empty(n + 1, dtype=np.int64)
    offsets[0] = 0
    for k in range(n):
        p = slots[k]
        offsets[k + 1] = offsets[k] + HEADER + lohi[p, 1] - lohi[p, 0] + 1
    flat = np.empty(offsets[n])
    for k in range(n):
        p = slots[k]
        o = offsets[k]
        w = lohi[p, 1] - lohi[p, 0] + 1
        flat[o] = lohi[p, 0]
        flat[o + 1] = rounds[p]
        s = start[p]
        for t in range(w):
            flat[o + HEADER + t] = vals[s + t]
    return flat, offsets


@njit(cache=True, nogil=True)
def moments_slots(vals: np.ndarray, start: np.ndarray, lohi: np.ndarray, rounds: np.ndarray, slots: np.ndarray,
                  grid: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, int]:
    """``windows.moments`` and rounds of the beliefs of ``slots``, read in place: ``(means, sds,
    rounds, -1)``, or ``k`` last for the first slot whose belief ``Cowan.summary`` would reject."""
    n = slots.shape[0]
    means = np.empty(n)
    sds = np.empty(n)
    out_rounds = np.empty(n, dtype=np.int64)
    cells = grid.shape[0]
    for k in range(n):
        p = slots[k]
        lo = lohi[p, 0]
        w = lohi[p, 1] - lo + 1
        r_f = rounds[p]
        if w <= 0 or lo < 0 or lo + w > cells or not abs(r_f) < 2.0**62:
            return means, sds, out_rounds, k
        s = start[p]
        means[k], sds[k] = moments(vals[s : s + w], grid, lo)
        out_rounds[k] = int(r_f)
    return means, sds, out_rounds, -1


@njit(cache=True, nogil=True)
def _compact(vals: np.ndarray, start: np.ndarray, cap: np.ndarray, lohi: np.ndarray, size: int) -> int:
    """Move the windows of slots ``0..size-1`` to the front, back to back in the order they lie
    (each keeping its reserve), in place: cells only move toward the front, past cells no slot
    holds. Returns the new end."""
    order = np.argsort(start[:size])
    pos = 0
    for k in range(size):
        p = order[k]
        s = start[p]
        if s != pos:
            for t in range(lohi[p, 1] - lohi[p, 0] + 1):
                vals[pos + t] = vals[s + t]
            start[p] = pos
        pos += cap[p]
    return pos


def _anonymous_map(nbytes: int) -> mmap.mmap:
    """``nbytes`` of private anonymous memory (a shared one cannot grow by ``mremap``: SIGBUS)."""
    return mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class CowanArena(Arena):
    """One pool's beliefs by slot (module docstring): ``add``, ``Cowan.rate_arena`` in place,
    ``beliefs`` back, bit for bit those of the belief arrays the same matches give."""

    def __init__(self, cells: int, grow: int) -> None:
        #: grid cells (n + 1) and the most a window can grow on each side in one match
        self.cells = cells
        self.grow = grow
        #: the values live in an anonymous private mapping (``reserve``): ``vals`` is its view
        self._map = _anonymous_map(1 << 16)
        self.vals: FloatArray = np.frombuffer(self._map, dtype=np.float64)
        self._mapped: FloatArray | None = self.vals  # ``vals`` while it is still that view
        self.end = 0
        self.start: IntArray = np.empty(1024, dtype=np.int64)
        self.cap: IntArray = np.empty(1024, dtype=np.int64)
        self.lohi: IntArray = np.empty((1024, 2), dtype=np.int64)
        self.rounds: FloatArray = np.empty(1024)
        self.size = 0

    def __len__(self) -> int:
        return self.size

    def _room(self, slots: int, cells: int) -> None:
        if self.size + slots > self.start.shape[0]:
            new = max(self.size + slots, 2 * self.start.shape[0])
            for name in ("start", "cap", "rounds"):
                old = getattr(self, name)
                arr = np.empty(new, dtype=old.dtype)
                arr[: self.size] = old[: self.size]
                setattr(self, name, arr)
            lohi = np.empty((new, 2), dtype=np.int64)
            lohi[: self.size] = self.lohi[: self.size]
            self.lohi = lohi
        self.reserve(cells)

    def reserve(self, cells: int) -> None:
        """Room for ``cells`` more values after ``end``, by a quarter more at least.

        The values view an anonymous private mapping grown by ``mremap`` (``mmap.resize``): pages
        move instead of being copied, so old and new block never coexist, and new cells are not
        written (a page is zeroed when first written), where ``ndarray.resize`` would zero-fill a
        reserve no window mostly reaches. No cell past a window is ever read. If a view is held
        elsewhere, there is no ``mremap``, or the kernel grew ``vals`` itself, the values are
        copied into a new mapping."""
        need = self.end + cells
        if need <= self.vals.shape[0]:
            return
        size = max(need, self.vals.shape[0] + self.vals.shape[0] // 4)
        if self.vals is self._mapped:
            self.vals = self._mapped = np.empty(0)  # drop this object's export of the mapping
            try:
                self._map.resize(size * 8)
            except (BufferError, OSError, SystemError):  # a view is held elsewhere, or no ``mremap``: copy
                self.vals = np.frombuffer(self._map, dtype=np.float64)
            else:
                self.vals = self._mapped = np.frombuffer(self._map, dtype=np.float64)
                return
        new = _anonymous_map(size * 8)
        vals = np.frombuffer(new, dtype=np.float64)
        vals[: self.end] = self.vals[: self.end]
        self._map, self.vals, self._mapped = new, vals, vals

    def add(self, beliefs: Sequence[Belief]) -> IntArray:
        """Append validated beliefs with room for a match's growth; returns their slots."""
        n = len(beliefs)
        slots = np.arange(self.size, self.size + n, dtype=np.int64)
        if n == 0:
            return slots
        widths = [len(x) - HEADER for x in beliefs]
        caps = [min(self.cells, w + 2 * self.grow) for w in widths]
        self._room(n, sum(caps))
        pos = self.end
        for i, (x, w, c) in enumerate(zip(beliefs, widths, caps, strict=True)):
            k = self.size + i
            lo = int(x[0])
            self.start[k] = pos
            self.cap[k] = c
            self.lohi[k] = (lo, lo + w - 1)
            self.rounds[k] = x[1]
            self.vals[pos : pos + w] = x[HEADER:]
            pos += c
        self.end = pos
        self.size += n
        return slots

    def add_copies(self, belief: Belief, n: int) -> IntArray:
        """``add([belief] * n)`` in a few numpy calls instead of a loop over the new players."""
        slots = np.arange(self.size, self.size + n, dtype=np.int64)
        if n == 0:
            return slots
        w = len(belief) - HEADER
        c = min(self.cells, w + 2 * self.grow)
        self._room(n, n * c)
        lo = int(belief[0])
        pos, k = self.end, self.size
        self.start[k : k + n] = np.arange(pos, pos + n * c, c, dtype=np.int64)
        self.cap[k : k + n] = c
        self.lohi[k : k + n] = (lo, lo + w - 1)
        self.rounds[k : k + n] = belief[1]
        self.vals[pos : pos + n * c].reshape(n, c)[:, :w] = belief[HEADER:]
        self.end = pos + n * c
        self.size += n
        return slots

    def set(self, slot: int, belief: Belief) -> None:
        """Replace the belief of ``slot`` (a validated array)."""
        w = len(belief) - HEADER
        if w > self.cap[slot]:
            c = min(self.cells, w + 2 * self.grow)
            self._room(0, c)
            self.start[slot] = self.end
            self.cap[slot] = c
            self.end += c
        s = int(self.start[slot])
        lo = int(belief[0])
        self.lohi[slot] = (lo, lo + w - 1)
        self.rounds[slot] = belief[1]
        self.vals[s : s + w] = belief[HEADER:]

    def moments(self, slots: IntArray, grid: FloatArray) -> tuple[FloatArray, FloatArray, IntArray, int]:
        """``moments_slots`` of the beliefs of ``slots`` on ``grid``."""
        return moments_slots(self.vals, self.start, self.lohi, self.rounds,  # type: ignore[no-any-return]
                             np.ascontiguousarray(slots, dtype=np.int64), grid)

    def beliefs(self, slots: IntArray) -> list[Belief]:
        """The belief arrays of ``slots`` (views of one new buffer)."""
        slots = np.ascontiguousarray(slots, dtype=np.int64)
        return split(*gather(self.vals, self.start, self.lohi, self.rounds, slots))

    def compact(self) -> None:
        """Drop the cells windows that moved left behind, in place."""
        self.end = _compact(self.vals, self.start, self.cap, self.lohi, self.size)

    def live_cells(self) -> int:
        return int(self.cap[: self.size].sum())
