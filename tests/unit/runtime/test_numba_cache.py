"""numba's cache directory is named by the kernels' sources (``stream.runtime.numba_cache``)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

from stream.runtime import numba_cache as _numba_cache


def _tree(root: Path, callee: str) -> Path:
    (root / "pkg").mkdir(parents=True, exist_ok=True)
    kernel = f"from numba import njit\n@njit(cache=True)\ndef f(x):\n    return {callee}\n"
    (root / "pkg" / "quant.py").write_text(kernel)
    (root / "pkg" / "codec.py").write_text("from numba import njit\nfrom pkg.quant import f\n")
    (root / "pkg" / "cli.py").write_text("print('no kernels here')\n")
    return root / "pkg"


def test_digest_follows_every_numba_module_and_only_them(tmp_path: Path) -> None:
    base = _numba_cache.sources_digest(_tree(tmp_path / "a", "x + 1"))
    # a callee edited alone (the case numba's own per-file check misses) changes the digest
    assert _numba_cache.sources_digest(_tree(tmp_path / "b", "x + 2")) != base
    same = _tree(tmp_path / "c", "x + 1")
    assert _numba_cache.sources_digest(same) == base
    (same / "cli.py").write_text("print('edited, still no kernels')\n")
    assert _numba_cache.sources_digest(same) == base


def test_cache_dir_under_numba_cache_dir_or_the_user_cache(tmp_path: Path) -> None:
    digest = _numba_cache.sources_digest()
    assert _numba_cache.cache_dir({"NUMBA_CACHE_DIR": str(tmp_path)}) == tmp_path / digest
    assert _numba_cache.cache_dir({"XDG_CACHE_HOME": str(tmp_path)}) == tmp_path / "mmr-stream" / "numba" / digest


def test_importing_a_kernel_module_points_numba_there(tmp_path: Path) -> None:
    code = "import stream.runtime.copies, numba; print(numba.config.CACHE_DIR)"
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(tmp_path / _numba_cache.sources_digest())
    first = subprocess.run([sys.executable, "-c", "import numba, stream.runtime.copies; print(numba.config.CACHE_DIR)"],
                           env=env,
                           capture_output=True, text=True, check=True)  # numba imported before stream
    assert first.stdout.strip() == str(tmp_path / _numba_cache.sources_digest())
    off = subprocess.run([sys.executable, "-c", code], env={**env, "MMR_NUMBA_CACHE": "0"},
                         capture_output=True, text=True, check=True)
    assert off.stdout.strip() == str(tmp_path)  # numba's own reading of NUMBA_CACHE_DIR


def test_a_child_process_keeps_the_directory_it_inherits(tmp_path: Path) -> None:
    inherited = tmp_path / _numba_cache.sources_digest()
    assert _numba_cache.cache_dir({"NUMBA_CACHE_DIR": str(inherited)}) == inherited
    code = "import numba, stream.runtime.copies; print(numba.config.CACHE_DIR)"  # numba imported first
    env = {"NUMBA_CACHE_DIR": str(inherited), "PATH": "/usr/bin:/bin"}
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == str(inherited)


def test_a_module_that_only_talks_to_numba_keeps_the_cache(tmp_path: Path) -> None:
    """Listening to numba's events or setting its threads holds no machine code."""
    tree = _tree(tmp_path / "a", "x + 1")
    base = _numba_cache.sources_digest(tree)
    (tree / "notice.py").write_text("import numba\nfrom numba.core import event\nevent.register\n")
    assert _numba_cache.sources_digest(tree) == base
    (tree / "kernels.py").write_text("import numba\n@numba.njit(cache=True)\ndef g(x):\n    return x\n")
    assert _numba_cache.sources_digest(tree) != base
