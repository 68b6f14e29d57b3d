"""stream.files: JSONL outputs appear whole or not at all; the service reads and writes files without the tools."""

from __future__ import annotations

import ast
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import orjson
import pytest
from repo_paths import ROOT

from stream.events.inputs import CsvMapping
from stream.files import iter_records, prefetched, write_jsonl_atomic

SERVICE = ROOT / "stream" / "service"


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


def test_prefetched_gives_the_items_in_order_then_the_error_at_its_place() -> None:
    import sys

    def items() -> Iterator[int]:
        yield from range(500)
        raise ValueError("bad record 500")

    before = sys.getswitchinterval()
    got: list[int] = []
    with pytest.raises(ValueError, match="bad record 500"):
        for x in prefetched(items(), depth=3):
            got.append(x)
    assert got == list(range(500))
    assert sys.getswitchinterval() == before


def test_closing_prefetched_stops_its_thread_and_closes_the_source() -> None:
    import threading

    closed = threading.Event()

    def endless() -> Iterator[int]:
        try:
            n = 0
            while True:
                yield n
                n += 1
        finally:
            closed.set()

    gen = prefetched(endless(), depth=2)
    assert [next(gen) for _ in range(10)] == list(range(10))
    gen.close()  # the reader is blocked on its full queue: it must see the stop
    assert closed.wait(5)
    assert not any(t.name == "mmr-reader" and t.is_alive() for t in threading.enumerate())


def test_prefetched_prepares_an_item_late_and_still_reads_depth_ahead() -> None:
    """``prepare`` runs on an item only once at most ``prepare_ahead`` items wait before it (a look-up ahead
    goes stale as the consumer moves on), while items are read up to ``depth`` ahead; with the prepared items
    and an error of ``prepare`` in their places. Prepared at reading, 10 ahead, the first check would fail."""
    import time

    taken = 0
    read_at: dict[int, int] = {}
    prepared_at: dict[int, int] = {}

    def items() -> Iterator[int]:
        for k in range(60):
            read_at[k] = taken
            yield k

    def prepare(k: int) -> int:
        prepared_at[k] = taken
        if k == 50:
            raise ValueError("bad item 50")
        return -k

    got = []
    with pytest.raises(ValueError, match="bad item 50"):
        for x in prefetched(items(), depth=10, prepare=prepare, prepare_ahead=2):
            got.append(x)
            taken += 1
            time.sleep(0.004)  # a consumer slower than the reader: the reader waits on it
    assert got == [-k for k in range(50)]
    assert all(prepared_at[k] >= k - 2 for k in prepared_at), prepared_at
    assert max(k - read_at[k] for k in read_at) >= 9  # read ahead by depth all the same


@pytest.fixture
def umask_027() -> Iterator[int]:
    """The process's umask set to 027 (group may read, others nothing) for the test, then restored."""
    old = os.umask(0o027)
    try:
        yield 0o027
    finally:
        os.umask(old)


def test_outputs_follow_the_umask_like_any_new_file(tmp_path: Path, umask_027: int) -> None:
    """An output is made as a temporary file (mode 0600) and renamed: it gets the mode ``open`` would
    give a new file under the umask (0640 here), not 0600, also when it replaces an older output."""
    plain = tmp_path / "plain"
    plain.write_bytes(b"")
    expected = stat.S_IMODE(plain.stat().st_mode)
    assert expected == 0o640
    out = tmp_path / "rows.jsonl"
    write_jsonl_atomic(str(out), iter([{"player": "a"}]))
    assert stat.S_IMODE(out.stat().st_mode) == expected
    write_jsonl_atomic(str(out), iter([{"player": "b"}]))
    assert stat.S_IMODE(out.stat().st_mode) == expected


def test_replay_out_and_history_follow_the_umask(tmp_path: Path, umask_027: int) -> None:
    """``mmr replay --out`` and ``--history`` (the streamed writer) under the umask."""
    from click.testing import CliRunner

    from stream.tools.replay import replay

    src = tmp_path / "m.jsonl"
    src.write_bytes(b"".join(orjson.dumps({"type": "match", "pool": "p", "event_id": f"e{i}", "time": i,
                                           "a": "x", "b": "y", "score": 1.0}) + b"\n" for i in range(3)))
    out, history = tmp_path / "ratings.jsonl", tmp_path / "history.jsonl"
    res = CliRunner().invoke(replay, [str(src), "--embedded", "--no-progress", "--system", "elo",
                                      "--out", str(out), "--history", str(history)])
    assert res.exit_code == 0, res.output
    assert {p.name: stat.S_IMODE(p.stat().st_mode) for p in (out, history)} == {"ratings.jsonl": 0o640,
                                                                                  "history.jsonl": 0o640}
