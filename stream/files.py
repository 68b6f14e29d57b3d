"""Reading histories and writing JSONL outputs: the file I/O shared by the tools and the service.

Sits below both ``stream.tools`` and ``stream.service`` (it imports only ``stream.events``), so
``mmr export`` (service) writes its output the same way as ``mmr replay`` (tools) without the
service importing the tools.
"""

from __future__ import annotations

import itertools
import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
from tqdm import tqdm

from stream.events.inputs import CsvMapping, read_records


def iter_records(
    paths: tuple[str, ...], pool: str | None, mapping: CsvMapping, progress: bool, skip: int = 0
) -> Iterator[tuple[str, str, Any]]:
    """All records of all inputs in order, with a progress bar (records) on stderr."""
    records: Iterator[tuple[str, str, Any]] = itertools.chain.from_iterable(
        read_records(p, pool, mapping) for p in paths
    )
    if skip:
        records = itertools.islice(records, skip, None)
    bar = tqdm(records, unit=" events", disable=not progress, file=sys.stderr, mininterval=0.5)
    yield from bar


class JsonlWriter:
    """JSON lines streamed to a temporary file beside ``path``, renamed onto it when the ``with``
    block ends without an error and deleted when it raises: never a partial output, and rows are
    not held in memory (``mmr replay --history`` writes millions)."""

    def __init__(self, path: str) -> None:
        self.path = Path(path)
        self.rows = 0
        self._tmp: str | None = None
        self._fh: Any = None

    def __enter__(self) -> JsonlWriter:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        fd, self._tmp = tempfile.mkstemp(prefix=f".{self.path.name}.", dir=self.path.parent)
        self._fh = os.fdopen(fd, "wb", buffering=1 << 20)
        return self

    def write(self, row: dict[str, Any]) -> None:
        self._fh.write(_line(row))
        self.rows += 1

    def write_many(self, rows: list[dict[str, Any]]) -> None:
        self._fh.writelines(map(_line, rows))
        self.rows += len(rows)

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


def _line(row: dict[str, Any]) -> bytes:
    return orjson.dumps(row) + b"\n"


def write_jsonl_atomic(path: str, rows: Iterator[dict[str, Any]]) -> int:
    """Write rows to a temporary file beside ``path`` and rename: never a partial output."""
    with JsonlWriter(path) as out:
        for row in rows:
            out.write(row)
    return out.rows
