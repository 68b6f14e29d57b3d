"""End-to-end replays of the real histories in ../shared/data (skipped when absent).

They run the CLI exactly as a user would (`mmr replay ... --embedded --out`), so they
cover reading, detection, validation, the pipeline and the output format at once.
"""

from __future__ import annotations

import lzma
import math
import subprocess
import sys
from pathlib import Path

import orjson
import pytest
from repo_paths import SHARED_DATA as DATA

CODEFORCES = DATA / "codeforces" / "contests-2010-2020.jsonl.xz"
FOOTBALL = DATA / "football" / "results.csv"
MMR = [sys.executable, "-m", "stream.cli"]


def _replay(src: Path, out: Path, *args: str) -> list[dict[str, object]]:
    proc = subprocess.run(
        [*MMR, "replay", str(src), "--embedded", "--out", str(out), "--no-progress", *args],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr
    return [orjson.loads(line) for line in out.read_bytes().splitlines()]


def _check_rows(rows: list[dict[str, object]]) -> None:
    for r in rows:
        assert set(r) == {"pool", "player", "rating", "mu", "sigma", "rounds"}
        assert all(math.isfinite(float(r[k])) for k in ("rating", "mu", "sigma"))  # type: ignore[arg-type]
        assert int(r["rounds"]) >= 1  # type: ignore[call-overload]


@pytest.mark.data
@pytest.mark.skipif(not CODEFORCES.exists(), reason=f"shared data absent: {CODEFORCES} (needs ../shared/data)")
@pytest.mark.parametrize("system", ["elo-mmr", "elo-mmx"])
def test_first_100_codeforces_contests(tmp_path: Path, system: str) -> None:
    src = tmp_path / "cf100.jsonl.xz"
    players: set[str] = set()
    results = 0
    with lzma.open(CODEFORCES, "rb") as fh, lzma.open(src, "wb") as dst:
        for _, line in zip(range(100), fh, strict=False):
            dst.write(line)
            standings = orjson.loads(line)["standings"]
            results += len(standings)
            players.update(s[0] for s in standings)
    rows = _replay(src, tmp_path / "out.jsonl", "--system", system, "--pool", "cf")
    _check_rows(rows)
    assert {r["player"] for r in rows} == players
    assert {r["pool"] for r in rows} == {"cf"}
    assert sum(int(r["rounds"]) for r in rows) == results  # type: ignore[call-overload]
    top = max(rows, key=lambda r: float(r["rating"]))  # type: ignore[arg-type]
    assert 1900 < float(top["rating"]) < 3500  # type: ignore[arg-type]


@pytest.mark.data
@pytest.mark.skipif(not FOOTBALL.exists(), reason=f"shared data absent: {FOOTBALL} (needs ../shared/data)")
def test_football_history_with_cowan(tmp_path: Path) -> None:
    rows = _replay(FOOTBALL, tmp_path / "out.jsonl", "--system", "cowan", "--pool", "football")
    _check_rows(rows)
    matches = sum(1 for _ in FOOTBALL.open()) - 1
    assert sum(int(r["rounds"]) for r in rows) == 2 * matches  # type: ignore[call-overload]
    by = {r["player"]: float(r["rating"]) for r in rows}  # type: ignore[arg-type]
    # a strong side ends above a minnow, whatever the exact numbers
    assert by["Brazil"] > by["San Marino"] + 300
