"""Where the tests find the repository and ``../shared/data``, from whichever folder of tests/ a module sits in
(tests/conftest.py's folder is on the path, so ``from repo_paths import ROOT`` works at any depth)."""

from __future__ import annotations

from pathlib import Path

#: the repository's root: the folder holding stream/, docs/, deploy/ and tests/
ROOT = Path(__file__).resolve().parents[1]
#: the data sets beside the repository (never in it); tests that need them skip when it is absent
SHARED_DATA = ROOT.parent / "shared" / "data"
