"""``copy_into``: a move of array values inside numba code that LLVM turns into vector moves;
``prefetch``: a hint to bring an array value's cache line in ahead of its use.

Why a function of its own: numba checks every array index it cannot prove non-negative for a
negative (from-the-end) one, so a copy loop indexed by a start read from memory plus its counter
pays that check on each value and stays a scalar loop, and a slice assignment costs a slice's set-up
on each call. Indexed by unsigned integers, the same moves need no check and become vector moves
(a gather of beliefs, a commit's Redis frames).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Callable
from typing import Any, cast

import numba as nb
from llvmlite import ir
from numba.core import cgutils, types
from numba.extending import intrinsic

#: the index type of numba loops that must compile without a negative-index check (module doc)
U64 = nb.uint64


@nb.njit(cache=True, nogil=True)
def copy_into(dst, d: int, src, s: int, n: int) -> None:  # type: ignore[no-untyped-def]
    """``dst[d : d + n] = src[s : s + n]`` (all three ≥ 0)."""
    to, at = U64(d), U64(s)
    for q in range(U64(n)):
        dst[to + q] = src[at + q]


@intrinsic
def _prefetch(typingctx: Any, arr: Any, index: Any, write: Any) -> Any:
    """LLVM's ``prefetch`` of ``arr[index]`` (``write``: a literal bool, for a write). No check of
    ``index``: a hint changes no value and never faults."""
    if not (isinstance(arr, types.Array) and isinstance(index, types.Integer)
            and isinstance(write, types.BooleanLiteral)):
        return None
    sig = types.void(arr, index, write)
    rw = int(write.literal_value)

    def codegen(context: Any, builder: Any, signature: Any, args: Any) -> Any:
        ary = context.make_array(signature.args[0])(context, builder, args[0])
        at = builder.gep(ary.data, [context.cast(builder, args[1], signature.args[1], types.intp)])
        i8p = builder.bitcast(at, ir.IntType(8).as_pointer())
        i32 = ir.IntType(32)
        fn = cgutils.get_or_insert_function(builder.module, ir.FunctionType(ir.VoidType(), [i8p.type, i32, i32, i32]),
                                            "llvm.prefetch.p0")
        # (read or write, keep in every cache level, data)
        builder.call(fn, [i8p, ir.Constant(i32, rw), ir.Constant(i32, 3), ir.Constant(i32, 1)])
        return context.get_dummy_value()

    return sig, codegen


#: ``prefetch(arr, i, write)``: start loading the cache line of ``arr[i]`` (a loop over values scattered
#: in a large array asks for the ones a few iterations ahead, so their cache misses overlap)
prefetch = cast("Callable[[Any, Any, bool], None]", _prefetch)
