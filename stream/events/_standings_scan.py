"""Standings read as columns by one numba pass, without a JSON object per row.

Why: a contest line of the reference's format holds thousands of ``["handle", lo, hi]`` rows, and a
``round`` event (what the worker takes from Kafka) thousands of ``{"player": "handle", "rank": n}``
items. Decoded by orjson they become a list or dict, a str and ints each, which the reader then
checks and turns into columns: over the Codeforces history (3.1 million rows) that costs more CPU
than the rating kernels' own work (BENCHMARKS.md, "Elo-MMR"), and in the worker it is the event
loop's time. Here one pass over the bytes finds the top-level ``"standings"`` value, checks it and
writes the names (one buffer, split once) and the integer columns; orjson decodes only the rest
(the contest's or round's own fields).

Exactness: the fast path accepts only a strict subset of JSON whose meaning is plain -- contest rows
``[ "name", int, int ]`` with ASCII names without escapes, ``0 <= lo <= hi < rows``; round items with
exactly the keys ``"player"`` (a name without escapes or control characters, UTF-8) and ``"rank"``
(an integer of at least 1), once each, in either order; non-negative integers of at most 18 digits;
names of 1 to ``max_id`` bytes; exactly one top-level ``"standings"`` key and no escaped top-level
key (which could decode to a second one) -- and the rest must decode to an object whose
``standings`` is then ``[]``. For such input the columns are what decoding the whole of it would
give; anything else (including everything malformed) returns None and is read the general way,
which also names what is wrong.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import numba as nb
import numpy as np
import orjson

from stream.ratings.base import IntArray

_QUOTE, _BACKSLASH, _COMMA, _COLON = 34, 92, 44, 58
_LBRACE, _RBRACE, _LBRACKET, _RBRACKET = 123, 125, 91, 93
_NEWLINE = 10
_KEY = np.frombuffer(b"standings", dtype=np.uint8)
_PLAYER = np.frombuffer(b"player", dtype=np.uint8)
_RANK = np.frombuffer(b"rank", dtype=np.uint8)
CONTEST_ROWS, ROUND_ITEMS = 0, 1  # the two forms of standings (``_scan``'s ``kind``)


@nb.njit(cache=True, nogil=True)
def _ws(buf, i: int) -> int:  # type: ignore[no-untyped-def]
    n = buf.shape[0]
    while i < n and (buf[i] == 32 or buf[i] == 9 or buf[i] == 10 or buf[i] == 13):
        i += 1
    return i


@nb.njit(cache=True, nogil=True)
def _int(buf, i: int):  # type: ignore[no-untyped-def]
    """(value, end) of a JSON integer of the subset at ``i``, or (−1, i) when there is none."""
    n = buf.shape[0]
    j = i
    value = 0
    while j < n and 48 <= buf[j] <= 57 and j - i < 19:
        value = value * 10 + (buf[j] - 48)
        j += 1
    digits = j - i
    if digits == 0 or digits > 18 or (digits > 1 and buf[i] == 48):
        return -1, i
    return value, j


@nb.njit(cache=True, nogil=True)
def _name(buf, i: int, names, w: int, max_id: int, top: int):  # type: ignore[no-untyped-def]
    """Copy the name whose text starts at ``i`` (after its opening quote) to ``names`` from ``w``: (the end
    after its closing quote, ``w`` after it), or end −1 when it is not of the subset: an escape, a byte
    below 32 or above ``top``, none or more than ``max_id`` bytes."""
    n = buf.shape[0]
    first = i
    while i < n and buf[i] != _QUOTE:
        c = buf[i]
        if c < 32 or c > top or c == _BACKSLASH:
            return -1, w
        names[w] = c
        w += 1
        i += 1
    if i >= n or not (1 <= i - first <= max_id):
        return -1, w
    return i + 1, w


@nb.njit(cache=True, nogil=True)
def _next(buf, i: int):  # type: ignore[no-untyped-def]
    """After an item of an array at ``i``: (1, the next item's start) after a comma, (0, the end after
    ``]``) at the array's end, (−1, i) otherwise."""
    n = buf.shape[0]
    i = _ws(buf, i)
    if i < n and buf[i] == _COMMA:
        return 1, _ws(buf, i + 1)
    if i < n and buf[i] == _RBRACKET:
        return 0, i + 1
    return -1, i


