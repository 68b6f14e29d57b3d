"""``mmr report`` draws with matplotlib, an optional dependency (extra ``report``): without it the
command says in one line which extra to install and exits non-zero, without a traceback."""

from __future__ import annotations

import os
import subprocess
import sys
import tomllib
from pathlib import Path

import orjson
from repo_paths import ROOT

from stream.tools.report import REPORT_EXTRA

#: the real entry point, in a Python where ``import matplotlib`` fails as it does where it is not installed
NO_MATPLOTLIB = "import sys; sys.modules['matplotlib'] = None; from stream.cli import main; main()"


def test_the_message_names_an_extra_that_brings_matplotlib() -> None:
    extras = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    assert "pip install 'mmr-stream[report]'" in REPORT_EXTRA
    assert any(r.startswith("matplotlib") for r in extras["report"])


def test_report_without_matplotlib_says_which_extra_in_one_line(tmp_path: Path) -> None:
    events = [{"type": "match", "event_id": f"m{i}", "pool": "p", "time": i, "a": a, "b": b, "score": 1.0}
              for i, (a, b) in enumerate([("ann", "bob"), ("bob", "cy"), ("cy", "ann")])]
    history = tmp_path / "h.jsonl"
    history.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-c", NO_MATPLOTLIB, "report", str(history), "--system", "elo",
                           "--out", str(tmp_path / "out")], capture_output=True, text=True, env=env, timeout=300,
                          cwd=tmp_path)
    assert done.returncode != 0
    assert "Traceback" not in done.stderr
    assert done.stderr.strip().splitlines() == [f"Error: {REPORT_EXTRA}"], done.stderr
    assert not (tmp_path / "out").exists()


def test_report_with_matplotlib_writes_its_plots(tmp_path: Path) -> None:
    events = [{"type": "match", "event_id": f"m{i}", "pool": "p", "time": i, "a": a, "b": b, "score": 1.0}
              for i, (a, b) in enumerate([("ann", "bob"), ("bob", "cy"), ("cy", "ann")] * 4)]
    history = tmp_path / "h.jsonl"
    history.write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in events))
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run([sys.executable, "-m", "stream.cli", "report", str(history), "--system", "elo",
                           "--out", str(tmp_path / "out"), "--min-history", "0"], capture_output=True, text=True,
                          env=env, timeout=300, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "out" / "report.md").exists() and (tmp_path / "out" / "runtime.png").exists()
