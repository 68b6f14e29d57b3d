"""A step's ratings held by columns; their messages written by columns, not one by one.

Why: a step of the Codeforces history publishes ~50,000 ratings, over a million in the whole
history. As one ``RatingOutput`` each, encoded by ``rating_key`` and ``rating_value`` (a dict and
two ``orjson.dumps`` per rating), they cost the numba thread the tuples and the event loop the
bytes, a few µs per rating (BENCHMARKS.md, "Service"). A step of rounds (``step.rate_rounds``)
hands its ratings as these columns instead: a ``Sequence[RatingOutput]`` that makes its tuples
only when something reads them as such, and whose messages (``messages``) are cut from two
buffers joined by one numba pass from the columns' texts -- the numbers' from one
``orjson.dumps`` of each column, the names' from one ``orjson.dumps`` of their list
(``stream.text_columns``).

Exactness: ``messages`` gives each row's ``rating_key(o.pool, o.player)`` and ``rating_value(o)``
byte for byte (tests/unit/test_rating_columns.py). An explanation is a JSON object's text (or
None), as ``stream.engine.explain`` writes it. A column that does not fit the arrays (an integer
beyond int64, say a corrupt belief's round count) is written row by row by those functions.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
from collections.abc import Iterator, Mapping, Sequence
from itertools import repeat
from typing import cast, overload

import numba as nb
import numpy as np
import orjson

from stream.events.model import RatingOutput, rating_key, rating_value
from stream.ratings.base import rows_of_columns
from stream.runtime.copies import copy_into
from stream.text_columns import Column, cat, join_rows, json_numbers, json_strings, split


class ChangeRecords(Mapping[str, bytes]):
    """Player -> the record of their change (``RedisStore`` ``:chg``), held as a column: ``records``'
    i-th string is ``players[i]``'s. ``frames`` writes the column as it is; a dict of it is made only
    if something looks a player up."""

    def __init__(self, players: Sequence[str], records: Column) -> None:
        if records[1].shape[0] != len(players) + 1:
            raise ValueError(f"{records[1].shape[0] - 1} records for {len(players)} players")
        self.players = players
        self.records = records
        self._of: dict[str, bytes] | None = None

    def __getitem__(self, player: str) -> bytes:
        if self._of is None:
            self._of = dict(zip(self.players, split(self.records), strict=True))
        return self._of[player]

    def __iter__(self) -> Iterator[str]:
        return iter(self.players)

    def __len__(self) -> int:
        return len(self.players)


class RatingColumns(Sequence[RatingOutput]):
    """Rows ``RatingOutput(pool, players[i], rating[i], mu[i], sigma[i], rounds[i], version[i],
    event_ids[i], times[i], system, explain[i])`` held by columns (``explain`` None: no row has one)."""

    def __init__(self, pool: str, system: str, players: list[str], rating: Sequence[float] | np.ndarray,
                 mu: Sequence[float] | np.ndarray, sigma: Sequence[float] | np.ndarray, rounds: Sequence[int],
                 version: Sequence[int], event_ids: Sequence[str], times: Sequence[int],
                 explain: Sequence[bytes | None] | Column | None) -> None:
        n = len(players)
        explained = explain[1].shape[0] - 1 if isinstance(explain, tuple) else n if explain is None else len(explain)
        if not all(len(c) == n for c in (rating, mu, sigma, rounds, version, event_ids, times)) or explained != n:
            raise ValueError("columns of different lengths")
        self.pool, self.system, self.players = pool, system, players
        self.rating, self.mu, self.sigma = rating, mu, sigma
        self.rounds, self.version, self.event_ids, self.times = rounds, version, event_ids, times
        #: the explanations: one each (None: none), or as a column (``stream.text_columns``)
        self.explain = explain
        self._rows: list[RatingOutput] | None = None
        self._texts: dict[str, Column] = {}  # the integer and event id columns' texts, made once

    # --- Sequence: the rows as tuples, made once, when first asked for -----------------------
    def rows(self) -> list[RatingOutput]:
        if self._rows is None:
            as_list = [c.tolist() if isinstance(c, np.ndarray) else c for c in (self.rating, self.mu, self.sigma)]
            x = self.explain
            explain = repeat(None) if x is None else split(x) if isinstance(x, tuple) else x
            self._rows = list(rows_of_columns(
                RatingOutput, repeat(self.pool), self.players, *as_list, self.rounds, self.version, self.event_ids,
                self.times, repeat(self.system), explain))
        return self._rows

    def __len__(self) -> int:
        return len(self.players)

    @overload
    def __getitem__(self, i: int) -> RatingOutput: ...

    @overload
    def __getitem__(self, i: slice) -> list[RatingOutput]: ...

    def __getitem__(self, i: int | slice) -> RatingOutput | list[RatingOutput]:
        return self.rows()[i]

    def __iter__(self) -> Iterator[RatingOutput]:
        return iter(self.rows())

    def __eq__(self, other: object) -> bool:
        """Equal to a list (or columns) of the same rows, as the list of its rows would be."""
        if isinstance(other, RatingColumns):
            return self.rows() == other.rows()
        return isinstance(other, list) and self.rows() == other

    __hash__ = None  # type: ignore[assignment]  # (as a list's: mutable rows are not hashed)

    def __repr__(self) -> str:
        return f"RatingColumns({self.rows()!r})"

    # --- the messages ------------------------------------------------------------------------
    def part(self, start: int, stop: int) -> RatingColumns:
        """Rows ``start`` to ``stop`` (as a slice), their texts made so far kept: the messages of a
        step made a part at a time, so the event loop can serve a commit between the parts."""
        rounds = self.rounds[start:stop]
        version = rounds if self.version is self.rounds else self.version[start:stop]
        x = self.explain
        explain = None if x is None else (x[0], x[1][start:stop + 1]) if isinstance(x, tuple) else x[start:stop]
        out = RatingColumns(self.pool, self.system, self.players[start:stop], self.rating[start:stop],
                            self.mu[start:stop], self.sigma[start:stop], rounds, version,
                            self.event_ids[start:stop], self.times[start:stop], explain)
        out._texts = {k: (blob, at[start:stop + 1]) for k, (blob, at) in self._texts.items()}
        return out

    def messages(self) -> tuple[list[bytes], list[bytes]]:
        """Each row's message key and value: ``rating_key(o.pool, o.player)``, ``rating_value(o)``."""
        keys, values = self.message_columns()
        return split(keys), split(values)

    def message_columns(self) -> tuple[Column, Column]:
        """``messages`` as two columns (the producer's record batches are written from them)."""
        try:
            ints = self._int_texts()
        except OverflowError:  # a count or time beyond int64: as the functions write it
            return cat([rating_key(o.pool, o.player) for o in self]), cat(list(map(rating_value, self)))
        pool = orjson.dumps(self.pool)
        names = json_strings(self.players)
        keys = join_rows(len(self.players), [b"[" + pool + b",", names, b"]"])
        return keys, self._values(pool, names, *ints)

    def lines(self) -> bytes | memoryview:
        """Each row's message value (``rating_value``) and a newline, one after another: the rows of
        ``mmr replay --history`` (a JSONL file of the messages the worker publishes), joined in
        the same pass as the messages (a whole history's are over a GB)."""
        try:
            ints = self._int_texts()
        except OverflowError:  # (as ``message_columns``)
            return message_lines(self.rows())
        blob, _ = self._values(orjson.dumps(self.pool), json_strings(self.players), *ints, b"\n")
        return blob.data  # (the file takes the buffer: no copy into a ``bytes``)

    def _int_texts(self) -> tuple[Column, Column, Column]:
        """The texts of ``rounds``, ``version`` and ``times``; OverflowError for one beyond int64."""
        return self._text("rounds"), self._text("version"), self._text("times")

    def _values(self, pool: bytes, names: Column, rounds: Column, version: Column, times: Column,
                *after: bytes) -> Column:
        return join_rows(len(self.players), [
            b'{"type":"rating","pool":' + pool + b',"player":', names,
            b',"rating":', _floats(self.rating), b',"mu":', _floats(self.mu), b',"sigma":', _floats(self.sigma),
            b',"rounds":', rounds, b',"version":', version, b',"event_id":', self._text("event_ids"),
            b',"time":', times, b',"system":' + orjson.dumps(self.system), _ends(self.explain, len(self.players)),
            *after,
        ])

    def records(self) -> ChangeRecords:
        """The record of each row's change as the commit stores it (``step.change_records``: the
        version, event id, time and explanation, ``[%d,%b,%d,%b]``), by columns: the explanations
        must be a column (every row has one). OverflowError for a version or time beyond int64."""
        if not isinstance(self.explain, tuple):
            raise TypeError("records by columns are made from explanations held as a column")
        n = len(self.players)
        return ChangeRecords(self.players, join_rows(n, [
            b"[", self._text("version"), b",", self._text("event_ids"), b",", self._text("times"), b",",
            self.explain, b"]"]))

    def _text(self, name: str) -> Column:
        """The JSON text of each of a column (``rounds``, ``version``, ``times``: integers, OverflowError
        for one beyond int64; ``event_ids``), made once: the records on the numba thread, the messages
        on the event loop."""
        made = self._texts.get(name)
        if made is None:
            if name == "event_ids":
                eid_text = {e: orjson.dumps(e) for e in set(self.event_ids)}
                made = cat(list(map(eid_text.__getitem__, self.event_ids)))
            elif name == "version" and self.version is self.rounds:
                made = self._text("rounds")
            else:
                made = _ints(getattr(self, name))
            self._texts[name] = made
        return made


