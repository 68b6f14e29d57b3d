"""The documents a newcomer reads stay true to the code: every setting is documented for the
operator and every documented setting exists, every relative link leads to a file, and each
figure of BENCHMARKS.md's summary names its date and commit."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from repo_paths import ROOT

from stream.config import EngineSettings, env_names
from stream.service.config import COMPOSITE_NAMES, OUTSIDE_NAMES, REFUSED_NAMES, Settings

OPERATOR = ROOT / "docs" / "operator.md"
#: the documents a reader reaches from the README
DOCS = [ROOT / "README.md", ROOT / "BENCHMARKS.md", ROOT / "deploy" / "README.md",
        *sorted((ROOT / "docs").glob("*.md"))]


def _settings() -> set[str]:
    return {*env_names(Settings).values(), *env_names(EngineSettings).values(), *COMPOSITE_NAMES}


def test_every_setting_is_documented_for_the_operator() -> None:
    text = OPERATOR.read_text()
    missing = sorted(name for name in _settings() if f"`{name}`" not in text)
    assert not missing, f"docs/operator.md does not list {missing}"


def test_every_setting_the_operator_reads_about_exists() -> None:
    named = set(re.findall(r"\bMMR_[A-Z0-9_]*[A-Z0-9]\b", OPERATOR.read_text()))
    unknown = sorted(named - _settings() - set(OUTSIDE_NAMES) - set(REFUSED_NAMES))
    assert not unknown, f"docs/operator.md names settings the code does not read: {unknown}"


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file(doc: Path) -> None:
    targets = re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", doc.read_text())
    broken = [t for t in targets if "://" not in t and not (doc.parent / t).exists()]
    assert not broken, f"{doc.relative_to(ROOT)} links to missing files: {broken}"


def test_the_old_documents_are_named_nowhere() -> None:
    old = ("docs/service.md", "docs/publishing.md")
    hits = [f"{p.relative_to(ROOT)}: {name}" for p in [*DOCS, *(ROOT / "stream").rglob("*.py")]
            for name in old if name in p.read_text()]
    assert not hits, hits


def test_benchmarks_is_a_current_table_whose_rows_name_date_commit_command_and_machine() -> None:
    text = (ROOT / "BENCHMARKS.md").read_text()
    assert len(text.splitlines()) <= 300
    summary = text.split("## Summary", 1)[1].split("\n## ", 1)[0]
    rows = [line for line in summary.splitlines() if line.startswith("| ") and not line.startswith("| benchmark")]
    rows = [r for r in rows if not set(r) <= set("|- ")]
    assert len(rows) >= 10
    for row in rows:
        cells = [c.strip() for c in row.strip("|").split(" | ")]
        assert len(cells) == 5, row
        _, figure, when, command, machine = cells
        assert figure and command and machine, row
        assert re.search(r"\b20\d\d-\d\d-\d\d\b", when) and re.search(r"\b[0-9a-f]{7}\b", when), row


def test_every_test_a_document_or_comment_cites_exists() -> None:
    """Tests move with the packages they test (tests/unit/<package>/): a path that names one, with or
    without ``::test_name``, must lead to that module and that test."""
    sources = [*DOCS, ROOT / "Makefile", ROOT / "pyproject.toml", *(ROOT / "deploy").rglob("*.*"),
               *(ROOT / "stream").rglob("*.py"), *(ROOT / "tests").rglob("*.py"), *(ROOT / "examples").rglob("*.py")]
    broken = []
    for source in sources:
        for path, name in re.findall(r"\b(tests/[\w/]+\.py)(?:::(\w+))?", source.read_text(errors="replace")):
            target = ROOT / path
            if not target.exists() or (name and not re.search(rf"^(?:async )?def {name}\b", target.read_text(), re.M)):
                broken.append(f"{source.relative_to(ROOT)}: {path}{'::' + name if name else ''}")
    assert not broken, broken
