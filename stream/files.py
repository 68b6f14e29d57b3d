"""Reading histories and writing JSONL outputs: the file I/O shared by the tools and the service.

Sits below both ``stream.tools`` and ``stream.service`` (it imports only ``stream.events``), so
``mmr export`` (service) writes its output the same way as ``mmr replay`` (tools) without the
service importing the tools.
"""

from __future__ import annotations

import itertools
import os
import queue
import sys
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any, TypeVar, cast

import orjson
from tqdm import tqdm

from stream.events.inputs import MATCH_RUN, CsvMapping, read_records

_T = TypeVar("_T")


def iter_records(
    paths: tuple[str, ...], pool: str | None, mapping: CsvMapping, progress: bool, skip: int = 0,
    chunks: bool = False,
) -> Iterator[tuple[str, str, Any]]:
    """All records of all inputs in order, with a progress bar (events) on stderr.

    ``chunks``: runs of plain matches come as ``MATCH_RUN`` records (``read_records``), read
    ahead on a thread of their own (``read_ahead``), except with ``skip``, which counts events
    one by one."""
    chunked = chunks and not skip
    records: Iterator[tuple[str, str, Any]] = itertools.chain.from_iterable(
        read_records(p, pool, mapping, chunked) for p in paths
    )
    if skip:
        records = itertools.islice(records, skip, None)
    if not chunked:
        yield from tqdm(records, unit=" events", disable=not progress, file=sys.stderr, mininterval=0.5)
        return
    with tqdm(unit=" events", disable=not progress, file=sys.stderr, mininterval=0.5) as bar:
        for record in read_ahead(records):
            yield record
            bar.update(len(record[2]) if record[1] == MATCH_RUN else 1)


_DONE = object()


def read_ahead(items: Iterator[_T], depth: int = 4) -> Iterator[_T]:
    """``items``, produced by a thread of its own up to ``depth`` ahead of the consumer.

    Why: reading and checking a history is Python work, rating it mostly numba kernels that
    release the GIL; with the reading on its own thread the two overlap instead of taking
    turns. Same items in the same order; an exception of ``items`` is raised here at its
    place in the sequence (after the items before it). A consumer that stops early stops the
    thread at its next item."""
    out: queue.Queue[tuple[object, BaseException | None]] = queue.Queue(maxsize=depth)
    stop = threading.Event()

    def put(entry: tuple[object, BaseException | None]) -> bool:
        """Queue ``entry``; False once the consumer stopped."""
        while not stop.is_set():
            try:
                out.put(entry, timeout=0.1)
                return True
            except queue.Full:
                continue
        return False

    def produce() -> None:
        try:
            for item in items:
                if not put((item, None)):
                    return
            put((_DONE, None))
        except BaseException as exc:  # handed to the consumer, raised there
            put((_DONE, exc))

    thread = threading.Thread(target=produce, name="mmr-read-ahead", daemon=True)
    thread.start()
    try:
        while True:
            item, exc = out.get()
            if item is _DONE:
                if exc is not None:
                    raise exc
                return
            yield cast("_T", item)
    finally:
        stop.set()
        thread.join()


def write_jsonl_atomic(path: str, rows: Iterator[dict[str, Any]]) -> int:
    """Write rows to a temporary file beside ``path`` and rename: never a partial output."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
    n = 0
    try:
        with os.fdopen(fd, "wb") as fh:
            for row in rows:
                fh.write(orjson.dumps(row) + b"\n")
                n += 1
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return n
