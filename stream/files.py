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

from stream.events.inputs import MATCH_RUN, CsvMapping, read_records


def iter_records(
    paths: tuple[str, ...], pool: str | None, mapping: CsvMapping, progress: bool, skip: int = 0,
    chunks: bool = False,
) -> Iterator[tuple[str, str, Any]]:
    """All records of all inputs in order, with a progress bar (events) on stderr.

    ``chunks``: runs of plain matches come as ``MATCH_RUN`` records (``read_records``), except
    with ``skip``, which counts events one by one."""
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
        for record in records:
            yield record
            bar.update(len(record[2]) if record[1] == MATCH_RUN else 1)


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
