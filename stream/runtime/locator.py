"""Where numba finds the machine code of this package's kernels: paths relative to the package,
so a cache built on one machine and shipped in the wheel is found after ``pip install``.

Why not numba's own locator for ``NUMBA_CACHE_DIR``: it names each module's folder by a hash of
its *absolute* source directory, so a cache built in a build folder is never looked up where pip
puts the package. Here the folder is the module's path inside the package under
``numba_cache.cache_dir()`` (already named by the sources digest), and a module's freshness is
the digest of its content, not its mtime (pip writes files at install time).

The shipped cache: a wheel built by ``setup.py`` carries ``stream/_numba_shipped/<digest>/``, what
``mmr warm`` compiled on the build machine, with ``MANIFEST.json`` (numba, llvmlite, numpy and
Python versions, the CPU). The first time a module's kernels are defined its shipped files are
copied into the user's cache (``seed``) unless the versions differ (numba's pickles are not
promised to load across them). numba itself keys each entry by CPU, so another CPU compiles as
before (with the notice of ``compile_notice``) beside the shipped entries.

This subclasses numba's private ``_CacheLocator``: the numba versions are bounded in pyproject.toml
and tests/unit/runtime/test_numba_locator.py checks them.
"""

from __future__ import annotations

import stream.runtime.configured  # noqa: F401  (numba configured before it loads: stream.runtime)

# isort: split
import functools
import hashlib
import json
import os
import shutil
import sys
from pathlib import Path
from typing import Any

from numba.core import config
from numba.core.caching import _CacheLocator

from stream.runtime.blas import defer_probe
from stream.runtime.numba_cache import PACKAGE, SHIPPED

# numba imports this module when the first cached kernel is defined, before it compiles or
# loads any function, so before its registries load: the moment to answer its BLAS probe
# without importing scipy.linalg (``stream.runtime.blas``)
defer_probe()

MANIFEST = "MANIFEST.json"
LOCATOR = f"{__name__}.PackageLocator"


def _config(name: str) -> str:
    """numba's setting ``name`` (its config module's attributes are set at run time)."""
    return str(getattr(config, name, "") or "")


@functools.cache
def _content_digest(path: str, mtime: float, size: int) -> str:
    # mtime and size only key the memo, so a file edited while the process runs is read again
    with open(path, "rb") as f:
        return hashlib.sha256(f.read()).hexdigest()


def manifest() -> dict[str, Any]:
    """What a shipped cache must match to be copied (versions), and the CPU it was built on."""
    import llvmlite
    import llvmlite.binding as ll
    import numba
    import numpy

    return {"numba": numba.__version__, "llvmlite": llvmlite.__version__, "numpy": numpy.__version__,
            "python": "{}.{}".format(*sys.version_info[:2]), "abiflags": getattr(sys, "abiflags", ""),
            # as numba keys its entries (``NUMBA_CPU_NAME=generic`` implies no features)
            "cpu_name": _config("CPU_NAME") or ll.get_host_cpu_name(),
            "cpu_features": (features if (features := getattr(config, "CPU_FEATURES", None)) is not None
                             else ll.get_host_cpu_features().flatten())}


_VERSIONS = ("numba", "llvmlite", "numpy", "python", "abiflags")


@functools.cache
def _shipped_fits(shipped: Path) -> bool:
    try:
        built = json.loads((shipped / MANIFEST).read_bytes())
    except (OSError, ValueError):
        return False
    here = manifest()
    return all(built.get(k) == here[k] for k in _VERSIONS)


_seeded: set[Path] = set()


def seed(folder: Path, shipped_root: Path, cache_root: Path) -> int:
    """Copy the shipped cache files of ``folder`` (relative to the package) into the user's
    cache, a function at a time: its data files first, then its index, each under a temporary
    name renamed into place, so another process sees a function whole or not at all. A function
    whose index is there already keeps it. Returns how many functions were copied."""
    src, dst = shipped_root / folder, cache_root / folder
    if dst in _seeded:
        return 0
    _seeded.add(dst)
    if not src.is_dir() or not _shipped_fits(shipped_root):
        return 0
    copied = 0
    try:
        names = sorted(p.name for p in src.iterdir())
        dst.mkdir(parents=True, exist_ok=True)
        for index in (n for n in names if n.endswith(".nbi")):
            if (dst / index).exists():
                continue
            base = index[:-len(".nbi")]
            for name in [n for n in names if n.startswith(base + ".") and n.endswith(".nbc")] + [index]:
                tmp = dst / f"{name}.tmp.{os.getpid()}"
                try:
                    shutil.copyfile(src / name, tmp)
                    os.replace(tmp, dst / name)
                finally:
                    tmp.unlink(missing_ok=True)
            copied += 1
    except OSError:
        pass  # a read-only or full cache: numba compiles what is missing
    return copied


class PackageLocator(_CacheLocator):  # type: ignore[misc]
    """The cache of a function defined in this package: ``<cache dir>/<module folder in the
    package>``, stamped with the module's content digest."""

    def __init__(self, py_func: Any, py_file: str, folder: Path) -> None:
        self._py_file = py_file
        self._lineno = py_func.__code__.co_firstlineno
        self._cache_path = os.path.join(_config("CACHE_DIR"), folder)

    def get_cache_path(self) -> str:
        return self._cache_path

    def get_source_stamp(self) -> str:
        st = os.stat(self._py_file)
        return _content_digest(self._py_file, st.st_mtime, st.st_size)

    def get_disambiguator(self) -> str:
        return str(self._lineno)

    @classmethod
    def from_function(cls, py_func: Any, py_file: str) -> PackageLocator | None:
        if not _config("CACHE_DIR"):
            return None
        try:
            folder = Path(py_file).resolve().parent.relative_to(PACKAGE)
        except (OSError, ValueError):
            return None  # not this package's: numba's own locators
        self = cls(py_func, py_file, folder)
        try:
            self.ensure_cache_path()
        except OSError:
            return None
        cache_root = Path(_config("CACHE_DIR"))
        seed(folder, SHIPPED / cache_root.name, cache_root)
        return self


def export(dest: Path) -> Path:
    """Copy this process's cache (``numba.config.CACHE_DIR``, named by the sources digest) to
    ``dest/<digest>`` with its manifest: what ``setup.py`` puts in the wheel after ``mmr warm``.
    Only numba's files (indexes and data) of this locator's folders, not the temporary files of
    a write in progress."""
    if not _config("CACHE_DIR") or LOCATOR not in _config("CACHE_LOCATOR_CLASSES").split(","):
        raise ValueError("numba's cache is not this package's (MMR_NUMBA_CACHE=0?): nothing to export")
    source = Path(_config("CACHE_DIR"))
    target = dest / source.name
    if target.exists():
        shutil.rmtree(target)
    for path in sorted(source.rglob("*")):
        rel = path.relative_to(source)
        # only this locator's folders: the cache may hold numba's own (named by the absolute
        # path of another checkout with the same sources), which no install would look up
        if path.is_file() and path.suffix in (".nbi", ".nbc") and (PACKAGE / rel.parent).is_dir():
            (target / rel).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(path, target / rel)
    target.mkdir(parents=True, exist_ok=True)
    (target / MANIFEST).write_text(json.dumps(manifest(), indent=1) + "\n")
    return target
