"""A round's belief copies and their check alone: ``python -m stream.tools.bench.copies [ROUNDS] [PLAYERS]``.

Times ``PackedPool``'s gather (a round's beliefs into the kernels' flat layout), the Elo-MMR
kernel's check of the gathered values for a NaN or infinity (``_first_non_finite``, a pass over
the same values) and the write-back (the kernel's output into the players' slots) on an arena
shaped like the Codeforces history's end: 280,000 players whose beliefs hold 6 + 3·m values, m
geometric with mean 30 and at most 100 (``history_limit``), ROUNDS rounds (default 300) of PLAYERS
distinct players (default 3,000). Prints ns per belief for each (the write-back with its slots'
bookkeeping). Run it from two trees (``PYTHONPATH``) to compare them; never asserted in tests.
"""

from __future__ import annotations

import sys
import time

import numpy as np

from stream.ratings.elo_mmr.kernels import _first_non_finite
from stream.state.packed_pool import FlatBeliefs, PackedPool

POOL_PLAYERS = 280_000


def arena(rng: np.random.Generator, size: int = POOL_PLAYERS) -> PackedPool:
    """A pool of ``size`` players with beliefs of 6 + 3·m values (m ~ geometric, mean 30, ≤ 100)."""
    lengths = 6 + 3 * np.minimum(rng.geometric(1 / 30, size), 100)
    offsets = np.zeros(size + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    pool = PackedPool()
    players = [f"p{i}" for i in range(size)]
    pool.update(FlatBeliefs(players, np.full(size, -1, dtype=np.int64), rng.random(int(offsets[-1])), offsets, pool))
    return pool


def run(rounds: int, players: int, pool: PackedPool | None = None) -> tuple[float, float, float]:
    """(ns per belief gathered, checked, written back) over ``rounds`` rounds of ``players`` of
    ``pool`` (default: an ``arena``), each written back with the values gathered."""
    rng = np.random.default_rng(0)
    pool = arena(rng) if pool is None else pool
    size = len(pool)
    prior = np.zeros(6)
    gathered = checked = written = 0.0
    for r in range(rounds + 3):  # the first three compile or load the kernels
        idx = rng.choice(size, players, replace=False)
        t0 = time.perf_counter()
        flat, offsets = pool.gather(idx, prior)
        t1 = time.perf_counter()
        if _first_non_finite(flat, offsets) >= 0:
            raise AssertionError("a gathered belief holds a NaN or an infinity")
        t2 = time.perf_counter()
        new = FlatBeliefs([pool.names[i] for i in idx.tolist()], idx, flat.copy(), offsets, pool)
        t3 = time.perf_counter()
        pool.update(new)  # the same lengths: every belief stays in its slot
        t4 = time.perf_counter()
        if r >= 3:
            gathered += t1 - t0
            checked += t2 - t1
            written += t4 - t3
    n = rounds * players
    return 1e9 * gathered / n, 1e9 * checked / n, 1e9 * written / n


def main() -> None:
    rounds = int(sys.argv[1]) if len(sys.argv) > 1 else 300
    players = int(sys.argv[2]) if len(sys.argv) > 2 else 3000
    gather_ns, check_ns, put_ns = run(rounds, players)
    print(f"{rounds} rounds of {players:,} players from an arena of {POOL_PLAYERS:,}: "
          f"gather {gather_ns:.0f} ns a belief, non-finite check {check_ns:.1f} ns a belief, "
          f"write-back {put_ns:.0f} ns a belief")


if __name__ == "__main__":
    main()
