"""Reading history files: event JSONL, the Elo-MMR reference's contest JSONL, 1-v-1 CSV.

Formats are detected by content (first non-empty line), compression by suffix (``.gz``, ``.xz``).
Every record comes with its "file:line", so a bad one is reported precisely and nothing after it
is applied: whatever a file holds (bytes that are not UTF-8, a damaged archive, CSV syntax),
reading it gives valid records or raises ``InputError`` naming the file and line. Given
``on_invalid`` (``--skip-invalid``, ``SkippedLines``) a reader hands it each invalid record's error
and reads on; what stops the file itself (unreadable, a CSV header lacking a column) still raises.
"""

from __future__ import annotations

import csv
import gzip
import hashlib
import io
import itertools
import lzma
import math
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal
from operator import itemgetter
from pathlib import Path
from typing import IO, Any, TypeVar

import numpy as np
import orjson

from stream import errors
from stream.events.check import first_repeat
from stream.events.model import MAX_ID_LENGTH, MatchBatch, MatchEvent, MatchRun, RoundEvent
from stream.events.schema import limits
from stream.events.validate import InvalidEvent, decode_event, plain_match_rows
from stream.ratings.base import IntArray

#: ``maxLength`` of ``event_id`` and ``round_id`` in ``schemas/`` (player ids and pools: MAX_ID_LENGTH).
#: Ids this reader derives from names must fit, or the service dead-letters what the embedded
#: replay accepted.
MAX_EVENT_ID_LENGTH = limits().event_id_length
MAX_ROUND_ID_LENGTH = limits().round_id_length
#: the range of ``time`` in the schemas (ms since the epoch)
_MIN_TIME, _MAX_TIME = limits().min_time, limits().max_time
_ID_DIGEST_CHARS = 16  # blake2b, 8 bytes, hex
#: what reading a file can raise besides InputError: the file system, a damaged or cut ``.gz``/
#: ``.xz``, and CSV syntax (a field over the csv module's size limit, say)
_READ_ERRORS = (OSError, EOFError, lzma.LZMAError, zlib.error, csv.Error)
_T = TypeVar("_T")


def bounded_id(text: str, limit: int) -> str:
    """``text`` itself when it fits in ``limit`` characters, else a readable prefix + ``~`` + a digest of
    the whole text: deterministic (a re-read or re-publish stays a no-op) and distinct for distinct texts."""
    if len(text) <= limit:
        return text
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=_ID_DIGEST_CHARS // 2).hexdigest()
    return f"{text[: limit - len(digest) - 1]}~{digest}"


class InputError(errors.InputError, ValueError):
    """A bad record in an input file: names the file, the line and the reason."""

    def __init__(self, where: str, reason: str) -> None:
        self.where = where
        self.reason = reason
        super().__init__(f"{where}: {reason}")


#: receives the error of each invalid record that is skipped (``read_records``' ``on_invalid``)
OnInvalid = Callable[[InputError], None]


class SkippedLines:
    """The invalid records a reading skipped (``on_invalid``): how many, and the first ``keep``
    errors, each naming its file and line, for the one report at the end."""

    def __init__(self, keep: int = 5) -> None:
        self.keep = keep
        self.count = 0
        self.first: list[InputError] = []

    def __call__(self, exc: InputError) -> None:
        self.count += 1
        if len(self.first) < self.keep:
            self.first.append(exc)

    def report(self) -> list[str]:
        """Lines for stderr: the count, then the first reasons with their file:line (none when nothing was skipped)."""
        if not self.count:
            return []
        shown = f", the first {len(self.first)}" if self.count > len(self.first) else ""
        return [f"skipped {self.count} invalid record(s){shown}:", *(f"  {exc}" for exc in self.first)]

    def as_dict(self) -> dict[str, Any]:
        """The same for ``--json``: ``{"count", "first": ["file:line: reason", ...]}``."""
        return {"count": self.count, "first": [str(exc) for exc in self.first]}


def _or_skip(on_invalid: OnInvalid | None, read: Callable[..., _T], *args: Any) -> Iterable[_T]:
    """``read(*args)``, one record, as a list; with ``on_invalid`` an InputError goes to it (nothing returned)."""
    try:
        return [read(*args)]
    except InputError as exc:
        if on_invalid is None:
            raise
        on_invalid(exc)
        return ()


