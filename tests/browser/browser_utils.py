"""The browser tests' browser: Debian's Chromium driven by Playwright for Python (never a downloaded
browser); the tests skip, saying why, where either is missing (``make test`` installs Chromium where
apt-get works). Imported first by the tests: it puts tests/integration on the path, whose worker
(console_world.py) the tests open."""

from __future__ import annotations

import contextlib
import shutil
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "integration"))

#: where Debian's chromium package puts the browser (else the first `chromium` on PATH)
CHROMIUM = "/usr/bin/chromium"
ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
        "--no-first-run"]


def chromium_path() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


def require_browser() -> str:
    """Chromium's path; skips the test, saying what to install, where Chromium or Playwright is missing."""
    path = chromium_path()
    if path is None:
        pytest.skip("no Chromium: install Debian's (apt-get install -y chromium; make test does where it can)")
    try:
        import playwright.sync_api  # noqa: F401
    except ImportError:
        pytest.skip("Playwright for Python is not installed (pip install -e '.[test]')")
    return path


@contextlib.contextmanager
def chromium_browser() -> Iterator[Any]:
    """A launched Chromium (Playwright's ``Browser``); skips the test where there is none."""
    path = require_browser()
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=path, args=ARGS)
        try:
            yield b
        finally:
            b.close()
