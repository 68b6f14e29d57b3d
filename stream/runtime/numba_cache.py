"""Where numba keeps compiled kernels: a directory per version of this package's sources.

Why: numba's cache re-checks only the file of the function it compiled, so a kernel calling an
``njit`` function of another module keeps the callee's old machine code after that module
changes. Not harmless here: the Cowan codec and kernels must run bit-identical quantisation
(``cowan.quant``), and a checkout with an older cache once decoded with the old code and encoded
with the new. So the directory is named by a digest of every module that compiles with numba:
any edit of one starts a fresh cache. It lives under ``NUMBA_CACHE_DIR`` when set (the Docker
image sets it), else the user's cache directory; ``configure`` sets it before any kernel is
defined and puts this package's locator (``stream.runtime.locator``) first.
"""

from __future__ import annotations

import hashlib
import os
import re
import sys
from pathlib import Path

from stream.config import engine_settings

PACKAGE = Path(__file__).resolve().parent.parent  # the ``stream`` package
#: the numba cache a wheel ships (``setup.py``), one folder per sources digest
SHIPPED = PACKAGE / "_numba_shipped"
_LOCATOR = "stream.runtime.locator.PackageLocator"
#: numba's own locators, after ours (a name without a module is one of ``numba.core.caching``)
NUMBA_LOCATORS = "UserProvidedCacheLocator,InTreeCacheLocator,UserWideCacheLocator,IPythonCacheLocator,ZipCacheLocator"


_IMPORTS_NUMBA = re.compile(rb"^\s*(?:from numba[ .]|import numba\b)", re.MULTILINE)
#: what a module that defines or calls compiled code names: numba's compiling decorators
_COMPILES = re.compile(rb"\b(?:n?jit|vectorize|guvectorize|cfunc|stencil|jitclass|overload\w*)\b")


def compiles_with_numba(source: bytes) -> bool:
    """Imports numba *and* names one of its compilers: a module that only asks numba for its
    threads or listens to its events holds no machine code, and editing it keeps the cache.
    (The plain substring first: most modules never name numba, and every process digests them
    all at start-up, where the patterns over every line are a noticeable cost.)"""
    return b"numba" in source and bool(_IMPORTS_NUMBA.search(source) and _COMPILES.search(source))


def sources_digest(root: Path = PACKAGE) -> str:
    """A digest of the modules under ``root`` that compile with numba (path and content):
    only they can hold or call compiled code, and an edit elsewhere keeps the cache."""
    h = hashlib.sha256()
    for path in sorted(root.rglob("*.py")):
        text = path.read_bytes()
        if compiles_with_numba(text):
            h.update(str(path.relative_to(root)).encode() + b"\0" + text + b"\0")
    return h.hexdigest()[:16]


def cache_dir(env: dict[str, str] | None = None) -> Path:
    """``<NUMBA_CACHE_DIR or ~/.cache/mmr-stream/numba>/<sources digest>`` (a ``NUMBA_CACHE_DIR``
    that already ends in the digest, as a child process inherits it, is kept as it is)."""
    env = dict(os.environ) if env is None else env
    digest = sources_digest()
    base = env.get("NUMBA_CACHE_DIR") or os.path.join(
        env.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache"), "mmr-stream", "numba")
    return Path(base) if Path(base).name == digest else Path(base) / digest


def configure() -> None:
    """Point numba's cache at ``cache_dir()`` before any ``@njit(cache=True)`` is defined, through the
    variables numba reads when imported (and child processes inherit), and numba's config if it is
    imported already. Leaves numba's own choice when the directory cannot be made or ``MMR_NUMBA_CACHE=0``."""
    if not engine_settings().numba_cache:
        return
    target = cache_dir()
    try:
        target.mkdir(parents=True, exist_ok=True)
    except OSError:
        return
    os.environ["NUMBA_CACHE_DIR"] = str(target)
    locators = os.environ.get("NUMBA_CACHE_LOCATOR_CLASSES") or NUMBA_LOCATORS
    if _LOCATOR not in locators.split(","):
        locators = f"{_LOCATOR},{locators}"
    os.environ["NUMBA_CACHE_LOCATOR_CLASSES"] = locators
    numba = sys.modules.get("numba")
    if numba is not None:
        setattr(numba.config, "CACHE_DIR", str(target))  # noqa: B010 (untyped module attribute)
        setattr(numba.config, "CACHE_LOCATOR_CLASSES", locators)  # noqa: B010
