"""A snapshot from the journal (issue 43): the tree a walk of the whole worktree would give,
made from the last snapshot and the paths the worktree's writers said they changed
(``change_journal``), at a cost that follows those paths, not the worktree.

Every git process that opens the session's index reads all of it (3.4 MB at 50,000 files,
about 15 ms each): an ``add`` of one path and its ``write-tree`` cost 40 ms whatever they
add. So the paths are taken in a scratch index of their own: seeded with what the last
snapshot holds beneath them (``update-index --index-info``: a file the worktree's
``.gitignore`` ignores stays as the session's index would keep it), brought up to date by
the same ``add`` as a walk's (``snapshot_add.add_paths``: excludes, names git refuses), then
read back without git (``index_files.staged_entries``). The new tree is the last one with
those entries (``tree_objects.compose_entries``: only the trees on their paths are read and
written); a file over ``SNAPSHOT_MAX_FILE_BYTES`` is left out as the walk leaves it out.
Where a directory on the paths' way holds a ``.git`` (``usable``), the walk does it.

The session's own index is not touched: it stays the stat cache of the walks (the verifier's,
the fallback's), which hash again the few files that changed since.
"""

from __future__ import annotations

import os
import stat
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import Protocol

from django.conf import settings

from . import git_output, snapshot_add, worktree_paths
from .index_files import staged_entries
from .tree_objects import compose_entries


class Snapshots(snapshot_add.Snapshots, Protocol):
    """What is used here of a ``snapshots.Snapshots``."""

    def check(
        self, args: Sequence[str], *, input: bytes | None = None, index: str | None = None
    ) -> bytes: ...
    def blob_entries(self, tree: str, files: list[str]) -> dict[str, tuple[str, str]]: ...


def track_paths(snap: Snapshots, last: str, paths: list[str]) -> str:
    """The tree that is ``last`` with ``paths`` (files or directories) as the worktree holds
    them now."""
    old = snap.blob_entries(last, paths)
    with tempfile.TemporaryDirectory(prefix="journal-") as scratch:
        index = os.path.join(scratch, "index")
        if old:
            info = b"".join(
                f"{mode} {sha}\t".encode() + name.encode("utf-8", "surrogateescape") + b"\0"
                for name, (mode, sha) in old.items()
            )
            snap.check(["update-index", "-z", "--index-info"], input=info, index=index)
        snapshot_add.add_paths(snap, paths, index)
        new = {
            name: entry
            for name, entry in staged_entries(Path(index)).items()
            if entry[0] != git_output.GITLINK  # none is left (``add_all``), none is taken
        }
    limit = settings.SNAPSHOT_MAX_FILE_BYTES
    wanted: dict[str, tuple[str, str] | None] = dict.fromkeys(old)
    for name, entry in new.items():
        if limit and entry[0] != "120000" and _size(snap, name) > limit:
            continue  # large files stay out of snapshots (``skipped`` reports them)
        wanted[name] = entry
    return compose_entries(snap, last, wanted)


def usable(snap: Snapshots, paths: list[str]) -> bool:
    """Whether ``paths`` can be taken apart from the session's index: no directory on their
    way holds a ``.git`` (a repository nested in the worktree is a directory to git only
    where the index holds files beneath it: the walk's business)."""
    seen: set[str] = set()
    real = {"": True}  # directories reached through directories alone (no link followed)
    for path in paths:
        parts = path.split("/")[:-1]
        for depth in range(1, len(parts) + 1):
            directory = "/".join(parts[:depth])
            if directory in seen:
                continue
            seen.add(directory)
            if worktree_paths.present(snap.worktree, directory + "/.git", real):
                return False
    return True


def _size(snap: Snapshots, name: str) -> int:
    try:
        info = os.lstat(snap.worktree / name)
    except OSError:
        return -1
    return info.st_size if stat.S_ISREG(info.st_mode) else -1