@nb.njit(cache=True, nogil=True)
def _rows(buf, i: int, max_id: int, names, lo, hi):  # type: ignore[no-untyped-def]
    """Parse the standings array at ``i``: (rows, end after ``]``, name bytes written), or rows −1."""
    n = buf.shape[0]
    if i >= n or buf[i] != _LBRACKET:
        return -1, i, 0
    i = _ws(buf, i + 1)
    rows = 0
    w = 0
    while True:
        if i >= n or buf[i] != _LBRACKET:
            return -1, i, 0
        i = _ws(buf, i + 1)
        if i >= n or buf[i] != _QUOTE:
            return -1, i, 0
        i += 1
        if rows:
            names[w] = _NEWLINE
            w += 1
        end, w = _name(buf, i, names, w, max_id, 126)
        if end < 0:
            return -1, i, 0
        i = _ws(buf, end)
        if i >= n or buf[i] != _COMMA:
            return -1, i, 0
        a, i = _int(buf, _ws(buf, i + 1))
        i = _ws(buf, i)
        if a < 0 or i >= n or buf[i] != _COMMA:
            return -1, i, 0
        b, i = _int(buf, _ws(buf, i + 1))
        i = _ws(buf, i)
        if b < 0 or a > b or i >= n or buf[i] != _RBRACKET:
            return -1, i, 0
        lo[rows] = a
        hi[rows] = b
        rows += 1
        more, i = _next(buf, i + 1)
        if more < 0:
            return -1, i, 0
        if not more:
            break
    for r in range(rows):
        if hi[r] >= rows:
            return -1, i, 0
    return rows, i, w


@nb.njit(cache=True, nogil=True)
def _is(buf, first: int, end: int, word) -> bool:  # type: ignore[no-untyped-def]
    """``buf[first:end]`` is ``word``."""
    if end - first != word.shape[0]:
        return False
    for q in range(word.shape[0]):  # noqa: SIM110 (a loop numba compiles)
        if buf[first + q] != word[q]:
            return False
    return True


@nb.njit(cache=True, nogil=True)
def _items(buf, i: int, max_id: int, names, ranks):  # type: ignore[no-untyped-def]
    """Parse a round's standings array at ``i``: (items, end after ``]``, name bytes written), or items −1."""
    n = buf.shape[0]
    if i >= n or buf[i] != _LBRACKET:
        return -1, i, 0
    i = _ws(buf, i + 1)
    items = 0
    w = 0
    while True:
        if i >= n or buf[i] != _LBRACE:
            return -1, i, 0
        i = _ws(buf, i + 1)
        rank = -1
        named = False
        while True:  # the item's two keys, in either order
            if i >= n or buf[i] != _QUOTE:
                return -1, i, 0
            first = i + 1
            i = first
            while i < n and buf[i] != _QUOTE:
                if buf[i] == _BACKSLASH:
                    return -1, i, 0
                i += 1
            if i >= n:
                return -1, i, 0
            is_player = _is(buf, first, i, _PLAYER)
            is_rank = _is(buf, first, i, _RANK)
            if not (is_player or is_rank) or (is_player and named) or (is_rank and rank >= 0):
                return -1, i, 0  # another key, or one of them twice
            i = _ws(buf, i + 1)
            if i >= n or buf[i] != _COLON:
                return -1, i, 0
            i = _ws(buf, i + 1)
            if is_rank:
                rank, i = _int(buf, i)
                if rank < 1:
                    return -1, i, 0
            else:
                if i >= n or buf[i] != _QUOTE:
                    return -1, i, 0
                i += 1
                if items:
                    names[w] = _NEWLINE
                    w += 1
                end, w = _name(buf, i, names, w, max_id, 255)
                if end < 0:
                    return -1, i, 0
                i = end
                named = True
            i = _ws(buf, i)
            if i < n and buf[i] == _COMMA and not (named and rank >= 0):
                i = _ws(buf, i + 1)
                continue
            if i < n and buf[i] == _RBRACE and named and rank >= 0:
                break
            return -1, i, 0
        ranks[items] = rank
        items += 1
        more, i = _next(buf, i + 1)
        if more < 0:
            return -1, i, 0
        if not more:
            break
    return items, i, w


