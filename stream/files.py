"""Reading histories and writing JSONL outputs: the file I/O shared by the tools and the service.
Below both (it imports only ``stream.events``), so ``mmr export`` writes as ``mmr replay`` does.
"""

from __future__ import annotations

import contextlib
import itertools
import os
import secrets
import sys
import threading
from collections import deque
from collections.abc import Callable, Generator, Iterator
from pathlib import Path
from queue import Empty, Full, Queue
from typing import Any, TypeVar

import orjson

from stream.events.inputs import MATCH_RUN, CsvMapping, OnInvalid, read_records

T = TypeVar("T")


def iter_records(paths: tuple[str, ...], pool: str | None, mapping: CsvMapping, progress: bool, skip: int = 0,
                 chunks: bool = False, on_invalid: OnInvalid | None = None) -> Iterator[tuple[str, str, Any]]:
    """All records of all inputs in order (``read_records``), with a progress bar on stderr that counts
    the inputs' bytes (so it has a total and an ETA) and shows the events read. ``chunks``: runs of
    plain matches come as ``MATCH_RUN`` records, except with ``skip``, which counts events one by one."""
    chunked = chunks and not skip
    if progress:
        from tqdm import tqdm  # (imported only for a bar: a noticeable part of a short replay's start-up)
    bar = tqdm(total=_total_bytes(paths), unit="B", unit_scale=True, unit_divisor=1024, file=sys.stderr,
               mininterval=0.5, dynamic_ncols=True) if progress else None
    events = 0

    def counted(n: int) -> None:  # a read from disk: a few a megabyte, not one an event
        assert bar is not None
        bar.set_postfix_str(f"{events:,} events", refresh=False)
        bar.update(n)

    records: Iterator[tuple[str, str, Any]] = itertools.chain.from_iterable(
        read_records(p, pool, mapping, chunked, on_invalid, None if bar is None else counted) for p in paths)
    if skip:
        records = itertools.islice(records, skip, None)
    if bar is None:
        yield from records
        return
    with bar:
        for record in records:
            yield record
            events += len(record[2]) if record[1] == MATCH_RUN else 1
        bar.set_postfix_str(f"{events:,} events", refresh=False)


def _total_bytes(paths: tuple[str, ...]) -> int | None:
    """The inputs' sizes on disk; None (a bar without a total) if one cannot be read (the reader names it)."""
    try:
        return sum(os.path.getsize(p) for p in paths)
    except OSError:
        return None


class JsonlWriter:
    """JSON lines streamed to a temporary file beside ``path``, renamed onto it when the ``with`` block
    ends without an error, deleted when it raises: never a partial output, no rows held in memory."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.rows = 0
        self._tmp: str | None = None
        self._fh: Any = None

    def __enter__(self) -> JsonlWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = _create_beside(self.path)
        self._fh = os.fdopen(fd, "wb", buffering=1 << 20)
        return self

    def write_lines(self, lines: bytes | memoryview, rows: int) -> None:
        """``rows`` rows already written as JSON lines (each ending in a newline)."""
        self._fh.write(lines)
        self.rows += rows

    def __exit__(self, exc_type: object, exc: object, tb: object) -> None:
        assert self._tmp is not None
        try:
            self._fh.close()
            if exc_type is None:
                os.replace(self._tmp, self.path)
                return
        except BaseException:
            Path(self._tmp).unlink(missing_ok=True)
            raise
        Path(self._tmp).unlink(missing_ok=True)


def _create_beside(path: Path) -> tuple[int, str]:
    """A new, uniquely named hidden file beside ``path``, opened for writing: (fd, its path). Mode 0666
    less the umask: ``tempfile.mkstemp``'s 0600 would stay on the output after the rename."""
    for _ in range(100):
        tmp = str(path.parent / f".{path.name}.{secrets.token_hex(6)}")
        try:
            return os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666), tmp
        except FileExistsError:
            continue
    raise FileExistsError(f"no free temporary name beside {path}")


_DONE = object()

#: items at most waiting before one that ``prefetched`` prepares (see there)
PREPARE_AHEAD = 4


class _Raised:
    """An exception of the reading thread, raised again in the consumer at its place in order."""

    __slots__ = ("exc",)

    def __init__(self, exc: BaseException) -> None:
        self.exc = exc


def prefetched(items: Iterator[T], depth: int = 64, switch_interval: float = 2e-4,
               prepare: Callable[[T], T] | None = None, prepare_ahead: int = PREPARE_AHEAD,
               ) -> Generator[T, None, None]:
    """``items``, produced by a thread of their own: reading and decoding a history runs while the
    consumer's numba kernels run without the GIL. The same items in the same order; an exception of
    ``items`` is raised here at its place; closing this generator stops the thread and closes ``items``.

    ``switch_interval``: the GIL switch interval while both run: how long the consumer can wait for
    the GIL after each kernel returns (the reader's work is short steps, so a short interval costs it
    little).

    ``prepare``: applied to each item in the reading thread as late as it can be (once at most
    ``prepare_ahead`` items wait before it), while items are still read up to ``depth`` ahead: what a
    look-up ahead finds goes stale as the consumer moves on (prepared 64 rounds ahead, half of the
    Codeforces history's player-rounds were looked up twice, BENCHMARKS.md).
    """
    ahead = max(1, min(prepare_ahead, depth)) if prepare is not None else depth
    queue: Queue[object] = Queue(maxsize=ahead)
    stop = threading.Event()
    held: deque[T] = deque()  # read and not yet queued: at most ``depth - ahead``

    def put(item: object) -> bool:
        while not stop.is_set():
            try:
                queue.put(item, timeout=0.1)
                return True
            except Full:
                continue
        return False

    def prepared(item: T) -> T:
        return item if prepare is None else prepare(item)

    def produce() -> None:
        try:
            failure: BaseException | None = None
            source = iter(items)
            while True:
                try:
                    item = next(source)
                except StopIteration:
                    break
                except BaseException as exc:  # (raised to the consumer after the items read before it)
                    failure = exc
                    break
                held.append(item)
                # into the queue what it has room for now (only this thread puts: no wait); a wait only
                # once ``depth`` items are read ahead
                while held and (len(held) > depth - ahead or not queue.full()):
                    if not put(prepared(held.popleft())):
                        return
            while held:
                if not put(prepared(held.popleft())):
                    return
            put(_DONE if failure is None else _Raised(failure))
        except BaseException as exc:  # ``prepare`` raised: at its item's place
            put(_Raised(exc))
        finally:
            close = getattr(items, "close", None)
            if close is not None:
                close()

    previous = sys.getswitchinterval()
    sys.setswitchinterval(min(previous, switch_interval))
    thread = threading.Thread(target=produce, name="mmr-reader", daemon=True)
    thread.start()
    try:
        while True:
            item = queue.get()
            if item is _DONE:
                return
            if isinstance(item, _Raised):
                raise item.exc
            yield item  # type: ignore[misc]
    finally:
        stop.set()
        while thread.is_alive():  # let a reader blocked on a full queue see the stop
            with contextlib.suppress(Empty):
                queue.get(timeout=0.05)
        thread.join()
        sys.setswitchinterval(previous)


def write_jsonl_atomic(path: str, rows: Iterator[dict[str, Any]]) -> int:
    """Write rows to a temporary file beside ``path`` and rename: never a partial output."""
    with JsonlWriter(path) as out:
        for row in rows:
            out.write_lines(orjson.dumps(row) + b"\n", 1)
    return out.rows
