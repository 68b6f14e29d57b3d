"""Edge cases of the input-file readers found by fuzzing them (tests/property/events/test_fuzz_decoders.py).

Each test is the smallest input of one bug: it failed before the fix (a bad file raised
something other than InputError naming the file and line, or a value was silently changed).
"""

from __future__ import annotations

import gzip
import lzma
from pathlib import Path

import orjson
import pytest

from stream.events.inputs import InputError, contest_to_round, read_records

HEADER = b"date,home_team,away_team,home_score,away_score\n"
GOOD_ROW = b"2000-01-02,A,B,1,0\n"
EVENT = orjson.dumps({"type": "match", "event_id": "1", "pool": "p", "time": 1, "a": "a", "b": "b", "score": 1})
CONTEST = orjson.dumps({"name": "c", "time_seconds": 1, "standings": [["a", 0, 0], ["b", 1, 1]]})


def _error(path: Path, pool: str | None = None) -> str:
    with pytest.raises(InputError) as err:
        list(read_records(path, pool))
    return str(err.value)


@pytest.mark.parametrize(("name", "content", "line"), [
    ("e.jsonl", EVENT + b"\n" + EVENT[:-1] + b'\xff}\n', 2),
    ("e.jsonl", b"\xff" + EVENT + b"\n", 1),
    ("c.jsonl", CONTEST + b"\n" + CONTEST.replace(b'"a"', b'"\xed\xa0\x80"') + b"\n", 2),
    ("m.csv", HEADER + GOOD_ROW + b"2000-01-02,A\xff,B,1,0\n", 3),
])
def test_bytes_that_are_not_utf8_are_reported_with_their_line(tmp_path: Path, name: str, content: bytes,
                                                              line: int) -> None:
    """They raised UnicodeDecodeError from the middle of the file."""
    path = tmp_path / name
    path.write_bytes(content)
    assert _error(path).startswith(f"{path}:{line}: ")


@pytest.mark.parametrize("suffix", [".gz", ".xz"])
def test_damaged_compressed_files_are_reported(tmp_path: Path, suffix: str) -> None:
    """A cut .gz raised EOFError, a cut .xz EOFError or LZMAError, a damaged one zlib.error."""
    text = (EVENT + b"\n") * 2000
    packed = gzip.compress(text) if suffix == ".gz" else lzma.compress(text)
    for content in (packed[: len(packed) // 2], packed[:-12] + bytes(b ^ 0x55 for b in packed[-12:]), b"not packed"):
        path = tmp_path / f"e.jsonl{suffix}"
        path.write_bytes(content)
        message = _error(path)
        assert message.startswith(f"{path}:") and "cannot read" in message, message


def test_csv_rows_with_too_few_fields_are_reported(tmp_path: Path) -> None:
    """A short row raised TypeError (the missing cells are None)."""
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + GOOD_ROW + b"2000-01-02,A,B,1\n")
    message = _error(path)
    assert message.startswith(f"{path}:3: ") and "fields" in message


def test_csv_syntax_errors_are_reported(tmp_path: Path) -> None:
    """csv.Error (here a field over the csv module's limit) came out as is."""
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + GOOD_ROW + b'2000-01-02,"' + b"A" * 200_000 + b'",B,1,0\n')
    assert _error(path).startswith(f"{path}:3: ")


@pytest.mark.parametrize(("text", "ms"), [
    ("2000-01-02T00:00:00+05:00", 946_771_200_000 - 5 * 3_600_000),  # the offset was dropped
    ("2000-01-02T00:00:00-01:30", 946_771_200_000 + 90 * 60_000),
    ("2000-01-02", 946_771_200_000),
    ("1234567890123456789", 1_234_567_890_123_456_789),  # read through a float: ...768
    ("12.9", 12),
])
def test_csv_times_are_read_exactly(tmp_path: Path, text: str, ms: int) -> None:
    path = tmp_path / "m.csv"
    path.write_text(f"date,home_team,away_team,home_score,away_score\n{text},A,B,1,0\n")
    ((_, _, m),) = read_records(path)
    assert m.time == ms


@pytest.mark.parametrize(("seconds", "ms"), [(1.001, 1001), (0.007, 7), (-1.001, -1001), (5, 5000), (2.5, 2500)])
def test_contest_times_are_the_milliseconds_written(seconds: float, ms: int) -> None:
    """``int(1.001 * 1000)`` is 1000."""
    event = contest_to_round({"name": "c", "time_seconds": seconds, "standings": [["a", 0, 0]]}, "f:1", "d", 1)
    assert event.time == ms


@pytest.mark.parametrize(("row", "needle"), [
    (["a", False, True], "rank range"),  # bools were read as 0 and 1
    (["a", 0, 2**64 - 1], "rank range"),  # OverflowError converting to int64
    (["a", -(2**63) - 1, 0], "rank range"),
    (["a", 2**64 - 1, 0], "rank range"),  # lo beyond int64 with hi in range
    (["a", 0, -(2**63) - 1], "rank range"),
])
def test_bad_contest_rank_ranges_are_reported(row: list[object], needle: str) -> None:
    with pytest.raises(InputError, match=needle):
        contest_to_round({"name": "c", "standings": [row, ["b", 1, 1]]}, "f:1", "d", 1)


@pytest.mark.parametrize("ident", [{"name": ""}, {"name": "c", "id": ""}])
def test_contests_with_an_empty_name_are_reported(ident: dict[str, str]) -> None:
    """An empty name became an empty round_id: the replay rated it, the service refused it."""
    with pytest.raises(InputError, match="name"):
        contest_to_round({**ident, "standings": [["a", 0, 0]]}, "f:1", "d", 1)


@pytest.mark.parametrize("pool", ["", "p" * 129])
@pytest.mark.parametrize(("name", "content"), [("c.jsonl", CONTEST + b"\n"), ("m.csv", HEADER + GOOD_ROW),
                                               ("e.jsonl", EVENT + b"\n")])
def test_a_pool_outside_the_contract_is_refused(tmp_path: Path, pool: str, name: str, content: bytes) -> None:
    """Contests and CSV rows were put in pool ``default`` for ``--pool ""`` and in a pool the
    service refuses for a 129-character one."""
    path = tmp_path / name
    path.write_bytes(content)
    message = _error(path, pool)
    assert message.startswith(f"{path}") and "pool" in message


def test_valid_pools_still_apply(tmp_path: Path) -> None:
    path = tmp_path / "m.csv"
    path.write_bytes(HEADER + GOOD_ROW)
    ((_, _, m),) = read_records(path, "p" * 128)
    assert m.pool == "p" * 128
    ((_, _, m),) = read_records(path)
    assert m.pool == "default"


def test_contests_without_players_are_reported() -> None:
    """An empty ``standings`` was read as a round of no one: the replay took it, the service
    (schema: at least one player) dead-lettered it."""
    with pytest.raises(InputError, match="standings"):
        contest_to_round({"name": "c", "standings": []}, "f:1", "d", 1)
