"""The wheel ships numba's cache of the kernels, compiled on the build machine.

Why
---
A fresh install otherwise compiles the kernels its first run needs (about 20 s for Elo-MMR's,
more for Cowan's). ``build_py`` runs ``mmr warm --export`` with the package it just built (in
the build environment's Python, so numba and the other dependencies must be installed there:
``make wheel`` builds without build isolation) and puts the cache in
``stream/_numba_shipped/<sources digest>/``; ``stream.runtime.locator`` copies it into the
user's cache at the first run. The cache holds machine code for this Python and the build
machine's CPU, so such a wheel is tagged for this interpreter and platform
(``cp311-cp311-linux_x86_64`` here), not ``py3-none-any``. When the warm-up cannot run (an isolated
build without the dependencies) the wheel is built without the cache, pure, with a warning:
its first run compiles, as with ``mmr warm`` not run.

An editable install (``make install``) ships nothing: it uses the checkout's own cache.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from setuptools import setup
from setuptools.command.bdist_wheel import bdist_wheel
from setuptools.command.build_py import build_py

SHIPPED = Path("stream") / "_numba_shipped"


class BuildWithCache(build_py):
    def run(self) -> None:
        super().run()
        if self.editable_mode:
            return
        lib = Path(self.build_lib).resolve()
        shutil.rmtree(lib / SHIPPED, ignore_errors=True)  # an earlier build's, of other sources
        env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(lib), os.environ.get("PYTHONPATH")]))}
        done = subprocess.run([sys.executable, "-c", "from stream.cli import main; main()", "warm",
                               "--export", str(lib / SHIPPED)], env=env, cwd=lib, capture_output=True, text=True)
        if done.returncode != 0:
            print("warning: the wheel ships no numba cache: `mmr warm` cannot run in this build environment "
                  f"(build without isolation, as `make wheel` does):\n{done.stderr[-2000:]}", file=sys.stderr)


class WheelForThisPlatform(bdist_wheel):
    """Platform-specific when the build shipped numba's cache (decided after the build)."""

    def run(self) -> None:
        if not self.skip_build:
            self.run_command("build")
        build_lib = Path(self.get_finalized_command("build").build_lib)
        if (build_lib / SHIPPED).is_dir():
            self.root_is_pure = False
            # installed as platform code (the wheel's root, not its .data/purelib folder)
            self.distribution.has_ext_modules = lambda: True  # type: ignore[method-assign]
        super().run()


setup(cmdclass={"build_py": BuildWithCache, "bdist_wheel": WheelForThisPlatform})
