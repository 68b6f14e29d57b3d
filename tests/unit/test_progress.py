"""The progress bar of ``mmr replay``, ``mmr eval`` and publishing (stream.files.iter_records): a total
(the inputs' bytes on disk) and an ETA, reached at the end, on stderr; none with ``--no-progress``."""

from __future__ import annotations

import gzip
import lzma
import re
from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner
from tqdm import tqdm

from stream.events.inputs import CsvMapping
from stream.files import iter_records


def _events(n: int, first: int = 0) -> bytes:
    return b"".join(orjson.dumps({"type": "match", "event_id": f"e{i}", "pool": "p", "time": i, "a": f"x{i % 7}",
                                  "b": f"y{i % 5}", "score": 1.0}) + b"\n" for i in range(first, first + n))


def _inputs(tmp_path: Path) -> tuple[Path, ...]:
    plain, gz, xz = tmp_path / "a.jsonl", tmp_path / "b.jsonl.gz", tmp_path / "c.jsonl.xz"
    plain.write_bytes(_events(300))
    gz.write_bytes(gzip.compress(_events(200, 300)))
    xz.write_bytes(lzma.compress(_events(100, 500)))
    return plain, gz, xz


def _final_bar(err: str) -> str:
    """The bar as last drawn (tqdm redraws it on one line with carriage returns)."""
    return [part for part in re.split(r"[\r\n]+", err) if "%|" in part][-1]


@pytest.mark.parametrize("chunks", [False, True])
def test_the_bar_counts_bytes_on_disk_to_their_total_with_the_events_beside(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], chunks: bool) -> None:
    paths = _inputs(tmp_path)
    total = sum(p.stat().st_size for p in paths)
    records = list(iter_records(tuple(map(str, paths)), None, CsvMapping(), True, chunks=chunks))
    assert sum(len(r[2]) if r[1] == "match_run" else 1 for r in records) == 600
    bar = _final_bar(capsys.readouterr().err)
    size = tqdm.format_sizeof(total, "", 1024)
    assert bar.startswith("100%") and f"{size}/{size}" in bar, bar
    assert "600 events" in bar, bar


def test_no_progress_writes_nothing(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = tuple(map(str, _inputs(tmp_path)))
    assert len(list(iter_records(paths, None, CsvMapping(), False, skip=250))) == 350
    assert capsys.readouterr().err == ""


def test_mmr_replay_shows_the_bar_with_its_total(tmp_path: Path) -> None:
    from stream.tools.replay import replay

    src = tmp_path / "h.jsonl.gz"
    src.write_bytes(gzip.compress(_events(400)))
    size = tqdm.format_sizeof(src.stat().st_size, "", 1024)
    res = CliRunner().invoke(replay, [str(src), "--system", "elo", "--embedded", "--out", str(tmp_path / "o.jsonl")])
    assert res.exit_code == 0, res.output
    bar = _final_bar(res.stderr)
    assert bar.startswith("100%") and f"{size}/{size}" in bar and "400 events" in bar, res.stderr
    quiet = CliRunner().invoke(replay, [str(src), "--system", "elo", "--embedded", "--no-progress",
                                        "--out", str(tmp_path / "q.jsonl")])
    assert quiet.exit_code == 0 and "100%" not in quiet.stderr
