"""``git add --all`` for a snapshot (``Snapshots.track``), going on past what the worktree
holds that git cannot take: the repositories nested in it (in any state: with a commit,
without one, a ``.git`` git cannot read), names git refuses, files it cannot read. None of
these may stop every snapshot of a session (issue 42: an empty nested repository made every
``git add`` fail, a session no run could end well in). Everything here runs git through the
snapshot's own runner."""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from . import git_output, worktree_paths
from .index_files import may_hold_gitlinks
from .snapshot_errors import SnapshotError


class Snapshots(Protocol):
    """What is used here of a ``snapshots.Snapshots``."""

    git_dir: Path
    worktree: Path

    def run(
        self, args: Sequence[str], *, input: bytes | None = None, index: str | None = None
    ) -> GitResult: ...
    def git(self, *args: str, index: str | None = None) -> str: ...


class GitResult(Protocol):
    code: int
    stderr: str


# The paths on git's stdin, not its command line (a step's may be thousands).
FROM_STDIN = ("--pathspec-from-file=-", "--pathspec-file-nul")
NESTED_DEPTH_MAX = 32  # repositories nested in nested repositories, taken apart level by level
# ``git add`` refusing a nested repository it cannot record as a gitlink: its directory.
NO_COMMIT = re.compile(r"^error: '(.+)/' does not have a commit checked out$")
# What ``git add --ignore-errors`` says when the store, not a file of the worktree, failed.
STORE_FAILED = re.compile(
    r"^fatal:|unable to (?:write|create temporary file|create '.*\.lock')|insufficient permission"
    r"|failed to insert into database|No space left|Disk quota exceeded|Read-only file system"
)


def add_all(snap: Snapshots, index: str | None, paths: Sequence[str] = (".",)) -> None:
    """``git add --all``, with the repositories nested in the worktree taken as plain
    directories (docs/semantics.md §2.3 and §11.1).

    Git's own walk records a directory holding a repository as a gitlink, and the next
    ``add`` runs ``git status`` inside it: that repository's config, its fsmonitor, its
    filters, all the agent's. So no gitlink is ever left in the index: one found after an
    ``add`` is dropped and one of its files is put in its place (``first_file``); a directory
    with a file in the index is a directory to git, whose walk then goes into it like any
    other (its ``.git`` excluded by ``info/exclude``). Before the ``add``, an index made
    before this rule (or read from an old tree) loses its gitlinks the same way. A nested
    repository git cannot record as a gitlink (one without a commit, a ``.git`` file or
    directory git cannot read) is named by ``add``'s error and taken apart the same way.
    ``paths``: the walk is of these alone (``add_paths``)."""
    _drop_gitlinks(snap, index)
    refused = _add(snap, paths, index)
    for _ in range(NESTED_DEPTH_MAX):
        nested = _drop_gitlinks(snap, index) + refused
        first = {d: f for d in nested if (f := worktree_paths.first_file(snap.worktree, d))}
        if not first:
            return
        added = snap.run(["update-index", "--add", "--", *first.values()], index=index)
        if added.code != 0:
            # A file git will not take (a link swapped in on the way) leaves its directory
            # out of this snapshot: never a gitlink in.
            return
        refused = _add(snap, list(first), index)  # the rest of their files
    _drop_gitlinks(snap, index)


def add_paths(snap: Snapshots, paths: Sequence[str], index: str | None) -> None:
    """The index brought up to date for ``paths`` alone (what the writers of the worktree
    said they changed, ``change_journal``): a path that is gone leaves it, a directory with
    all it held (``git rm --cached``); the others are added as ``add_all`` adds the whole
    worktree, with its rules. No path inside a ``.git`` comes here (the journal walks
    then): a repository nested in the worktree is taken apart by the walk."""
    known = {"": True}
    present = [p for p in paths if worktree_paths.present(snap.worktree, p, known)]
    gone = sorted(set(paths) - set(present))
    if gone:
        removed = snap.run(
            ["rm", "-r", "-f", "--cached", "-q", "--ignore-unmatch", *FROM_STDIN],
            input=_nul(gone),
            index=index,
        )
        if removed.code != 0:
            raise SnapshotError(f"git rm --cached: {removed.stderr[:2000]}")
    if present:
        add_all(snap, index, present)


def _nul(paths: Sequence[str]) -> bytes:
    return b"".join(p.encode("utf-8", "surrogateescape") + b"\0" for p in paths)


def _drop_gitlinks(snap: Snapshots, index: str | None) -> list[str]:
    """Remove the index's gitlinks: their paths. Costs one read of the index file when
    there is none (its mode bytes are not in it, nor in a shared part of a split index:
    ``may_hold_gitlinks``); git lists them when there may be."""
    if not may_hold_gitlinks(Path(index or snap.git_dir / "index"), snap.git_dir):
        return []
    links = git_output.gitlinks(snap.git("ls-files", "--stage", "-z", index=index))
    if links:
        # A new shared part, written without them: the one read above would otherwise
        # keep their bytes and send every later snapshot through ``ls-files``.
        snap.git(
            "-c",
            "splitIndex.maxPercentChange=0",
            "update-index",
            "--force-remove",
            "--",
            *links,
            index=index,
        )
    return links


def _add(snap: Snapshots, paths: Sequence[str], index: str | None) -> list[str]:
    """``git add --all`` of ``paths``, going on past what git refuses to index: the
    directories of nested repositories it cannot record (returned, to be taken apart),
    files it cannot read, names it refuses (``.GIT/config``, ``git~1``, see
    ``git_names``: tools refuse to write those, but a shell or the user may make them).
    None of these may stop every snapshot of the session: each stays out, and
    ``skipped`` reports it. git's ``--ignore-errors`` adds everything else and exits 1
    for those; a failure of git itself (it dies: ``fatal:``, exit 128, or cannot write
    an object) is an error."""
    result = snap.run(
        ["add", "--all", "--ignore-errors", *FROM_STDIN], input=_nul(paths), index=index
    )
    if result.code == 0:
        return []
    lines = result.stderr.splitlines()
    broken = [line for line in lines if STORE_FAILED.search(line)]
    if result.code != 1 or broken:
        raise SnapshotError(f"git add: {' '.join(broken or lines).strip()[:2000]}")
    return [m.group(1) for line in lines if (m := NO_COMMIT.match(line))]
