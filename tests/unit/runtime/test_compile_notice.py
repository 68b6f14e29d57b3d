"""A run that compiles kernels says so on stderr; a warm cache says nothing; ``mmr warm``
fills the cache so that the next replay compiles nothing."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
from numba import njit

from stream.runtime.compile_notice import compile_notice

MMR = [sys.executable, "-m", "stream.cli"]
NOTICE = "mmr: compiling rating kernels for this machine"
DONE = "mmr: compiling rating kernels: done in"


def test_a_compilation_is_announced_once_and_timed() -> None:
    @njit
    def inner(x: float) -> float:
        return x * 2.0

    @njit
    def outer(x: float) -> float:
        return inner(x) + 1.0

    @njit
    def other(x: float) -> float:
        return x - 1.0

    out = io.StringIO()
    with compile_notice(out) as timer:
        assert outer(1.0) == 3.0
        assert other(np.float64(1.0)) == 0.0
    lines = out.getvalue().splitlines()
    assert [line.startswith(NOTICE) for line in lines] == [True, False]
    assert lines[1].startswith(DONE)
    assert timer.kernels == 2  # outer (with inner compiled inside it) and other
    quiet = io.StringIO()
    with compile_notice(quiet) as timer:
        assert outer(2.0) == 5.0  # compiled already: no event
    assert quiet.getvalue() == "" and timer.kernels == 0


def _mmr(args: list[str], cache: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "NUMBA_CACHE_DIR": str(cache)}
    return subprocess.run([*MMR, *args], env=env, capture_output=True, text=True, check=True, timeout=300)


def _rounds(tmp_path: Path) -> Path:
    src = tmp_path / "rounds.jsonl"
    src.write_text('{"name":"r1","time_seconds":1,"standings":[["a",0,0],["b",1,1],["c",2,2]]}\n'
                   '{"name":"r2","time_seconds":2,"standings":[["c",0,0],["a",1,1]]}\n')
    return src


def test_first_replay_announces_compilation_on_stderr_only_and_the_second_is_quiet(tmp_path: Path) -> None:
    src = _rounds(tmp_path)
    replay = ["replay", str(src), "--system", "elo", "--embedded", "--top", "3", "--no-progress"]
    first = _mmr(replay, tmp_path / "cache")
    assert NOTICE in first.stderr and DONE in first.stderr
    assert str(tmp_path / "cache") in first.stderr  # where the kernels are kept
    assert "`mmr warm` compiles them all ahead" in first.stderr
    assert "mmr:" not in first.stdout  # stdout carries the leaderboard only
    second = _mmr(replay, tmp_path / "cache")
    assert "mmr:" not in second.stderr
    assert second.stdout == first.stdout


def test_mmr_warm_leaves_nothing_to_compile(tmp_path: Path) -> None:
    warmed = _mmr(["warm", "--system", "elo"], tmp_path / "cache")
    assert NOTICE in warmed.stderr and "mmr warm: [1/1] elo:" in warmed.stderr
    assert warmed.stdout == "" and "`mmr warm`" not in warmed.stderr
    src = _rounds(tmp_path)
    replay = _mmr(["replay", str(src), "--system", "elo", "--embedded", "--out", str(tmp_path / "o.jsonl"),
                   "--no-progress"], tmp_path / "cache")
    assert "mmr:" not in replay.stderr
    again = _mmr(["warm", "--system", "elo"], tmp_path / "cache")
    assert NOTICE not in again.stderr


def test_compilations_on_the_workers_numba_thread_are_announced() -> None:
    """The worker compiles on its one numba thread while the notice is opened on the main one."""
    import asyncio
    import io
    from concurrent.futures import ThreadPoolExecutor

    import numba

    @numba.njit  # no cache: compiled on every call of this test
    def plus_one(x: int) -> int:
        return x + 1

    out = io.StringIO()
    loop = asyncio.new_event_loop()
    try:
        with ThreadPoolExecutor(1) as ex, compile_notice(out, hint="") as timer:
            assert loop.run_until_complete(loop.run_in_executor(ex, plus_one, 3)) == 4
    finally:
        loop.close()
    assert timer.kernels == 1
    assert "compiling rating kernels" in out.getvalue() and "done in" in out.getvalue()
