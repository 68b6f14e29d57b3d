"""``claim``: parallel loops whose threads take their work a chunk at a time, as they get free.

Why: numba's OpenMP layer splits a ``prange`` into one contiguous block per thread, fixed in
advance, so the region lasts as long as its slowest block. Two things make blocks slow on a small
machine: uneven work (a round's best-ranked players hold the most terms) and a core shared with
another thread (the replay's reader, another process), and ``numba.set_parallel_chunksize`` does not
change that layer's split. A loop written as

    counter = np.zeros(1, dtype=np.int64)
    for _ in nb.prange(WORKERS):
        while True:
            c = claim(counter)
            if c >= chunks:
                break
            ...chunk c...

hands the chunks out in order to whichever thread asks next, so a thread that is held up takes
fewer of them. Each item's arithmetic is unchanged, so the results are the same bits whichever
thread computes them. ``WORKERS`` loop iterations are split among the threads as before; the first
one each thread runs takes chunks until none are left, the others find none (numba's thread count
is not read inside a cached kernel: it is a dynamic global there, which disables the cache).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Callable
from typing import Any, cast

from numba.core import types
from numba.extending import intrinsic

#: iterations of a balanced loop's ``prange``: at least the threads that should share the work
WORKERS = 64


@intrinsic
def _claim(typingctx: Any, counter: Any) -> Any:
    """The next chunk's number: ``counter[0]``, incremented atomically (``counter``: an int64 array)."""
    if not (isinstance(counter, types.Array) and counter.dtype == types.int64):
        return None
    sig = types.int64(counter)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        return builder.atomic_rmw("add", ary.data, context.get_constant(types.int64, 1), "monotonic")

    return sig, codegen


#: ``_claim`` as its callers see it (numba passes the typing context itself)
claim = cast("Callable[[Any], int]", _claim)
