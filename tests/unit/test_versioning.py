"""One version: ``stream.__version__``, which the wheel's metadata (pyproject.toml), ``mmr --version``
and the worker's ``/openapi.json`` all carry; the CHANGELOG follows Keep a Changelog and never names
a release ahead of it (CHANGELOG.md, "Version policy"). The built wheel's own version and
``mmr --version`` from it: tests/packaging/test_wheel.py; ``info.version`` of the served OpenAPI
document: tests/unit/service/test_openapi_document.py."""

from __future__ import annotations

import re
import tomllib

from click.testing import CliRunner
from packaging.version import Version
from repo_paths import ROOT

import stream
from stream.cli import main

SEMVER = re.compile(r"^(0|[1-9]\d*)\.(0|[1-9]\d*)\.(0|[1-9]\d*)$")
HEADING = re.compile(r"^## \[(?P<name>[^\]]+)\](?: - (?P<date>\d{4}-\d{2}-\d{2}))?$")
SECTIONS = {"Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"}


def test_the_version_is_plain_semver() -> None:
    assert SEMVER.match(stream.__version__), stream.__version__


def test_the_wheel_reads_its_version_from_the_package() -> None:
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())
    assert "version" not in project["project"] and "version" in project["project"]["dynamic"]
    assert project["tool"]["setuptools"]["dynamic"]["version"] == {"attr": "stream.__version__"}
    # the one assignment: nothing else in the package spells a version out
    found = re.findall(r'^__version__\s*=\s*"([^"]+)"', (ROOT / "stream" / "__init__.py").read_text(), re.M)
    assert found == [stream.__version__]


def test_mmr_version_prints_the_package_version() -> None:
    result = CliRunner().invoke(main, ["--version"])
    assert result.exit_code == 0, result.output
    assert result.output.strip() == f"mmr, version {stream.__version__}"


def _changelog() -> list[tuple[str, str | None, list[str]]]:
    """(name, date, lines) per ``## [...]`` release section, in file order."""
    out: list[tuple[str, str | None, list[str]]] = []
    for line in (ROOT / "CHANGELOG.md").read_text().splitlines():
        m = HEADING.match(line)
        if m:
            out.append((m["name"], m["date"], []))
        elif out:
            out[-1][2].append(line)
    return out


def test_the_changelog_follows_keep_a_changelog_and_semver() -> None:
    text = (ROOT / "CHANGELOG.md").read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com/en/1.1.0" in text and "semver.org/spec/v2.0.0" in text
    assert "## Version policy" in text
    releases = _changelog()
    assert releases, "no release sections"
    names = [name for name, _, _ in releases]
    assert names.count("Unreleased") <= 1 and "Unreleased" not in names[1:], "[Unreleased] comes first"
    versions = []
    for name, date, lines in releases:
        if name != "Unreleased":
            assert SEMVER.match(name) and date, f"## [{name}] needs X.Y.Z and ' - YYYY-MM-DD'"
            versions.append(Version(name))
        for ln in lines:
            if ln.startswith("### "):
                assert ln[4:] in SECTIONS, f"[{name}]: {ln!r} is not a Keep a Changelog section"
    assert versions == sorted(versions, reverse=True) and len(set(versions)) == len(versions), versions


def test_the_changelog_names_no_release_ahead_of_the_package() -> None:
    """The newest release is the package's version, or older while changes wait in [Unreleased]."""
    releases = _changelog()
    released = [Version(name) for name, _, _ in releases if name != "Unreleased"]
    current = Version(stream.__version__)
    if not released:
        assert releases[0][0] == "Unreleased"
        return
    if releases[0][0] == "Unreleased":
        assert current >= released[0], "the version to release is not below the last release"
    else:
        assert current == released[0], "releasing sets stream.__version__ to the newest section's"
