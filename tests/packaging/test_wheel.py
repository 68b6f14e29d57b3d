"""The wheel installs and runs on its own: built from the tracked files, installed into a fresh
venv outside the checkout, driven from an empty folder; it ships numba's cache of the kernels
(``setup.py``), so its first run on an empty cache compiles nothing.

The venv borrows the third-party dependencies from the project's venv through a path entry
(a ``.pth`` line: the dependencies' own ``.pth`` hooks, among them the editable install's
import hook for the checkout, are not run), so nothing of ``stream`` can come from anywhere
but the wheel — the test checks that too — and nothing is downloaded.
"""

from __future__ import annotations

import os
import shutil
import site
import subprocess
import sys
import sysconfig
import zipfile
from pathlib import Path

import orjson
import pytest

import stream
from stream.events.validate import ALL_TYPES
from stream.runtime.numba_cache import sources_digest

ROOT = Path(__file__).resolve().parents[2]

#: in one process under pytest-xdist with the other modules of group "heavy" (tests/conftest.py)
pytestmark = [pytest.mark.slow, pytest.mark.xdist_group("heavy")]


def _tracked_copy(dest: Path) -> Path:
    """The checkout's tracked and new (not ignored) files, symlinks kept as symlinks."""
    names = subprocess.run(["git", "ls-files", "-z", "--cached", "--others", "--exclude-standard"], cwd=ROOT,
                           check=True, capture_output=True).stdout.decode().split("\0")
    for name in filter(None, names):
        src, dst = ROOT / name, dest / name
        if not src.is_symlink() and not src.exists():  # deleted in the working tree
            continue
        dst.parent.mkdir(parents=True, exist_ok=True)
        if src.is_symlink():
            dst.symlink_to(os.readlink(src))
        else:
            shutil.copy2(src, dst)
    return dest


def _run(args: list[str], cwd: Path, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(args, cwd=cwd, env=env, capture_output=True, text=True, timeout=600)


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, dict[str, str]]:
    """(the fresh venv's bin folder, an environment that names nothing of the checkout)"""
    tmp = tmp_path_factory.mktemp("wheel")
    src = _tracked_copy(tmp / "src")
    dist = tmp / "dist"
    subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "-q", "-w", str(dist),
                    str(src)], check=True, capture_output=True)
    (wheel,) = dist.glob("mmr_stream-*.whl")
    assert wheel.name.startswith(f"mmr_stream-{stream.__version__}-"), wheel.name  # the one version
    with zipfile.ZipFile(wheel) as zf:
        names = set(zf.namelist())
        metadata = zf.read(f"mmr_stream-{stream.__version__}.dist-info/METADATA").decode()
    assert f"\nVersion: {stream.__version__}\n" in metadata
    assert {f"stream/schemas/{t}.json" for t in ALL_TYPES} <= names
    assert "stream/py.typed" in names  # PEP 561: the package's hints reach type checkers
    assert not any(n.startswith(("schemas/", "tests/")) for n in names)
    # machine code for this interpreter and platform: not a py3-none-any wheel
    python = f"cp{sys.version_info[0]}{sys.version_info[1]}"
    platform = sysconfig.get_platform().replace("-", "_").replace(".", "_")
    assert wheel.name.endswith(f"-{python}-{python}-{platform}.whl"), wheel.name
    assert f"stream/_numba_shipped/{sources_digest()}/MANIFEST.json" in names
    assert any(n.startswith(f"stream/_numba_shipped/{sources_digest()}/ratings/") for n in names)

    venv = tmp / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    bindir = venv / "bin"
    purelib = subprocess.run([str(bindir / "python"), "-c", "import sysconfig; print(sysconfig.get_path('purelib'))"],
                             check=True, capture_output=True, text=True).stdout.strip()
    Path(purelib, "project_dependencies.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    subprocess.run([sys.executable, "-m", "pip", "--python", str(bindir / "python"), "install", "--no-deps",
                    "--no-index", "-q", str(wheel)], check=True, capture_output=True)
    env = {k: v for k, v in os.environ.items()
           if k in ("HOME", "LANG", "LC_ALL", "TMPDIR", "NUMBA_CACHE_DIR", "XDG_CACHE_HOME")}
    env["PATH"] = f"{bindir}{os.pathsep}/usr/bin:/bin"
    return bindir, env