@dataclass(frozen=True)
class CsvMapping:
    """Columns of a 1-v-1 CSV. Defaults fit the international football results file."""

    a: str = "home_team"
    b: str = "away_team"
    score_a: str = "home_score"
    score_b: str = "away_score"
    time: str = "date"
    #: optional: when the header has it, a true value (TRUE, true, 1, yes) marks a neutral match
    #: (no side holds an advantage); absent or false, ``a`` is the side that may hold one
    neutral: str = "neutral"


_TRUE = frozenset({"true", "1", "yes", "y", "t"})
_FALSE = frozenset({"false", "0", "no", "n", "f", ""})


def _neutral(text: str | None, where: str) -> bool:
    low = (text or "").strip().lower()
    if low in _TRUE:
        return True
    if low in _FALSE:
        return False
    raise InputError(where, f"neutral must be true or false (got {text!r})")


class _CountingRaw(io.RawIOBase):
    """A binary file that reports the size of each read to ``counted``."""

    def __init__(self, raw: Any, counted: Callable[[int], None]) -> None:
        super().__init__()
        self._raw = raw
        self._counted = counted

    @classmethod
    def buffered(cls, path: str, counted: Callable[[int], None]) -> io.BufferedReader:
        return io.BufferedReader(cls(open(path, "rb", buffering=0), counted))

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int | None:
        n: int | None = self._raw.readinto(buffer)
        if n:
            self._counted(n)
        return n

    def close(self) -> None:
        try:
            self._raw.close()
        finally:
            super().close()


def open_text(path: str | Path, counted: Callable[[int], None] | None = None) -> IO[str]:
    """The file's text. Bytes that are not UTF-8 come out as lone surrogates (``surrogateescape``)
    instead of failing the whole read, so the record holding them is reported with its line:
    the JSON parser refuses them, and so does ``_check_id`` in a CSV name.

    ``counted``: told the size of each read from disk, for a progress bar with a total. Why bytes on
    disk: their total is known before reading (the file's size), whatever the format; counted below
    the decompressor, the bar reaches its total exactly at the file's end."""
    p = str(path)
    opener: Any = gzip.open if p.endswith(".gz") else lzma.open if p.endswith(".xz") else None
    if counted is None and opener is None:
        return open(p, encoding="utf-8-sig", errors="surrogateescape")
    source: Any = p if counted is None else _CountingRaw.buffered(p, counted)
    return io.TextIOWrapper(source if opener is None else opener(source, "rb"), encoding="utf-8-sig",
                            errors="surrogateescape")


def _opened(path: str | Path, counted: Callable[[int], None] | None = None) -> IO[str]:
    """``open_text``, a failure to open raised as InputError naming the file."""
    try:
        return open_text(path, counted)
    except _READ_ERRORS as exc:
        raise InputError(str(path), f"cannot read the file: {exc}") from None


def _reading(items: Iterable[_T], path: str, line: Callable[[], int] | None = None) -> Iterator[_T]:
    """``items`` (read from ``path``), a read error raised as InputError at ``line()``, the number of the
    line being read (by default, of a text file's)."""
    it = iter(items)
    count = 0
    while True:
        try:
            item = next(it)
        except StopIteration:
            return
        except _READ_ERRORS as exc:
            raise InputError(f"{path}:{line() if line else count + 1}", f"cannot read the file: {exc}") from None
        count += 1
        yield item


def detect_format(path: str | Path) -> str:
    """'events', 'contests' or 'csv', from the first non-empty line."""
    with _opened(path) as fh:
        for line in _reading(fh, str(path)):
            text = line.strip()
            if not text:
                continue
            if text.startswith("{"):
                try:
                    obj = orjson.loads(text)
                except orjson.JSONDecodeError:
                    return "events"  # reported with its line by the reader
                if isinstance(obj, dict) and "type" not in obj and "standings" in obj:
                    return "contests"
                return "events"
            return "csv"
    return "events"


def _check_id(value: Any, what: str, where: str) -> str:
    if not isinstance(value, str) or not value or len(value) > MAX_ID_LENGTH:
        raise InputError(where, f"{what} must be a non-empty string of at most {MAX_ID_LENGTH} characters")
    if not value.isascii():
        try:
            value.encode()
        except UnicodeEncodeError:  # bytes that are not UTF-8 (see open_text)
            raise InputError(where, f"{what} is not valid UTF-8") from None
    return value


