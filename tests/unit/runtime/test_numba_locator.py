"""numba's cache of this package's kernels in folders relative to the package, and the shipped
cache copied into it (``stream.runtime.locator``)."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tomllib
from pathlib import Path

import numba
import pytest
from numba.core import caching
from repo_paths import ROOT

from stream.runtime import locator as _numba_locator
from stream.runtime import numba_cache as _numba_cache

#: a small kernel of the package (compiles in a fraction of a second); prints how many
#: functions numba compiled (0: all loaded from the cache) and its result
_RUN = """
import numpy as np
from numba.core import event
from stream.state import packed_pool
compiled = 0
class Count(event.Listener):
    def on_start(self, ev):
        pass
    def on_end(self, ev):
        global compiled
        compiled += 1
event.register("numba:compile", Count())
out = packed_pool._offsets(np.array([2, 0, 3]), np.array([0, -1, 2]), 5).tolist()
print(compiled, out)
"""


def _run(cache: Path, **extra: str) -> tuple[int, str]:
    env = {"NUMBA_CACHE_DIR": str(cache), "PATH": "/usr/bin:/bin", **extra}
    done = subprocess.run([sys.executable, "-c", _RUN], env=env, capture_output=True, text=True, check=True)
    n, result = done.stdout.strip().split(" ", 1)
    return int(n), result


def test_the_numba_version_is_one_this_locator_was_checked_with() -> None:
    """The locator subclasses a private class of numba and names numba's own locators: a numba
    outside the bound of pyproject.toml must pass this file first."""
    spec = next(d for d in tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["dependencies"]
                if d.startswith("numba"))
    low, high = re.fullmatch(r"numba>=([\d.]+),<([\d.]+)", spec).groups()  # type: ignore[union-attr]
    version = tuple(int(x) for x in numba.__version__.split(".")[:2])
    assert tuple(map(int, low.split("."))) <= version < tuple(map(int, high.split(".")))
    assert issubclass(_numba_locator.PackageLocator, caching._CacheLocator)
    for name in _numba_cache.NUMBA_LOCATORS.split(","):
        assert isinstance(getattr(caching, name), type), name


def test_kernels_are_cached_in_folders_named_inside_the_package(tmp_path: Path) -> None:
    compiled, result = _run(tmp_path)
    assert compiled >= 1
    digest = _numba_cache.sources_digest()
    folders = {p.name for p in (tmp_path / digest).iterdir()}
    assert "state" in folders and all((_numba_cache.PACKAGE / f).is_dir() for f in folders), folders
    assert any(p.suffix == ".nbi" for p in (tmp_path / digest / "state").iterdir())
    assert _run(tmp_path) == (0, result)  # the second process loads it


@pytest.fixture(scope="module")
def built(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, str]:
    """A cache built in one place and exported as a wheel ships it: (shipped root, digest)."""
    tmp = tmp_path_factory.mktemp("built")
    _run(tmp / "cache")
    env = {"NUMBA_CACHE_DIR": str(tmp / "cache"), "PATH": "/usr/bin:/bin"}
    code = ("import sys; from pathlib import Path; import stream; from stream.runtime import locator; "
            "print(locator.export(Path(sys.argv[1])))")
    out = subprocess.run([sys.executable, "-c", code, str(tmp / "shipped")], env=env, capture_output=True,
                         text=True, check=True)
    return tmp / "shipped", Path(out.stdout.strip()).name


def _shipped(built: tuple[Path, str], tmp_path: Path) -> tuple[Path, str]:
    shipped, digest = built
    shutil.copytree(shipped, tmp_path / "shipped")  # a root of this test's own: nothing seeded from it yet
    return tmp_path / "shipped", digest


def test_a_shipped_cache_is_copied_and_loaded_without_compiling(built: tuple[Path, str], tmp_path: Path) -> None:
    shipped, digest = _shipped(built, tmp_path)
    assert digest == _numba_cache.sources_digest()
    manifest = json.loads((shipped / digest / "MANIFEST.json").read_text())
    assert manifest["numba"] == numba.__version__ and manifest["cpu_name"]
    fresh = tmp_path / "fresh" / digest
    fresh.mkdir(parents=True)
    assert _numba_locator.seed(Path("state"), shipped / digest, fresh) >= 1
    assert not [p for p in (fresh / "state").iterdir() if ".tmp." in p.name]
    compiled, _ = _run(fresh)
    assert compiled == 0


def test_a_function_already_in_the_users_cache_keeps_its_index(built: tuple[Path, str], tmp_path: Path) -> None:
    shipped, digest = _shipped(built, tmp_path)
    mine = tmp_path / "mine" / digest / "state"
    mine.mkdir(parents=True)
    for index in (shipped / digest / "state").glob("*.nbi"):
        (mine / index.name).write_bytes(b"the user's own")
    assert _numba_locator.seed(Path("state"), shipped / digest, mine.parent) == 0
    assert {p.read_bytes() for p in mine.iterdir()} == {b"the user's own"}


def test_a_shipped_cache_of_other_versions_is_not_copied(built: tuple[Path, str], tmp_path: Path) -> None:
    shipped, digest = _shipped(built, tmp_path)
    manifest = shipped / digest / "MANIFEST.json"
    manifest.write_text(json.dumps({**json.loads(manifest.read_text()), "numba": "0.1.0"}))
    fresh = tmp_path / "fresh" / digest
    fresh.mkdir(parents=True)
    assert _numba_locator.seed(Path("state"), shipped / digest, fresh) == 0
    assert not (fresh / "state").exists()


@pytest.mark.skipif(os.uname().machine not in ("x86_64", "AMD64"), reason="names an x86-64 CPU")
def test_on_another_cpu_the_shipped_entries_miss_and_the_kernel_compiles_beside_them(
        built: tuple[Path, str], tmp_path: Path) -> None:
    """numba keys each entry by the CPU's name and features: another CPU (here LLVM's
    ``generic``) compiles, gets the same result and adds its entry; the shipped one stays."""
    shipped, digest = _shipped(built, tmp_path)
    fresh = tmp_path / "fresh" / digest
    fresh.mkdir(parents=True)
    _numba_locator.seed(Path("state"), shipped / digest, fresh)
    _, expected = _run(fresh)
    before = {p.name for p in (fresh / "state").iterdir()}
    compiled, result = _run(fresh, NUMBA_CPU_NAME="generic", NUMBA_CPU_FEATURES="")
    assert compiled >= 1 and result == expected
    assert before < {p.name for p in (fresh / "state").iterdir()}
    assert _run(fresh) == (0, expected)


def test_configuring_numba_puts_this_locator_first_and_keeps_a_users_list(tmp_path: Path) -> None:
    code = "import stream.runtime.configured, numba; print(numba.config.CACHE_LOCATOR_CLASSES)"
    env = {"NUMBA_CACHE_DIR": str(tmp_path), "PATH": "/usr/bin:/bin"}

    def locators(**extra: str) -> str:
        return subprocess.run([sys.executable, "-c", code], env={**env, **extra}, capture_output=True, text=True,
                              check=True).stdout.strip()

    assert locators() == f"{_numba_locator.LOCATOR},{_numba_cache.NUMBA_LOCATORS}"
    assert locators(NUMBA_CACHE_LOCATOR_CLASSES="mine.Locator") == f"{_numba_locator.LOCATOR},mine.Locator"
    assert locators(MMR_NUMBA_CACHE="0") == ""