def message_lines(outputs: Sequence[RatingOutput]) -> bytes | memoryview:
    """Each output's message value (``rating_value``) and a newline, one after another: by columns
    for ``RatingColumns`` (``RatingColumns.lines``), else row by row."""
    if isinstance(outputs, RatingColumns):
        return outputs.lines()
    return b"".join([rating_value(o) + b"\n" for o in outputs])


def _floats(column: Sequence[float] | np.ndarray) -> Column:
    return json_numbers(np.asarray(column, dtype=np.float64))


def _ints(column: Sequence[int]) -> Column:
    """``orjson.dumps`` of each integer; OverflowError for one beyond int64."""
    values = column if isinstance(column, np.ndarray) and column.dtype == np.int64 else np.array(
        column, dtype=np.int64)
    return json_numbers(values)


def _ends(explain: Sequence[bytes | None] | Column | None, n: int) -> Column:
    """What ends each message: ``}``, or the explanation's fields after a comma (``rating_value``
    splices an explanation of more than ``{}`` in so)."""
    if explain is None:
        return cat([b"}"] * n)
    if isinstance(explain, tuple):
        return _spliced(*explain)
    try:
        blob, at = cat(cast("Sequence[bytes]", explain))
    except TypeError:  # (rare: a row without an explanation among rows with one)
        blob, at = cat([b"" if x is None else x for x in explain])
    return _spliced(blob, at)


@nb.njit(cache=True, nogil=True)
def _spliced(blob, at):  # type: ignore[no-untyped-def]
    """Each string of ``blob`` (``at``) of more than two bytes with its first byte (``{``) made a
    comma; each other one made ``}``."""
    n = at.shape[0] - 1
    out = np.empty(at[n] - at[0] + n, dtype=np.uint8)
    out_at = np.zeros(n + 1, dtype=np.int64)
    pos = 0
    for i in range(n):
        a, b = at[i], at[i + 1]
        if b - a > 2:
            out[pos] = 44
            copy_into(out, pos + 1, blob, a + 1, b - a - 1)
            pos += b - a
        else:
            out[pos] = 125
            pos += 1
        out_at[i + 1] = pos
    return out[:pos], out_at


def warmup() -> None:
    """Compile (or load from numba's cache) the messages' passes, on two rows."""
    RatingColumns("p", "s", ["a", "b"], [1.0, 2.0], [1.0, 2.0], [1.0, 2.0], [1, 2], [1, 2], ["e", "e"], [1, 2],
                  [b'{"x":1}', None]).messages()
