"""Strings held by columns: one buffer of bytes and where each string starts, no object per string.

Why: a worker's step writes ~50,000 players' keys, scores and rating messages. Made one ``bytes``
at a time (a format, a dict, an ``orjson.dumps`` each) that is a Python frame per string; made
here, the numbers of a column are written by one ``orjson.dumps`` of the array and cut at their
commas, and each row's string is joined from its parts by one numba pass (``join_rows``). The
rating messages (``stream.engine.rating_columns``) are written so.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Sequence

import numba as nb
import numpy as np
import orjson

from stream.ratings.base import IntArray
from stream.runtime.copies import copy_into

#: strings by columns: all of them one after another, and ``at`` (string i is ``blob[at[i] : at[i + 1]]``)
Column = tuple[np.ndarray, IntArray]


def cat(strings: Sequence[bytes]) -> Column:
    """``strings`` as one column (one ``bytes.join``)."""
    at = np.zeros(len(strings) + 1, dtype=np.int64)
    np.cumsum(np.fromiter(map(len, strings), dtype=np.int64, count=len(strings)), out=at[1:])
    return np.frombuffer(b"".join(strings), dtype=np.uint8), at


def json_numbers(values: np.ndarray) -> Column:
    """``orjson.dumps(x)`` of each of ``values`` (float64 or int64) as a column: cut from one
    ``orjson.dumps`` of the array at its commas (a number has none). orjson writes an array's
    numbers as it writes Python's: the shortest text that reads back the same double, ``null`` for
    a NaN or an infinity (tests/unit/test_rating_columns.py checks both)."""
    return _uncomma(np.frombuffer(orjson.dumps(values, option=orjson.OPT_SERIALIZE_NUMPY), dtype=np.uint8),
                    values.shape[0])


@nb.njit(cache=True, nogil=True)
def _uncomma(raw, n):  # type: ignore[no-untyped-def]
    """The ``n`` items of ``raw``, a JSON list of numbers, one after another (the commas and brackets
    left out), and where each starts."""
    out = np.empty(raw.shape[0], dtype=np.uint8)
    at = np.zeros(n + 1, dtype=np.int64)
    dst = 0
    k = 0
    for src in range(1, raw.shape[0] - 1):  # (inside "[" ... "]")
        c = raw[src]
        if c == 44:
            k += 1
            at[k] = dst
        else:
            out[dst] = c
            dst += 1
    at[n] = dst
    return out[:dst], at


@nb.njit(cache=True, nogil=True)
def _unlist(raw, n):  # type: ignore[no-untyped-def]
    """The ``n`` strings of ``raw``, orjson's text of a list of ``n`` str (``["a","b\\"c"]``), each with
    its quotes, one after another (the commas and brackets left out), and where each starts."""
    out = np.empty(raw.shape[0], dtype=np.uint8)
    at = np.zeros(n + 1, dtype=np.int64)
    src = 1  # past "["
    dst = 0
    for i in range(n):
        end = src + 1  # past the opening quote: to the closing one (a backslash escapes the byte after it)
        while raw[end] != 34:
            end += 2 if raw[end] == 92 else 1
        end += 1
        for q in range(end - src):
            out[dst + q] = raw[src + q]
        dst += end - src
        at[i + 1] = dst
        src = end + 1  # past "," (or the final "]")
    return out[:dst], at


def pick(strings: Sequence[bytes], rows: IntArray) -> Column:
    """The column of ``strings[rows[i]]`` for each i, by one numpy gather of their bytes (no
    ``bytes`` per row): a few distinct strings, each repeated over many rows."""
    blob, at = cat(strings)
    size = np.diff(at)[rows]
    out_at = np.zeros(rows.shape[0] + 1, dtype=np.int64)
    np.cumsum(size, out=out_at[1:])
    # byte k of row i comes from ``at[rows[i]] + k``: each row's start, shifted past the rows before it
    src = np.repeat(at[:-1][rows] - out_at[:-1], size) + np.arange(out_at[-1], dtype=np.int64)
    return blob[src], out_at


def json_strings(strings: Sequence[str]) -> Column:
    """``orjson.dumps(s)`` of each of ``strings`` as a column: cut from one ``orjson.dumps`` of the
    list (its items are written as each on its own would be)."""
    return _unlist(np.frombuffer(orjson.dumps(strings), dtype=np.uint8), len(strings))


@nb.njit(cache=True, nogil=True)
def _join(blob, at, first, stride, sizes):  # type: ignore[no-untyped-def]
    """Row i (of ``sizes[i]`` bytes): part j's string for each j in order, where part j's strings are
    ``blob[at[r] : at[r + 1]]`` for ``r = first[j] + stride[j] * i`` (stride 0: one for every row)."""
    n = sizes.shape[0]
    out_at = np.zeros(n + 1, dtype=np.int64)
    for i in range(n):
        out_at[i + 1] = out_at[i] + sizes[i]
    out = np.empty(out_at[n], dtype=np.uint8)
    for i in range(n):
        pos = out_at[i]
        for j in range(first.shape[0]):
            r = first[j] + stride[j] * i
            a = at[r]
            m = at[r + 1] - a
            copy_into(out, pos, blob, a, m)
            pos += m
    return out, out_at


def join_rows(n: int, parts: Sequence[bytes | Column]) -> Column:
    """``n`` strings, the i-th the concatenation of each part's i-th string: a column (of ``n``
    strings) or ``bytes`` (the same for every row)."""
    blobs: list[np.ndarray] = []
    ats: list[IntArray] = []
    first = np.empty(len(parts), dtype=np.int64)
    stride = np.empty(len(parts), dtype=np.int64)
    sizes = np.zeros(n, dtype=np.int64)
    base = rows = 0
    for j, part in enumerate(parts):
        if isinstance(part, bytes):
            blob, at = np.frombuffer(part, dtype=np.uint8), np.array([0, len(part)], dtype=np.int64)
            sizes += len(part)
            stride[j] = 0
        else:
            blob, at = part
            if at.shape[0] != n + 1:
                raise ValueError(f"part {j} holds {at.shape[0] - 1} strings, not {n}")
            sizes += np.diff(at)
            stride[j] = 1
        first[j] = rows
        lo, hi = int(at[0]), int(at[-1])
        blobs.append(blob[lo:hi])
        ats.append(at[:-1] + (base - lo))  # its starts where its bytes are in the joined buffer
        rows += at.shape[0] - 1
        base += hi - lo
    ats.append(np.array([base], dtype=np.int64))  # (the end of the last part's last string)
    blob_all = np.concatenate(blobs) if blobs else np.empty(0, dtype=np.uint8)
    out, out_at = _join(blob_all, np.concatenate(ats), first, stride, sizes)
    return out, out_at


def split(column: Column) -> list[bytes]:
    """The column's strings as ``bytes``, one each (a C-level slice each)."""
    blob, at = column
    raw = blob.tobytes()
    bounds = at.tolist()
    return list(map(raw.__getitem__, map(slice, bounds[:-1], bounds[1:])))


def warmup() -> None:
    """Compile (or load from numba's cache) the row join, on two rows."""
    join_rows(2, [b"[", json_strings(["a", 'b"c']), b",", json_numbers(np.array([1.5, 2.0])), b"]"])
