"""CHANGELOG.md keeps the Keep a Changelog form and names the version pyproject.toml carries.

A release is cut by moving `[Unreleased]`'s entries under a new `## [x.y.z] - date` and setting
that version in pyproject.toml; this test holds the two together and keeps the file parseable
(versions newest first, one group heading of each kind per version, nothing but the groups).
"""

import datetime
import re
import tomllib
from pathlib import Path

from django.conf import settings

ROOT = Path(__file__).resolve().parent.parent
CHANGELOG = ROOT / "CHANGELOG.md"
GROUPS = ["Added", "Changed", "Deprecated", "Removed", "Fixed", "Security"]
RELEASE = re.compile(r"^## \[(\d+)\.(\d+)\.(\d+)\] - (\d{4}-\d\d-\d\d)$")


def pyproject_version() -> str:
    """The version the package is built with."""
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["version"]


def sections() -> list[tuple[str, list[str]]]:
    """Each `## ` heading of CHANGELOG.md with the `### ` headings beneath it, in file order."""
    found: list[tuple[str, list[str]]] = []
    for line in CHANGELOG.read_text().splitlines():
        if line.startswith("## "):
            found.append((line, []))
        elif line.startswith("### "):
            assert found, f"a group before any version: {line!r}"
            found[-1][1].append(line[4:])
        elif line.startswith("#") and not line.startswith("# Changelog"):
            assert not re.match(r"^#+ ", line), f"a heading the form has no place for: {line!r}"
    return found


def test_the_pyproject_version_is_the_newest_release():
    releases = [RELEASE.match(heading) for heading, _ in sections()[1:]]
    newest = releases[0]
    assert newest, "the first version after [Unreleased] is not a release heading"
    assert ".".join(newest.groups()[:3]) == pyproject_version(), (
        "pyproject.toml's version has no `## [x.y.z] - date` section at the top of CHANGELOG.md"
    )


def test_the_changelog_keeps_the_keep_a_changelog_form():
    text = CHANGELOG.read_text()
    assert text.startswith("# Changelog\n")
    assert "keepachangelog.com/en/1.1.0" in text
    found = sections()
    assert found[0][0] == "## [Unreleased]", "the first section is [Unreleased]"
    previous: tuple[tuple[int, ...], datetime.date] | None = None
    for heading, groups in found:
        if heading != "## [Unreleased]":
            match = RELEASE.match(heading)
            assert match, f"not a `## [x.y.z] - YYYY-MM-DD` heading: {heading!r}"
            version = tuple(int(part) for part in match.groups()[:3])
            date = datetime.date.fromisoformat(match.group(4))
            if previous:
                assert version < previous[0], f"{heading}: versions go newest first"
                assert date <= previous[1], f"{heading}: dates go newest first"
            previous = (version, date)
        unknown = [group for group in groups if group not in GROUPS]
        assert not unknown, f"{heading}: groups are {GROUPS}, not {unknown}"
        assert groups == sorted(set(groups), key=GROUPS.index), (
            f"{heading}: each group once, in the order {GROUPS}"
        )
    assert [heading for heading, _ in found].count("## [Unreleased]") == 1


def test_the_api_schema_carries_the_release():
    """``/api/schema/`` and the Swagger UI at ``/api/docs/`` name the version pyproject.toml
    carries."""
    assert settings.SPECTACULAR_SETTINGS["VERSION"] == pyproject_version()