def test_the_installed_package_is_the_wheel_and_reports_its_version(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bindir, env = installed
    where = _run([str(bindir / "python"), "-c", "import stream; print(stream.__file__)"], tmp_path, env)
    assert where.returncode == 0, where.stderr
    assert Path(where.stdout.strip()).is_relative_to(bindir.parent), where.stdout
    version = _run([str(bindir / "mmr"), "--version"], tmp_path, env)
    assert version.returncode == 0, version.stderr
    assert version.stdout.strip() == f"mmr, version {stream.__version__}"


def test_replay_from_an_empty_folder_rates_a_good_file_and_names_the_bad_line(
        installed: tuple[Path, dict[str, str]], tmp_path: Path) -> None:
    bindir, env = installed
    work = tmp_path / "empty"
    work.mkdir()
    good = [{"type": "match", "event_id": f"m{i}", "pool": "p", "time": i, "a": a, "b": b, "score": s}
            for i, (a, b, s) in enumerate([("ann", "bob", 1.0), ("bob", "cy", 0.5), ("cy", "ann", 0.0)])]
    (work / "good.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in good))
    bad = [good[0], {**good[1], "score": 2}, good[2]]
    (work / "bad.jsonl").write_bytes(b"".join(orjson.dumps(e) + b"\n" for e in bad))

    ok = _run([str(bindir / "mmr"), "replay", "good.jsonl", "--system", "cowan", "--embedded", "--out", "x",
               "--no-progress"], work, env)
    assert ok.returncode == 0, ok.stderr
    rows = [orjson.loads(line) for line in (work / "x").read_bytes().splitlines()]
    assert sorted(r["player"] for r in rows) == ["ann", "bob", "cy"]
    assert all(set(r) >= {"pool", "player", "rating", "mu", "sigma", "rounds"} for r in rows)

    refused = _run([str(bindir / "mmr"), "replay", "bad.jsonl", "--system", "cowan", "--embedded", "--out", "y",
                    "--no-progress"], work, env)
    assert refused.returncode != 0
    assert "bad.jsonl:2" in refused.stderr, refused.stderr
    assert "score" in refused.stderr and "Traceback" not in refused.stderr
    assert not (work / "y").exists()


_ONE_EVENT = {
    "elo-mmr": {"type": "round", "event_id": "r1", "pool": "p", "round_id": "r1", "time": 1,
                "standings": [{"player": "ann", "rank": 1}, {"player": "bob", "rank": 2},
                              {"player": "cy", "rank": 3}, {"player": "dee", "rank": 3}]},
    "cowan": {"type": "match", "event_id": "m1", "pool": "p", "time": 1, "a": "ann", "b": "bob", "score": 1.0},
}


@pytest.mark.parametrize("system", sorted(_ONE_EVENT))
def test_a_first_run_on_an_empty_cache_loads_the_shipped_kernels(
        installed: tuple[Path, dict[str, str]], tmp_path: Path, system: str) -> None:
    """A user's first ``mmr replay`` after ``pip install``, from a folder of their own, with
    nothing in numba's cache: the kernels come from the wheel (no compile notice), are copied
    into the user's cache, and rate as the checkout does."""
    bindir, env = installed
    work = tmp_path / "elsewhere"
    work.mkdir()
    (work / "one.jsonl").write_bytes(orjson.dumps(_ONE_EVENT[system]) + b"\n")
    cache = tmp_path / "cache"
    fresh = {**{k: v for k, v in env.items() if k != "NUMBA_CACHE_DIR"}, "XDG_CACHE_HOME": str(cache)}
    args = ["replay", "one.jsonl", "--system", system, "--embedded", "--no-progress", "--out"]

    first = _run([str(bindir / "mmr"), *args, "installed.jsonl"], work, fresh)
    assert first.returncode == 0, first.stderr
    assert "compiling" not in first.stderr, first.stderr
    assert list(cache.glob(f"mmr-stream/numba/{sources_digest()}/ratings/*.nbi"))

    checkout = _run([sys.executable, "-c", "from stream.cli import main; main()", *args, "checkout.jsonl"], work,
                    dict(os.environ))
    assert checkout.returncode == 0, checkout.stderr
    assert (work / "installed.jsonl").read_bytes() == (work / "checkout.jsonl").read_bytes()