@nb.njit(cache=True, nogil=True)
def _scan(buf, word, max_id: int, kind: int):  # type: ignore[no-untyped-def]
    """(rows, start, end, names, lo, hi): the top-level standings ``buf[start:end]`` as columns (of a
    round's items: ``lo`` the ranks), or rows −1 when the input is not of the subset (module docstring)."""
    n = buf.shape[0]
    cap = n // 9 + 1  # a row takes at least 9 bytes: ["x",0,0] (an item at least 20)
    names = np.empty(n, dtype=np.uint8)
    lo = np.empty(cap, dtype=np.int64)
    hi = np.empty(cap, dtype=np.int64)
    fail = (-1, 0, 0, names[:0], lo[:0], hi[:0])
    i = _ws(buf, 0)
    if i >= n or buf[i] != _LBRACE:
        return fail
    depth = 0
    expect_key = False
    found_rows = -1
    start = end = w = 0
    while i < n:
        c = buf[i]
        if c == _QUOTE:
            is_key = depth == 1 and expect_key
            expect_key = False
            i += 1
            first = i
            escaped = False
            while i < n and buf[i] != _QUOTE:
                if buf[i] == _BACKSLASH:
                    escaped = True
                    i += 1  # the escaped character, whatever it is
                i += 1
            if i >= n:
                return fail
            if is_key and escaped:
                return fail  # an escaped key could decode to "standings"
            if is_key and _is(buf, first, i, word):
                if found_rows >= 0:
                    return fail  # twice
                j = _ws(buf, i + 1)
                if j >= n or buf[j] != _COLON:
                    return fail
                start = _ws(buf, j + 1)
                if kind == CONTEST_ROWS:
                    found_rows, end, w = _rows(buf, start, max_id, names, lo, hi)
                else:
                    found_rows, end, w = _items(buf, start, max_id, names, lo)
                if found_rows < 0:
                    return fail
                i = end
                continue
            i += 1
            continue
        if c in (_LBRACE, _LBRACKET):
            depth += 1
            expect_key = depth == 1 and c == _LBRACE
        elif c in (_RBRACE, _RBRACKET):
            depth -= 1
        elif c == _COMMA and depth == 1:
            expect_key = True
        i += 1
    if found_rows < 0:
        return fail
    return found_rows, start, end, names[:w], lo[:found_rows], hi[:found_rows]


def scan_contest(line: str, max_id: int) -> tuple[dict[str, object], list[str], IntArray] | None:
    """(the line's object with ``standings`` emptied, players, ranks = lo + 1) of a contest line
    of the subset the module docstring describes, else None (read it the general way)."""
    try:
        raw = line.encode()
    except UnicodeEncodeError:  # bytes that were not UTF-8: the general path names the line
        return None
    got = _columns(raw, CONTEST_ROWS, max_id, "ascii")
    if got is None:
        return None
    obj, players, lo = got
    return obj, players, lo + 1


def scan_round(raw: bytes, max_id: int) -> tuple[dict[str, object], list[str], IntArray] | None:
    """(the event's object with ``standings`` emptied, players, ranks) of a ``round`` event's bytes of
    the subset the module docstring describes, else None (decode it the general way). The caller
    checks the rest as for a decoded round (``stream.events.validate.round_of_columns``)."""
    if b'"standings"' not in raw:  # (a match, say): not worth a pass
        return None
    return _columns(raw, ROUND_ITEMS, max_id, "utf-8")


def _columns(raw: bytes, kind: int, max_id: int, encoding: str) -> tuple[dict[str, object], list[str], IntArray] | None:
    rows, start, end, names, lo, _ = _scan(np.frombuffer(raw, dtype=np.uint8), _KEY, max_id, kind)
    if rows <= 0:
        return None
    try:
        obj = orjson.loads(raw[:start] + b"[]" + raw[end:])
        players = names.tobytes().decode(encoding).split("\n")  # (a name holds no byte below 32)
    except (orjson.JSONDecodeError, UnicodeDecodeError):
        return None
    if not isinstance(obj, dict) or obj.get("standings") != []:
        return None
    return obj, players, lo


def warmup() -> None:
    """Compile (or load from numba's cache) the scan, on inputs it takes and one it refuses."""
    scan_contest('{"name":"w","standings":[["a",0,0],["b",1,1]]}', 8)
    scan_contest('{"standings":[]}', 8)
    scan_round(b'{"type":"round","standings":[{"player":"a","rank":1},{"rank":2,"player":"b"}]}', 8)
