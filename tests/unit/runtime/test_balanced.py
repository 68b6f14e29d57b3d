"""``stream.runtime.balanced``: chunks of a parallel loop claimed by whichever thread is free."""

from __future__ import annotations

import numpy as np


def test_claim_hands_out_each_number_once_across_threads() -> None:
    """Balanced loops' threads take their chunks from a shared counter (``claim``; Elo-MMR's
    kernels, Cowan's arena waves): on all numba threads at once, every number below the end is
    claimed exactly once (a plain ``+=`` would lose some to the race), and the instruction is an
    atomic add."""
    import re

    import numba
    from numba import njit, prange

    from stream.runtime.balanced import claim

    def claim_all(counter: np.ndarray, owner: np.ndarray, hits: np.ndarray, nt: int) -> None:
        for t in prange(nt):
            q = claim(counter)
            while q < owner.shape[0]:
                owner[q] = t
                hits[t] += 1
                q = claim(counter)

    n = 200_000
    nt = numba.get_num_threads()
    fn = njit(nogil=True, parallel=True)(claim_all)  # not from numba's cache, which keeps no IR
    counter = np.zeros(1, dtype=np.int64)
    owner = np.full(n, -1, dtype=np.int64)
    hits = np.zeros(nt, dtype=np.int64)
    fn(counter, owner, hits, nt)
    assert (owner >= 0).all() and int(hits.sum()) == n
    assert int(counter[0]) == n + nt  # each thread's last claim is past the end
    ir_text = "\n".join(fn.inspect_llvm().values())
    assert re.search(r"atomicrmw add ptr|atomicrmw add i64\*", ir_text)
