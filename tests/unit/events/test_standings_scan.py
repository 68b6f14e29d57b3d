"""Contest lines read by the numba column scan give what decoding the whole line gives, or fall back."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from stream.events import _standings_scan
from stream.events.inputs import InputError, read_records

GOOD = '{"name":"R1","time_seconds":100,"standings":[["ann",0,0],["bob",1,2],["cy",1,2]]}'
LINES = {
    "plain": GOOD,
    "spaces": ' { "name" : "R2" , "standings" : [ [ "a b" , 0 , 1 ] ,\t[ "c" , 0 , 1 ] ] , "weight" : 0.5 } ',
    "standings first": '{"standings":[["x",0,0],["y",1,1]],"time_seconds":5,"id":7}',
    "nested standings key": '{"meta":{"standings":[["z",0,0]]},"standings":[["x",0,0],["y",1,1]],"name":"n"}',
    "a standings string": '{"name":"\\"standings\\":[[\\"q\\",0,0]]","standings":[["x",0,0],["y",0,1]]}',
    "escaped name": '{"name":"E","standings":[["a\\u0062",0,0],["b",1,1]]}',
    "non-ascii name": '{"name":"U","standings":[["jos\u00e9",0,0],["b",1,1]]}',
    "float rank": '{"name":"F","standings":[["a",0.0,0],["b",1,1]]}',
    "negative rank": '{"name":"N","standings":[["a",-1,0],["b",1,1]]}',
    "leading zero": '{"name":"Z","standings":[["a",00,0],["b",1,1]]}',
    "lo above hi": '{"name":"L","standings":[["a",1,0],["b",1,1]]}',
    "hi past the end": '{"name":"H","standings":[["a",0,2],["b",1,1]]}',
    "empty name": '{"name":"M","standings":[["",0,0],["b",1,1]]}',
    "long name": '{"name":"M","standings":[["' + "x" * 300 + '",0,0],["b",1,1]]}',
    "empty standings": '{"name":"M","standings":[]}',
    "twice": '{"standings":[["a",0,0],["b",1,1]],"standings":[["c",0,0],["d",1,1]]}',
    "escaped key twice": '{"standings":[["a",0,0],["b",1,1]],"st\\u0061ndings":[["c",0,0],["d",1,1]]}',
    "escaped key": '{"name":"K","st\\u0061ndings":[["c",0,0],["d",1,1]]}',
    "trailing garbage": GOOD + " x",
    "extra row field": '{"name":"X","standings":[["a",0,0,1],["b",1,1]]}',
    "duplicate player": '{"name":"D","standings":[["a",0,0],["a",1,1]]}',
    "huge rank": '{"name":"B","standings":[["a",0,123456789012345678901],["b",1,1]]}',
    "not an object": '[["a",0,0]]',
    "form feed before": '\f' + GOOD,
    "missing bracket": '{"name":"Q","standings":[["a",0,0],["b",1,1]}',
}


def _read(path: Path) -> list[tuple[str, str, object]] | str:
    try:
        return [(w, t, (v.event_id, v.pool, v.round_id, v.time, v.players, v.ranks.tolist(), v.ranks.dtype,
                        v.weight, v.perf_ceiling)) for w, t, v in read_records(path)]
    except InputError as exc:
        return f"InputError: {exc}"


@pytest.mark.parametrize("case", sorted(LINES))
def test_scan_reads_each_line_as_the_whole_decoding_does(tmp_path: Path, case: str,
                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "c.jsonl"
    path.write_text(GOOD + "\n" + LINES[case] + "\n", encoding="utf-8")
    fast = _read(path)
    monkeypatch.setattr(_standings_scan, "scan_contest", lambda line, max_id: None)
    assert _read(path) == fast


def test_the_scan_takes_the_plain_lines_and_leaves_the_others() -> None:
    taken = {case for case, line in LINES.items() if _standings_scan.scan_contest(line, 256) is not None}
    assert taken == {"plain", "spaces", "standings first", "nested standings key", "a standings string",
                     "duplicate player"}
    obj, players, ranks = _standings_scan.scan_contest(LINES["spaces"], 256)  # type: ignore[misc]
    assert obj == {"name": "R2", "standings": [], "weight": 0.5}
    assert players == ["a b", "c"] and ranks.tolist() == [1, 1] and ranks.dtype == np.int64
