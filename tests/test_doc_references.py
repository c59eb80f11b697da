"""Every reference resolves inside the repository (docs/style.md "Citing the design"): a
maintainer with only a clone can open whatever a comment, docstring or doc cites.

A file fails when it

* names a design document kept outside the repository (the upper-case design files, the
  seeds, anything under ``../shared``);
* cites ``docs/X.md`` and the repository has no such doc;
* cites ``docs/semantics.md §n.m`` and docs/semantics.md has no rule (or section) n.m, or
  cites a rule by a bare number (``rule 1.5``, a ``§`` outside a citation), which names no doc;
* cites ``docs/X.md "Heading"``, or links ``X.md#anchor`` in a Markdown file, and that doc
  has no heading of that title (or anchor);
* names a file of the project's packages (``runs_app/execution/host.py``) that is not there:
  a module moved, its mentions follow it (CHANGELOG.md, which records paths as they were, aside).

The scan covers the repository's own text files (git's list: tracked and new ones), not the
vendored libraries under ``static/vendor/``.
"""

from __future__ import annotations

import re
import subprocess
from functools import cache
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
THIS = Path(__file__).resolve()
SKIPPED_DIRS = ("static/vendor/",)
TEXT_SUFFIXES = {
    ".py", ".js", ".mjs", ".md", ".html", ".css", ".toml", ".sh", ".txt", ".yml", ".yaml",
    ".cfg", ".ini", ".service", ".example", ".svg", ".json",
}  # fmt: skip
TEXT_NAMES = {"dev", "run", "Dockerfile", "Procfile"}

# Design documents that live outside the repository (this file, which names them, is not
# scanned).
OUTSIDE = [
    re.compile(r"\b(SEMANTICS|CONTRACT|ARCHITECTURE|PEERS|STYLE)(\.md)?\b"),
    re.compile(r"\.\./(shared|seeds)\b|/work/shared\b|shared/(design|seeds)\b|\.zh\.txt\b"),
]
DOC = re.compile(r"\bdocs/([\w./-]+?\.md)\b")
# ``docs/semantics.md §6.3``; in a Markdown doc also a link ``[semantics.md §6.3](semantics.md#…)``.
SEMANTICS_CITE = re.compile(r"\b(?:docs/)?semantics\.md")
# After ``docs/semantics.md``: one or more ``§n`` / ``§n.m``, joined by commas, dashes, "and"
# or "or", possibly across a line break inside a comment.
NUMBER = re.compile(r"(?:[\s,–-]|#|//|\*|\band\b|\bor\b)*§(\d+(?:\.\d+)?)")
HEADING_CITE = re.compile(r"\bdocs/([\w./-]+?\.md)(?:[\s,]|#|//)*\"([A-Za-z`][^\"]{0,150})\"")
BARE_RULE = re.compile(r"\b[Rr]ules? \d+\.\d+")
SECTION_SIGN = re.compile(r"§\d")
CONTINUATION = re.compile(r"\s*\n\s*(?:#|//|\*)?\s*")
ANCHOR_LINK = re.compile(r"\]\(\s*<?([^)\s>#]*\.md)?#([^)\s>]+)\)")
FENCE = re.compile(r"^```.*?^```", re.M | re.S)
MODULE = re.compile(
    r"(?<![\w./-])(?:runs_app|sessions_app|quotas_app|workspace|core|realtime|config|tests|static"
    r"|scripts|bench|platform|templates)/[\w./-]+?\.(?:py|js|md|sh|html|css|toml)\b"
)
# References that are a test's own planted data, not citations.
PLANTED = {
    ("tests/test_readme.py", "docs/a.md"),
    ("tests/test_dev_script.py", "tests/test_x.py"),
    ("tests/test_js_structure.py", "static/a.js"),
}


