"""The README is a guide for users and operators, not a log (issue 29): under 250 lines, every
relative link and image of it and of docs/ leads to a file of the repository, and its benchmark
table sends the reader to docs/benchmarks.md for the narratives. Reads files only: no database."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCUMENTS = [README, ROOT / "CHANGELOG.md", *sorted((ROOT / "docs").glob("*.md"))]
# [text](target) and ![alt](target), with an optional "title" after the target.
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")
FENCE = re.compile(r"^(```|~~~).*?^\1", re.MULTILINE | re.DOTALL)
CODE_SPAN = re.compile(r"(`+)(?:(?!\1).)+?\1", re.DOTALL)
EXTERNAL = ("http://", "https://", "mailto:", "//")


def _prose(path: Path) -> str:
    """The document without code blocks and code spans, where brackets are not links."""
    return CODE_SPAN.sub("", FENCE.sub("", path.read_text()))


def _relative_targets(path: Path) -> list[str]:
    targets = []
    for target in LINK.findall(_prose(path)):
        if target.startswith(EXTERNAL) or target.startswith("#"):
            continue
        targets.append(target)
    return targets


def _section(text: str, heading: str) -> str:
    """The text under a level-2 heading, up to the next one."""
    pattern = rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)"
    match = re.search(pattern, text, re.MULTILINE | re.DOTALL)
    assert match, f"README.md has no section '## {heading}'"
    return match.group(1)


def test_the_readme_is_under_250_lines() -> None:
    lines = len(README.read_text().splitlines())
    assert lines < 250, f"README.md has {lines} lines: details go to docs/, history to CHANGELOG.md"


@pytest.mark.parametrize("document", DOCUMENTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_relative_link_leads_to_a_file_of_the_repository(document: Path) -> None:
    broken = []
    for target in _relative_targets(document):
        path = target.split("#", 1)[0].split("?", 1)[0]
        if not path:
            continue
        resolved = (document.parent / path).resolve()
        if not resolved.is_relative_to(ROOT):
            broken.append(f"{target} (outside the repository)")
        elif not resolved.exists():
            broken.append(target)
    assert not broken, f"{document.relative_to(ROOT)} links to missing files: {broken}"


def test_the_link_finder_sees_links_and_images_but_not_code() -> None:
    text = "[a](docs/a.md#x) ![b](docs/b.png) [c](https://x.org) `[d](e.md)`\n```\n[f](g.md)\n```\n"
    found = LINK.findall(CODE_SPAN.sub("", FENCE.sub("", text)))
    assert found == ["docs/a.md#x", "docs/b.png", "https://x.org"]


def test_the_benchmark_table_names_its_targets_and_docs_benchmarks() -> None:
    section = _section(README.read_text(), "Benchmarks")
    assert "](docs/benchmarks.md" in section, "the benchmark table must link docs/benchmarks.md"
    rows = [line for line in section.splitlines() if line.startswith("|")][2:]  # header, rule
    assert len(rows) >= 5, "the benchmark table has lost its rows"
    for row in rows:
        assert re.search(r"\bmet\b", row), f"a benchmark row says neither met nor not met: {row}"
        assert "./dev " in row, f"a benchmark row names no command: {row}"
