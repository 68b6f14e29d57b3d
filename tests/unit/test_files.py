"""stream.files: JSONL outputs appear whole or not at all; the service reads and writes files without the tools."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest

from stream.events.inputs import CsvMapping
from stream.files import iter_records, write_jsonl_atomic

SERVICE = Path(__file__).resolve().parents[2] / "stream" / "service"


def test_write_jsonl_atomic_writes_every_row(tmp_path: Path) -> None:
    out = tmp_path / "sub" / "rows.jsonl"
    rows = [{"player": "a", "rating": 1.5}, {"player": "b", "rating": -2.0}]
    assert write_jsonl_atomic(str(out), iter(rows)) == 2
    assert [orjson.loads(line) for line in out.read_bytes().splitlines()] == rows
    assert [p.name for p in out.parent.iterdir()] == ["rows.jsonl"]  # no temporary file left


def test_write_jsonl_atomic_leaves_no_partial_file(tmp_path: Path) -> None:
    out = tmp_path / "rows.jsonl"
    out.write_bytes(b"old\n")

    def failing() -> Iterator[dict[str, Any]]:
        yield {"player": "a"}
        raise RuntimeError("input broke")

    with pytest.raises(RuntimeError, match="input broke"):
        write_jsonl_atomic(str(out), failing())
    assert out.read_bytes() == b"old\n"  # the previous output untouched
    assert [p.name for p in tmp_path.iterdir()] == ["rows.jsonl"]


def test_iter_records_chains_inputs_in_order_and_skips(tmp_path: Path) -> None:
    lines = [
        {"type": "match", "event_id": f"e{i}", "pool": "p", "time": i, "a": "x", "b": "y", "score": 1.0}
        for i in range(4)
    ]
    first, second = tmp_path / "1.jsonl", tmp_path / "2.jsonl"
    first.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines[:2]))
    second.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in lines[2:]))
    got = list(iter_records((str(first), str(second)), None, CsvMapping(), False))
    assert len(got) == 4
    skipped = list(iter_records((str(first), str(second)), None, CsvMapping(), False, skip=3))
    assert skipped == got[3:]


def test_service_does_not_import_tools() -> None:
    """The service sits below the tools: ``mmr worker`` and ``mmr export`` load none of them."""
    offenders = []
    for path in sorted(SERVICE.glob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module]
            offenders += [f"{path.name}: {n}" for n in names if n == "stream.tools" or n.startswith("stream.tools.")]
    assert not offenders, offenders


def test_read_ahead_keeps_order_raises_in_place_and_stops_with_its_consumer() -> None:
    """``read_ahead``: the items in order from a thread of their own; an exception of the
    source after the items before it; a consumer that stops early stops the thread."""
    import threading

    from stream.files import read_ahead

    assert list(read_ahead(iter(range(1000)), depth=3)) == list(range(1000))

    def failing() -> Iterator[int]:
        yield 1
        yield 2
        raise ValueError("line 3")

    got: list[int] = []
    with pytest.raises(ValueError, match="line 3"):
        for x in read_ahead(failing()):
            got.append(x)
    assert got == [1, 2]
    produced: list[int] = []

    def endless() -> Iterator[int]:
        i = 0
        while True:
            produced.append(i)
            yield i
            i += 1

    stream_ = read_ahead(endless(), depth=2)
    assert [next(stream_) for _ in range(5)] == [0, 1, 2, 3, 4]
    stream_.close()
    assert not any(t.name == "mmr-read-ahead" for t in threading.enumerate())
    assert len(produced) <= 5 + 2 + 2  # the queue's depth, one in hand, and the one being put