def repository_files() -> list[Path]:
    """The repository's own files: git's list when there is one, else a walk."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "--cached", "--others", "--exclude-standard"],
            cwd=ROOT,
            capture_output=True,
            text=True,
            check=True,
        ).stdout.splitlines()
        paths = [ROOT / name for name in listed]
    except (OSError, subprocess.CalledProcessError):
        ignored = {".git", ".venv", "var", "__pycache__", "node_modules"}
        paths = [p for p in ROOT.rglob("*") if not ignored & set(p.relative_to(ROOT).parts)]
    return sorted(p for p in paths if is_text(p) and p.resolve() != THIS)


def is_text(path: Path) -> bool:
    rel = path.relative_to(ROOT).as_posix()
    if any(rel.startswith(d) for d in SKIPPED_DIRS) or not path.is_file():
        return False
    return path.suffix in TEXT_SUFFIXES or path.name in TEXT_NAMES


@cache
def headings(doc: str) -> frozenset[str]:
    """The titles of the headings of ``docs/<doc>``, normalised."""
    text = (ROOT / "docs" / doc).read_text(encoding="utf-8")
    return frozenset(
        normal(m.group(1)) for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", text, re.M)
    )


@cache
def semantics_numbers() -> frozenset[str]:
    """The section numbers (``## 6.``) and rule numbers (``6.3`` at a line's start) of
    docs/semantics.md."""
    text = (ROOT / "docs" / "semantics.md").read_text(encoding="utf-8")
    sections = re.findall(r"^##\s+(\d+)\.\s", text, re.M)
    rules = re.findall(r"^(\d+\.\d+)\s", text, re.M)
    return frozenset(sections + rules)


@cache
def anchors(doc: Path) -> frozenset[str]:
    """The anchors a Markdown renderer gives the headings of ``doc`` (GitHub's: lower case,
    punctuation dropped, spaces as hyphens, a repeated one numbered)."""
    text = FENCE.sub("", doc.read_text(encoding="utf-8"))
    seen: dict[str, int] = {}
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*$", text, re.M):
        slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        if seen[slug]:
            seen[f"{slug}-{seen[slug]}"] = 0
    return frozenset(seen)


def normal(title: str) -> str:
    return " ".join(CONTINUATION.sub(" ", title).replace("`", "").split()).casefold()


def problems(text: str, where: Path = ROOT / "docs" / "x.md") -> list[str]:
    """What in ``text`` (the content of ``where``) cites something the repository does not
    hold: one sentence each, with its line number."""
    rel = where.relative_to(ROOT).as_posix()
    found: list[tuple[int, str]] = []

    def say(at: int, what: str) -> None:
        found.append((text.count("\n", 0, at) + 1, what))

    for pattern in OUTSIDE:
        for m in pattern.finditer(text):
            say(m.start(), f"{m.group(0)!r} names a document outside the repository")
    for m in DOC.finditer(text):
        if text.startswith("](", m.start() - 2) or (rel, m.group(0)) in PLANTED:
            continue  # a Markdown link's target: tests/test_readme.py follows those
        if not (ROOT / "docs" / m.group(1)).is_file():
            say(m.start(), f"docs/{m.group(1)} does not exist")
    if rel != "CHANGELOG.md":
        for m in MODULE.finditer(text):
            if not (ROOT / m.group(0)).exists() and (rel, m.group(0)) not in PLANTED:
                say(m.start(), f"{m.group(0)} does not exist")
    cited_signs: set[int] = set()
    for m in SEMANTICS_CITE.finditer(text):
        at, numbers = m.end(), []
        while (n := NUMBER.match(text, at)) is not None:
            numbers.append(n.group(1))
            cited_signs.add(n.start(1) - 1)
            at = n.end()
        for number in numbers:
            if number not in semantics_numbers():
                say(m.start(), f"docs/semantics.md has no §{number}")
    for m in SECTION_SIGN.finditer(text):
        if m.start() not in cited_signs:
            say(m.start(), f"{m.group(0)!r}: a section sign outside a docs/semantics.md citation")
    for m in BARE_RULE.finditer(text):
        say(m.start(), f"{m.group(0)!r}: cite it as docs/semantics.md §n.m")
    for m in HEADING_CITE.finditer(text):
        doc, title = m.group(1), m.group(2)
        if (ROOT / "docs" / doc).is_file() and normal(title) not in headings(doc):
            say(m.start(), f'docs/{doc} has no heading "{normal(title)}"')
    if where.suffix == ".md":
        for m in ANCHOR_LINK.finditer(FENCE.sub(lambda f: "\n" * f.group(0).count("\n"), text)):
            target = (where.parent / m.group(1)).resolve() if m.group(1) else where
            if target.is_file() and m.group(2) not in anchors(target):
                say(m.start(), f"{m.group(1) or rel} has no heading for the anchor #{m.group(2)}")
    return [f"{line}: {what}" for line, what in sorted(found)]


def test_every_reference_resolves() -> None:
    """The repository's files cite only what the repository holds."""
    failures = []
    for path in repository_files():
        rel = path.relative_to(ROOT).as_posix()
        is_semantics = rel == "docs/semantics.md"
        for problem in problems(path.read_text(encoding="utf-8", errors="replace"), path):
            if is_semantics and "section sign outside" in problem:
                continue  # the doc's own cross-references (§5.5) cite itself
            failures.append(f"{rel}:{problem}")
    assert not failures, "references to what the repository lacks:\n" + "\n".join(failures)


@pytest.mark.parametrize(
    ("planted", "expected"),
    [
        ("# Fork (SEMANTICS 5.5): a copy", "outside the repository"),
        ('"""See CONTRACT "Export and import"."""', "outside the repository"),
        ("# read ../shared/design/notes.md first", "outside the repository"),
        ("# the rule is in docs/rules.md", "docs/rules.md does not exist"),
        ("# docs/semantics.md §99.1: no such rule", "has no §99.1"),
        ("# docs/semantics.md §5.1–§5.4, §57.2", "has no §57.2"),
        ("# docs/semantics.md §5.1 and\n# §42.2 across lines", "has no §42.2"),
        ('# docs/security.md "No such heading"', 'has no heading "no such heading"'),
        ("# never run twice (rule 1.5)", "cite it as docs/semantics.md"),
        ("# never run twice (§1.5)", "section sign outside"),
        ("[semantics.md §77](semantics.md#1-runs-modes-and-the-busy-lock)", "has no §77"),
        ("see [the rules](security.md#no-such-rules)", "no heading for the anchor #no-such-rules"),
        (
            "# the loop (runs_app/engine_of_old.py) calls",
            "runs_app/engine_of_old.py does not exist",
        ),
    ],
)
def test_a_planted_bad_reference_is_found(planted: str, expected: str) -> None:
    found = problems(planted)
    assert any(expected in p for p in found), found


def test_good_references_pass() -> None:
    good = (
        '"""Fork (docs/semantics.md §5.5; continue: docs/semantics.md §5.1–§5.4, §5.6 and\n'
        '    §14): see docs/security.md "The rules" and docs/repositories.md, or\n'
        '    docs/security.md\n    "Security settings"."""\n'
        "x = 1  # docs/semantics.md §11 (runs_app/lifecycle.py, tests/test_doc_references.py)\n"
        "[semantics.md §6.3](semantics.md#6-sharing-and-per-user-forks), [x](security.md#the-rules)"
    )
    assert problems(good) == []
