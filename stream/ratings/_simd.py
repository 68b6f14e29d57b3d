"""A 4-lane float64 vector for numba kernels: ``<4 x double>`` in LLVM, used as a value.

Why
---
Some kernels run the same sequence of IEEE operations on independent data (Cowan's
forward and backward sweeps of both players of a match). Running them as the lanes of
one vector does the same work in a quarter of the instructions, and the bits are those of
the scalar code: every lane performs exactly the operations the scalar loop performs, in
the same order (``fadd``/``fsub``/``fmul`` are exactly rounded per lane).

numba has no vector type, and its auto-vectoriser only sees loops over arrays (it would
keep the loop-carried states in memory, or not vectorise at all). ``F64x4`` is a numba
type whose LLVM value *is* a ``<4 x double>``, so a state held in a variable stays in a
register, and each operation below is one vector instruction:

* ``v4_load(a, i)`` / ``v4_store(a, i, v)``: ``a[i : i + 4]`` (unaligned; no bounds check);
* ``v4_splat(x)``: ``x`` in every lane; ``v4_make(x0, x1, x2, x3)``: the four values;
* ``v4_add``, ``v4_sub``, ``v4_mul``: lane-wise, plain IEEE instructions without fast-math
  flags, so LLVM may neither reassociate nor contract a multiply and an add into an FMA
  (which rounds once instead of twice and would change the bits).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, cast

import numpy as np
from llvmlite import ir
from numba import types
from numba.core import cgutils
from numba.core.datamodel import models, register_default
from numba.extending import intrinsic

LANES = 4
_VEC = ir.VectorType(ir.DoubleType(), LANES)


class F64x4Type(types.Type):
    """Four float64 lanes held as one LLVM vector value."""

    def __init__(self) -> None:
        super().__init__(name="f64x4")


f64x4 = F64x4Type()


@register_default(F64x4Type)
class _F64x4Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, _VEC)


def _lane_ptr(context: Any, builder: Any, arrty: Any, arr: Any, idxty: Any, idx: Any) -> Any:
    ary = context.make_array(arrty)(context, builder, arr)
    i = context.cast(builder, idx, idxty, types.intp)
    ptr = builder.gep(ary.data, [i])
    return builder.bitcast(ptr, _VEC.as_pointer())


def _check_array(arr: Any) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.float64 and arr.ndim == 1


@intrinsic
def _v4_load(typingctx: Any, arr: Any, idx: Any) -> Any:
    if not (_check_array(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.load(_lane_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]), align=8)
    return f64x4(arr, idx), codegen


@intrinsic
def _v4_store(typingctx: Any, arr: Any, idx: Any, v: Any) -> Any:
    if not (_check_array(arr) and isinstance(idx, types.Integer) and isinstance(v, F64x4Type)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        builder.store(args[2], _lane_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1]), align=8)
        return context.get_dummy_value()
    return types.none(arr, idx, v), codegen


@intrinsic
def _v4_splat(typingctx: Any, x: Any) -> Any:
    if not isinstance(x, types.Float):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        val = context.cast(builder, args[0], sig.args[0], types.float64)
        vec = cgutils.get_null_value(_VEC)
        for lane in range(LANES):
            vec = builder.insert_element(vec, val, ir.Constant(ir.IntType(32), lane))
        return vec
    return f64x4(x), codegen


@intrinsic
def _v4_make(typingctx: Any, x0: Any, x1: Any, x2: Any, x3: Any) -> Any:
    if not all(isinstance(x, types.Float) for x in (x0, x1, x2, x3)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        vec = cgutils.get_null_value(_VEC)
        for lane in range(LANES):
            val = context.cast(builder, args[lane], sig.args[lane], types.float64)
            vec = builder.insert_element(vec, val, ir.Constant(ir.IntType(32), lane))
        return vec
    return f64x4(x0, x1, x2, x3), codegen


def _binary(op: str) -> Any:
    def typer(typingctx: Any, a: Any, b: Any) -> Any:
        if not (isinstance(a, F64x4Type) and isinstance(b, F64x4Type)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return getattr(builder, op)(args[0], args[1])
        return f64x4(a, b), codegen
    typer.__name__ = f"_v4_{op}"
    return intrinsic(typer)


_v4_add = _binary("fadd")
_v4_sub = _binary("fsub")
_v4_mul = _binary("fmul")

# what the jitted code calls them with (numba's typing sees the intrinsics themselves)
V4 = Any
v4_load = cast(Callable[[np.ndarray, int], V4], _v4_load)
v4_store = cast(Callable[[np.ndarray, int, V4], None], _v4_store)
v4_splat = cast(Callable[[float], V4], _v4_splat)
v4_make = cast(Callable[[float, float, float, float], V4], _v4_make)
v4_add = cast(Callable[[V4, V4], V4], _v4_add)
v4_sub = cast(Callable[[V4, V4], V4], _v4_sub)
v4_mul = cast(Callable[[V4, V4], V4], _v4_mul)
