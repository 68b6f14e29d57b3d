"""``copy_into``: a move of array values inside numba code that LLVM turns into vector moves.

Why a function of its own: numba checks every array index it cannot prove non-negative for a
negative (from-the-end) one, so a copy loop indexed by a start read from memory plus its counter
pays that check on each value and stays a scalar loop, and a slice assignment costs a slice's set-up
on each call. Indexed by unsigned integers, the same moves need no check and become vector moves
(a gather of beliefs, a commit's Redis frames).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import numba as nb

#: the index type of numba loops that must compile without a negative-index check (module doc)
U64 = nb.uint64


@nb.njit(cache=True, nogil=True)
def copy_into(dst, d: int, src, s: int, n: int) -> None:  # type: ignore[no-untyped-def]
    """``dst[d : d + n] = src[s : s + n]`` (all three ≥ 0)."""
    to, at = U64(d), U64(s)
    for q in range(U64(n)):
        dst[to + q] = src[at + q]
