"""`mmr replay`: options of the other mode are refused before anything runs.

The broker address is a closed port: a refusal must come from the option check, never from
a connection attempt (publishing itself is tested on a real broker in
tests/integration/test_replay_broker.py and test_service.py).
"""

from __future__ import annotations

from pathlib import Path

import orjson
import pytest
from click.testing import CliRunner, Result

from stream.tools.replay import replay

CLOSED = "127.0.0.1:1"


@pytest.fixture()
def history(tmp_path: Path) -> Path:
    path = tmp_path / "m.jsonl"
    rows = [{"type": "match", "event_id": f"e{i}", "pool": "p", "time": 1000 + i, "a": "x", "b": "y", "score": 1.0}
            for i in range(3)]
    path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    return path


def _invoke(*args: str) -> Result:
    return CliRunner().invoke(replay, list(args), catch_exceptions=False)


@pytest.mark.parametrize(
    ("extra", "named"),
    [
        (["--out", "x.jsonl"], "--out"),
        (["--top", "5"], "--top"),
        (["--system", "cowan"], "--system"),
        (["--param", "beta=0.5"], "--param"),
        (["--embedded"], "--embedded"),
    ],
)
def test_in_process_options_are_refused_with_broker(history: Path, tmp_path: Path, extra: list[str],
                                                    named: str) -> None:
    res = _invoke(str(history), "--broker", CLOSED, "--no-progress", *extra)
    assert res.exit_code == 2, res.output
    assert named in res.output
    assert not (tmp_path / "x.jsonl").exists()


def test_in_process_options_are_refused_with_bare_broker(history: Path) -> None:
    res = _invoke(str(history), "--broker", "--top", "5")
    assert res.exit_code == 2, res.output
    assert "--top does not apply with --broker" in res.output


@pytest.mark.parametrize(("extra", "named"), [(["--rate", "100"], "--rate"), (["--speedup", "2"], "--speedup")])
def test_publishing_options_are_refused_in_process(history: Path, tmp_path: Path, extra: list[str],
                                                   named: str) -> None:
    out = tmp_path / "r.jsonl"
    res = _invoke(str(history), "--out", str(out), "--no-progress", *extra)
    assert res.exit_code == 2, res.output
    assert f"{named} applies only with --broker" in res.output
    assert not out.exists()


def test_a_file_after_broker_is_not_taken_for_an_address(history: Path, tmp_path: Path) -> None:
    other = tmp_path / "second.jsonl"
    other.write_bytes(history.read_bytes())
    res = _invoke(str(history), "--broker", str(other))
    assert res.exit_code == 2, res.output
    assert "is a file, not a bootstrap address" in res.output


def test_an_empty_broker_is_refused(history: Path) -> None:
    res = _invoke(str(history), "--broker=")
    assert res.exit_code == 2, res.output
    assert "--broker" in res.output


def test_options_shared_by_both_modes_stay_accepted_in_process(history: Path, tmp_path: Path) -> None:
    out = tmp_path / "r.jsonl"
    res = _invoke(str(history), "--out", str(out), "--batch-size", "2", "--pool", "q", "--skip", "1",
                  "--no-progress")
    assert res.exit_code == 0, res.output
    rows = [orjson.loads(line) for line in out.read_bytes().splitlines()]
    assert {(r["pool"], r["player"], r["rounds"]) for r in rows} == {("q", "x", 2), ("q", "y", 2)}