def _standings_columns(standings: list[Any]) -> tuple[list[str], IntArray] | None:
    """Columns of well-formed standings (rows exactly ``[str, int, int]``, ``0 <= lo <= hi < n``), checked by
    C-level passes over each column; None when anything is off (``_standings_checked`` then names the row).

    Rows of 3 values in all, none shorter than 3 (``itemgetter(2)`` reaches each), are each exactly 3 long.
    The columns are cut by ``itemgetter`` rather than ``zip(*standings)``, which makes an iterator per row."""
    n = len(standings)
    if n == 0 or set(map(type, standings)) != {list} or sum(map(len, standings)) != 3 * n:
        return None
    try:
        names = list(map(_FIRST, standings))
        los = list(map(_SECOND, standings))
        his = list(map(_THIRD, standings))
    except IndexError:
        return None
    if set(map(type, names)) != {str} or set(map(type, los)) != {int} or set(map(type, his)) != {int}:
        return None
    if min(map(len, names)) < 1 or max(map(len, names)) > MAX_ID_LENGTH:
        return None
    try:  # a JSON integer may be up to 2^64 - 1 (or below -2^63)
        lo = np.array(los, dtype=np.int64)
        hi = np.array(his, dtype=np.int64)
    except OverflowError:
        return None
    if int(lo.min()) < 0 or int(hi.min()) < 0 or int(hi.max()) >= n or bool((lo > hi).any()):
        return None
    return names, lo + 1


_FIRST, _SECOND, _THIRD = itemgetter(0), itemgetter(1), itemgetter(2)


def _standings_checked(standings: list[Any], where: str) -> tuple[list[str], IntArray]:
    """Row-by-row validation with a precise message for the first bad row."""
    n = len(standings)
    players: list[str] = []
    ranks = np.empty(n, dtype=np.int64)
    for i, row in enumerate(standings):
        if not isinstance(row, list) or len(row) != 3:
            raise InputError(where, f"standings[{i}] must be [player, lo, hi]")
        name, lo, hi = row
        players.append(_check_id(name, f"standings[{i}] player", where))
        if not (type(lo) is int and type(hi) is int and 0 <= lo <= hi < n):
            raise InputError(where, f"standings[{i}]: bad rank range [{lo}, {hi}] for {n} players")
        ranks[i] = lo + 1
    return players, ranks


