"""4- and 8-lane float64 vectors for numba kernels (``<4 x double>`` / ``<8 x double>`` in LLVM).

Why: Cowan's four sweeps of a match (``lanes``) run the same IEEE operations on independent data;
as the lanes of one vector that is a quarter of the instructions with the scalar code's bits (each
lane rounds exactly as the scalar loop). numba has no vector type and its auto-vectoriser keeps
loop-carried states in memory; here a vector is one LLVM value, so a state stays in a register.
Arithmetic has no fast-math flags: no reassociation, no FMA contraction (either changes bits).
``f64_at`` / ``f64_put`` index without numba's checks (a negative index is *not* counted from the
end). ``F64x8`` holds two terms of four chains (``v8_join``, ``v8_lo`` / ``v8_hi``).
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
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
_VEC8 = ir.VectorType(ir.DoubleType(), 2 * LANES)


class F64x4Type(types.Type):
    """Four float64 lanes held as one LLVM vector value."""

    def __init__(self) -> None:
        super().__init__(name="f64x4")


class F64x8Type(types.Type):
    """Eight float64 lanes held as one LLVM vector value."""

    def __init__(self) -> None:
        super().__init__(name="f64x8")


f64x4 = F64x4Type()
f64x8 = F64x8Type()


@register_default(F64x4Type)
class _F64x4Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, _VEC)


@register_default(F64x8Type)
class _F64x8Model(models.PrimitiveModel):
    def __init__(self, dmm: Any, fe_type: Any) -> None:
        super().__init__(dmm, fe_type, _VEC8)


def _lane_ptr(context: Any, builder: Any, arrty: Any, arr: Any, idxty: Any, idx: Any, vec: Any) -> Any:
    ary = context.make_array(arrty)(context, builder, arr)
    i = context.cast(builder, idx, idxty, types.intp)
    ptr = builder.gep(ary.data, [i])
    return builder.bitcast(ptr, vec.as_pointer())


def _check_array(arr: Any) -> bool:
    return isinstance(arr, types.Array) and arr.dtype == types.float64 and arr.ndim == 1


def _loader(ty: Any, vec: Any) -> Any:
    def typer(typingctx: Any, arr: Any, idx: Any) -> Any:
        if not (_check_array(arr) and isinstance(idx, types.Integer)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.load(_lane_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], vec), align=8)
        return ty(arr, idx), codegen
    typer.__name__ = f"_load_{ty.name}"
    return intrinsic(typer)


def _storer(tycls: Any, vec: Any) -> Any:
    def typer(typingctx: Any, arr: Any, idx: Any, v: Any) -> Any:
        if not (_check_array(arr) and isinstance(idx, types.Integer) and isinstance(v, tycls)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            builder.store(args[2], _lane_ptr(context, builder, sig.args[0], args[0], sig.args[1], args[1], vec),
                          align=8)
            return context.get_dummy_value()
        return types.none(arr, idx, v), codegen
    typer.__name__ = f"_store_{vec.count}"
    return intrinsic(typer)


def _splatter(ty: Any, vec: Any) -> Any:
    def typer(typingctx: Any, x: Any) -> Any:
        if not isinstance(x, types.Float):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            val = context.cast(builder, args[0], sig.args[0], types.float64)
            out = cgutils.get_null_value(vec)
            for lane in range(vec.count):
                out = builder.insert_element(out, val, ir.Constant(ir.IntType(32), lane))
            return out
        return ty(x), codegen
    typer.__name__ = f"_splat_{ty.name}"
    return intrinsic(typer)


_v8_load = _loader(f64x8, _VEC8)
_v8_store = _storer(F64x8Type, _VEC8)
_v4_splat = _splatter(f64x4, _VEC)
_v8_splat = _splatter(f64x8, _VEC8)


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


def _shuffled(result: Any, lanes: list[int]) -> Any:
    """An intrinsic of two 4-lane vectors (or one, used twice) picking ``lanes`` of their
    concatenation: LLVM's ``shufflevector``, which moves values and rounds nothing."""
    mask = ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes)

    def typer(typingctx: Any, a: Any, b: Any) -> Any:
        if not (isinstance(a, F64x4Type) and isinstance(b, F64x4Type)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.shuffle_vector(args[0], args[1], mask)
        return result(a, b), codegen
    return intrinsic(typer)


def _halved(lanes: list[int]) -> Any:
    """An intrinsic: the 4 ``lanes`` of an 8-lane vector, as a 4-lane one."""
    mask = ir.Constant(ir.VectorType(ir.IntType(32), len(lanes)), lanes)

    def typer(typingctx: Any, v: Any) -> Any:
        if not isinstance(v, F64x8Type):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return builder.shuffle_vector(args[0], args[0], mask)
        return f64x4(v), codegen
    return intrinsic(typer)


@intrinsic
def _f64_at(typingctx: Any, arr: Any, idx: Any) -> Any:
    if not (_check_array(arr) and isinstance(idx, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        return builder.load(builder.gep(ary.data, [context.cast(builder, args[1], sig.args[1], types.intp)]))
    return types.float64(arr, idx), codegen


@intrinsic
def _f64_put(typingctx: Any, arr: Any, idx: Any, v: Any) -> Any:
    if not (_check_array(arr) and isinstance(idx, types.Integer) and isinstance(v, types.Float)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        ary = context.make_array(sig.args[0])(context, builder, args[0])
        val = context.cast(builder, args[2], sig.args[2], types.float64)
        builder.store(val, builder.gep(ary.data, [context.cast(builder, args[1], sig.args[1], types.intp)]))
        return context.get_dummy_value()
    return types.none(arr, idx, v), codegen


@intrinsic
def _v4_get(typingctx: Any, v: Any, idx: Any) -> Any:
    if not (isinstance(v, F64x4Type) and isinstance(idx, types.Integer)):
        return None

    def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
        return builder.extract_element(args[0], context.cast(builder, args[1], sig.args[1], types.int32))
    return types.float64(v, idx), codegen


_v8_join = _shuffled(f64x8, list(range(2 * LANES)))
_v8_lo = _halved([0, 1, 2, 3])
_v8_hi = _halved([4, 5, 6, 7])


def _binary(tycls: Any, ty: Any, op: str) -> Any:
    def typer(typingctx: Any, a: Any, b: Any) -> Any:
        if not (isinstance(a, tycls) and isinstance(b, tycls)):
            return None

        def codegen(context: Any, builder: Any, sig: Any, args: Any) -> Any:
            return getattr(builder, op)(args[0], args[1])
        return ty(a, b), codegen
    typer.__name__ = f"_{ty.name}_{op}"
    return intrinsic(typer)


_v4_add = _binary(F64x4Type, f64x4, "fadd")
_v8_add = _binary(F64x8Type, f64x8, "fadd")
_v8_sub = _binary(F64x8Type, f64x8, "fsub")
_v8_mul = _binary(F64x8Type, f64x8, "fmul")

# what the jitted code calls them with (numba's typing sees the intrinsics themselves)
V4 = Any
V8 = Any
v4_splat = cast(Callable[[float], V4], _v4_splat)
v4_make = cast(Callable[[float, float, float, float], V4], _v4_make)
v4_get = cast(Callable[[V4, int], float], _v4_get)
f64_at = cast(Callable[[np.ndarray, int], float], _f64_at)
f64_put = cast(Callable[[np.ndarray, int, float], None], _f64_put)
v4_add = cast(Callable[[V4, V4], V4], _v4_add)
v8_load = cast(Callable[[np.ndarray, int], V8], _v8_load)
v8_store = cast(Callable[[np.ndarray, int, V8], None], _v8_store)
v8_splat = cast(Callable[[float], V8], _v8_splat)
v8_join = cast(Callable[[V4, V4], V8], _v8_join)
v8_lo = cast(Callable[[V8], V4], _v8_lo)
v8_hi = cast(Callable[[V8], V4], _v8_hi)
v8_add = cast(Callable[[V8, V8], V8], _v8_add)
v8_sub = cast(Callable[[V8, V8], V8], _v8_sub)
v8_mul = cast(Callable[[V8, V8], V8], _v8_mul)
