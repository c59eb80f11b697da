"""The files of a worktree that its snapshots do not cover, and why (``skipped``): a step's
``step-finish`` part, the revert preview and the downloads report them, so that nothing is
left out of a snapshot silently."""

from __future__ import annotations

import os
import tempfile

from django.conf import settings

from . import git_output
from .git_names import git_refuses
from .snapshots import Snapshots


def skipped(
    snap: Snapshots, paths: list[str] | None = None, tree: str = ""
) -> list[dict[str, str]]:
    """Files of the worktree that snapshots do not cover, and why: ``invalid-name`` (git
    refuses it), ``large`` (over ``SNAPSHOT_MAX_FILE_BYTES``), ``excluded``
    (``SNAPSHOT_EXCLUDE``), ``ignored`` (the worktree's ``.gitignore``). ``paths`` (a
    step's, from the journal) and ``tree`` (its snapshot): only beneath those paths, listed
    against an empty index and the tree, not the session's index (read whole by every git
    that opens it) nor a walk of the whole worktree."""
    snap.ensure()
    if paths is None:
        return _skipped(snap, None, set())
    if not paths:
        return []
    with tempfile.TemporaryDirectory(prefix="skipped-") as scratch:
        covered = set(snap.blob_entries(tree, paths)) if tree else set()
        return _skipped(snap, (os.path.join(scratch, "index"), paths), covered)


def _skipped(
    snap: Snapshots, within: tuple[str, list[str]] | None, covered: set[str]
) -> list[dict[str, str]]:
    index, paths = within if within else (None, ["."])
    result = []
    limit = settings.SNAPSHOT_MAX_FILE_BYTES
    # On the command line (ls-files reads no pathspec from a file): the journal's paths are
    # bounded (``change_journal.MAX_BYTES``).
    others = snap.git("ls-files", "--others", "-z", "--", *paths, index=index)
    for name in git_output.names(others):
        if name in covered:
            continue
        path = snap.worktree / name
        if git_refuses(name):
            result.append({"path": name, "reason": "invalid-name"})
        elif limit and path.is_file() and path.stat().st_size > limit:
            result.append({"path": name, "reason": "large"})
    ignored = snap.git(
        "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z",
        "--", *paths, index=index,
    )  # fmt: skip
    names = [n for n in ignored.split("\0") if n and n.rstrip("/") != ".git" and n not in covered]
    excluded = _excluded(snap, names)
    for name in names:
        result.append({"path": name, "reason": "excluded" if name in excluded else "ignored"})
    return sorted(result, key=lambda r: r["path"])


def _excluded(snap: Snapshots, names: list[str]) -> set[str]:
    """Those of ``names`` (ignored paths) that ``info/exclude`` (``SNAPSHOT_EXCLUDE``),
    not a ``.gitignore``, leaves out: git says which pattern matched, and where from."""
    if not names or not settings.SNAPSHOT_EXCLUDE:
        return set()
    # check-ignore takes no literal pathspecs: a name that would read as pathspec magic
    # (a leading ":") is left out of the question, and reported "ignored".
    asked = [n for n in names if not n.startswith(":")]
    out = snap.run(
        ["--no-literal-pathspecs", "check-ignore", "--verbose", "--no-index", "--stdin", "-z"],
        input=b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in asked),
    ).stdout.split(b"\0")
    exclude = str(snap.git_dir / "info" / "exclude").encode("utf-8", "surrogateescape")
    found = set()
    for i in range(0, len(out) - 3, 4):  # source, line, pattern, path
        if out[i] == exclude:
            found.add(out[i + 3].decode("utf-8", "surrogateescape"))
    return found