def contest_to_round(obj: Any, where: str, pool: str, line_no: int, raw: str | bytes | None = None) -> RoundEvent:
    """One contest line of the reference format → RoundEvent (rank = lo + 1).

    The event id is the contest's name (``bounded_id``) plus a digest of its line (``raw``, or the
    parsed object): re-reading a file gives the same ids, while two different contests that share a
    name are both rated."""
    if not isinstance(obj, dict) or not isinstance(obj.get("standings"), list) or not obj["standings"]:
        raise InputError(where, "a contest needs a 'standings' list of at least one player")
    standings = obj["standings"]
    players, ranks = _standings_columns(standings) or _standings_checked(standings, where)
    if len(set(players)) != len(players):
        raise InputError(where, f"player {first_repeat(players)!r} appears twice in the contest")
    name = obj.get("name", obj.get("id", line_no))
    t = obj.get("time_seconds", 0)
    weight = obj.get("weight", 1.0)
    ceiling = obj.get("perf_ceiling", math.inf)
    for what, v in (("time_seconds", t), ("weight", weight), ("perf_ceiling", ceiling)):
        if not isinstance(v, int | float) or isinstance(v, bool) or (what != "perf_ceiling" and not math.isfinite(v)):
            raise InputError(where, f"{what} must be a finite number")
    if weight <= 0:
        raise InputError(where, "weight must be positive")
    time_ms = _milliseconds(t)
    if not _MIN_TIME <= time_ms <= _MAX_TIME:
        raise InputError(where, "time_seconds is out of range")
    full_id = str(obj.get("id", name))
    if not full_id:  # the round_id; the schemas (and so the service) refuse an empty one
        raise InputError(where, "the contest's name (or id) must not be empty")
    round_id = bounded_id(full_id, MAX_ROUND_ID_LENGTH)
    if raw is None:
        raw = orjson.dumps(obj, option=orjson.OPT_SORT_KEYS)
    digest = hashlib.blake2b(raw.encode() if isinstance(raw, str) else raw,
                             digest_size=_ID_DIGEST_CHARS // 2).hexdigest()
    prefix = bounded_id(full_id, MAX_EVENT_ID_LENGTH - len("contest:") - 1 - len(digest))
    return RoundEvent(event_id=f"contest:{prefix}:{digest}", pool=pool, round_id=round_id, time=time_ms,
                      players=players, ranks=ranks, weight=float(weight), perf_ceiling=float(ceiling))


def _milliseconds(seconds: int | float) -> int:
    """``seconds`` × 1000 toward zero, exact: a float as the decimal it prints as (``1.001`` s is 1001 ms)."""
    if isinstance(seconds, int):
        return seconds * 1000
    return int(Decimal(repr(seconds)) * 1000)


def _parse_time(text: str, where: str) -> int:
    """Milliseconds since the epoch: a number of them (the fraction dropped), or an ISO 8601
    date or time, UTC unless it gives its offset."""
    text = text.strip()
    whole, _, fraction = text.partition(".")
    try:
        if (whole + fraction).isdecimal():
            ms = int(whole or "0")  # exact: through a float, 1234567890123456789 became ...768
        else:
            moment = datetime.fromisoformat(text)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            ms = int(moment.timestamp() * 1000)
    except (ValueError, OverflowError):
        raise InputError(where, f"cannot parse time {text!r}") from None
    if not _MIN_TIME <= ms <= _MAX_TIME:
        raise InputError(where, f"time {text!r} is out of range")
    return ms


def _read_csv(path: str, mapping: CsvMapping, pool: str, on_invalid: OnInvalid | None = None,
              counted: Callable[[int], None] | None = None) -> Iterator[tuple[str, Any]]:
    with _opened(path, counted) as fh:
        reader = csv.DictReader(fh)
        columns = (mapping.a, mapping.b, mapping.score_a, mapping.score_b, mapping.time)
        try:
            header = reader.fieldnames or []
        except _READ_ERRORS as exc:
            raise InputError(f"{path}:1", f"cannot read the file: {exc}") from None
        missing = [c for c in columns if c not in header]
        if missing:
            raise InputError(f"{path}:1", f"missing CSV column(s) {', '.join(missing)}")
        has_neutral = mapping.neutral in header
        for row in _reading(reader, path, lambda: reader.line_num + 1):
            where = f"{path}:{reader.line_num}"
            eid = bounded_id(f"{Path(path).name}:{reader.line_num}", MAX_EVENT_ID_LENGTH)
            for m in _or_skip(on_invalid, _csv_match, row, mapping, len(header), where, eid, pool, has_neutral):
                yield where, m


def _csv_match(row: dict[str, Any], mapping: CsvMapping, n_header: int, where: str, eid: str, pool: str,
               has_neutral: bool = False) -> MatchEvent:
    """The match of one CSV row (InputError naming ``where`` if it is not one)."""
    columns = (mapping.a, mapping.b, mapping.score_a, mapping.score_b, mapping.time)
    if any(row[c] is None for c in columns):  # DictReader's filler for a short row
        raise InputError(where, f"fewer fields than the header's {n_header}")
    a = _check_id(row[mapping.a], mapping.a, where)
    b = _check_id(row[mapping.b], mapping.b, where)
    if a == b:
        raise InputError(where, f"{a!r} cannot play themself")
    try:
        sa, sb = float(row[mapping.score_a]), float(row[mapping.score_b])
    except ValueError:
        raise InputError(where, "scores must be numbers") from None
    if not (math.isfinite(sa) and math.isfinite(sb)):
        raise InputError(where, "scores must be finite")
    score = 1.0 if sa > sb else 0.0 if sa < sb else 0.5
    t = _parse_time(row[mapping.time], where)
    neutral = has_neutral and _neutral(row[mapping.neutral], where)
    return MatchEvent(event_id=eid, pool=pool, time=t, a=a, b=b, score=score, neutral=neutral)


#: the record type of a ``MatchRun`` (``read_records(..., chunks=True)``)
MATCH_RUN = "match_run"
#: lines read and checked together by ``read_records(..., chunks=True)``
CHUNK_LINES = 2048


def read_records(path: str | Path, pool: str | None = None, csv_mapping: CsvMapping | None = None,
                 chunks: bool = False, on_invalid: OnInvalid | None = None,
                 counted: Callable[[int], None] | None = None) -> Iterator[tuple[str, str, Any]]:
    """Yield ``(where, type, value)`` for every record of one file, in file order: 'round' (RoundEvent),
    'match' (MatchEvent), 'match_batch' or 'match_columns' (list of MatchEvent), or 'round_result'/
    'round_completed' (the validated dict). Raises InputError at the first bad record, unless
    ``on_invalid`` takes it; ``counted``: see ``open_text``.

    ``chunks=True`` (the embedded replay): runs of plain ``match`` lines of one pool come as one
    ``MATCH_RUN`` record (a ``MatchRun``; ``where`` is its first line), checked column by column
    (``_match_runs``). A block holding anything else is read line by line, so the records mean the
    same matches and a bad line raises the same error at the same line."""
    p = str(path)
    if pool is not None:
        _check_id(pool, "pool", p)
    fmt = detect_format(p)
    if fmt == "csv":
        for where, m in _read_csv(p, csv_mapping or CsvMapping(), pool or "default", on_invalid, counted):
            yield where, "match", m
        return
    with _opened(p, counted) as fh:
        lines = enumerate(_reading(fh, p), 1)
        if fmt == "contests" or not chunks:
            read = _contest_record if fmt == "contests" else _record
            for line_no, line in lines:
                if line and not line.isspace():  # (no copy of a long line, as strip makes)
                    yield from _or_skip(on_invalid, read, p, line_no, line, pool)
            return
        while block := list(itertools.islice(lines, CHUNK_LINES)):
            runs = _match_runs(p, block, pool)
            if runs is not None:
                for run in runs:
                    yield run.where(0), MATCH_RUN, run
                continue
            for line_no, line in block:
                if line and not line.isspace():
                    yield from _or_skip(on_invalid, _record, p, line_no, line, pool)


def _record(p: str, line_no: int, line: str, pool: str | None) -> tuple[str, str, Any]:
    """The event of a non-blank line of an event file; InputError naming the line."""
    where = f"{p}:{line_no}"
    obj = _json(line, where)
    if not isinstance(obj, dict):
        raise InputError(where, "an event must be a JSON object")
    if pool is not None:
        obj["pool"] = pool
    try:
        etype, value = decode_event(obj)
    except InvalidEvent as exc:
        raise InputError(where, str(exc)) from None
    return where, etype, value


def _contest_record(p: str, line_no: int, line: str, pool: str | None) -> tuple[str, str, RoundEvent]:
    """The round of a non-blank line of a contest file; InputError naming the line."""
    where = f"{p}:{line_no}"
    return where, "round", contest_to_round(_json(line, where), where, pool or "default", line_no, line.strip())


def _json(line: str, where: str) -> Any:
    """The JSON value of a line (InputError naming ``where`` if it is not JSON)."""
    try:
        return orjson.loads(line)
    except orjson.JSONDecodeError as exc:
        raise InputError(where, f"bad JSON: {exc}") from None


_STR_TYPE = {str}


def _match_runs(p: str, block: list[tuple[int, str]], pool: str | None) -> list[MatchRun] | None:
    """The lines of ``block`` as runs of matches of one pool, when every line is a plain ``match``
    (``validate.plain_match_rows``); None when any is anything else: the caller reads it line by line."""
    try:
        objs = list(map(orjson.loads, [line for _, line in block]))
    except orjson.JSONDecodeError:
        return None
    if set(map(type, objs)) != {dict}:
        return None
    # ``count`` compares with ==: a ``type`` of any JSON value (a list, unhashable) is just not "match"
    if list(map(dict.get, objs, itertools.repeat("type"))).count("match") != len(objs):
        return None
    rows = plain_match_rows(objs)
    if rows is None:
        return None
    (ids, times, a, b, scores), neutral = rows
    line_nos = [n for n, _ in block]
    if pool is not None:  # (checked by the caller) every event's own pool is replaced
        return [MatchRun(MatchBatch(pool, event_ids=ids, a=a, b=b, scores=scores, times=times, neutral=neutral),
                         p, line_nos)]
    pools: list[Any] = list(map(dict.get, objs, itertools.repeat("pool")))
    if set(map(type, pools)) != _STR_TYPE:
        return None
    lengths = list(map(len, pools))
    if min(lengths) < 1 or max(lengths) > limits().pool_length:
        return None
    runs = []
    i = 0
    for name, group in itertools.groupby(pools):
        j = i + sum(1 for _ in group)
        flags = None if neutral is None or True not in neutral[i:j] else neutral[i:j]
        batch = MatchBatch(name, event_ids=ids[i:j], a=a[i:j], b=b[i:j], scores=scores[i:j], times=times[i:j],
                           neutral=flags)
        runs.append(MatchRun(batch, p, line_nos[i:j]))
        i = j
    return runs
