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

from . import git_output, snapshot_add, worktree_files, worktree_paths
from .index_files import staged_entries
from .tree_objects import Entries, ancestors, compose_entries, read_trees, write_object


class Snapshots(snapshot_add.Snapshots, Protocol):
    """What is used here of a ``snapshots.Snapshots``."""

    def check(
        self, args: Sequence[str], *, input: bytes | None = None, index: str | None = None
    ) -> bytes: ...
    def blob_entries(self, tree: str, files: list[str]) -> dict[str, tuple[str, str]]: ...


def track_paths(snap: Snapshots, last: str, paths: list[str]) -> str:
    """The tree that is ``last`` with ``paths`` (files or directories) as the worktree holds
    them now."""
    trees = read_trees(snap, last, sorted(ancestors(paths)))
    old = _beneath(snap, last, paths, trees)
    wanted: dict[str, tuple[str, str] | None] = dict.fromkeys(old)
    # A file the last snapshot holds, a file still (or a link): hashed here, no git (no
    # ignore rule applies to a tracked file). Anything else goes through git's ``add``.
    known = {"": True}
    rest = []
    for path in paths:
        entry = _tracked(snap, path, old, known) if path in old else None
        if entry is not None:
            wanted[path] = entry if entry[0] else None
        elif path in old or worktree_paths.present(snap.worktree, path, known):
            rest.append(path)
        elif any(name.startswith(path + "/") for name in old):
            rest.append(path)  # a folder of the last snapshot, gone: its files leave
    if rest:
        wanted.update(_added(snap, rest, old))
    return compose_entries(snap, last, wanted, trees)


def _tracked(
    snap: Snapshots, path: str, old: dict[str, tuple[str, str]], known: dict[str, bool]
) -> tuple[str, str] | None:
    """The entry of ``path`` (a file of the last snapshot) as it is now: ``("", "")`` for
    none (gone, or over ``SNAPSHOT_MAX_FILE_BYTES``); None when git must look (it is a
    folder now, or something else)."""
    if not worktree_paths.present(snap.worktree, path, known):
        return ("", "") if path in old else None
    full = snap.worktree / path
    try:
        info = os.lstat(full)
        if stat.S_ISLNK(info.st_mode):
            target = worktree_files.read_link(snap.worktree, tuple(path.split("/")))
            return "120000", write_object(snap, "blob", os.fsencode(target))
        if not stat.S_ISREG(info.st_mode):
            return None
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        if limit and info.st_size > limit:
            return ("", "")  # large files stay out of snapshots (``skipped`` reports them)
        # By descriptor, one component at a time, no link followed (``worktree_files``).
        fd, _ = worktree_files.open_entry(snap.worktree, tuple(path.split("/")))
    except (OSError, worktree_files.PathRefused):
        return None
    with os.fdopen(fd, "rb") as fh:
        opened = os.fstat(fh.fileno())
        if not stat.S_ISREG(opened.st_mode):
            return None
        data = fh.read()
    mode = "100755" if opened.st_mode & stat.S_IXUSR else "100644"
    return mode, write_object(snap, "blob", data)


def _added(
    snap: Snapshots, paths: list[str], old: dict[str, tuple[str, str]]
) -> dict[str, tuple[str, str] | None]:
    """``paths`` (new ones, folders) through git's ``add`` in a scratch index seeded with
    what the last snapshot holds beneath them: their entries now."""
    prefixes = tuple(p + "/" for p in paths)
    seeded = {n: e for n, e in old.items() if n in paths or n.startswith(prefixes)}
    with tempfile.TemporaryDirectory(prefix="journal-") as scratch:
        index = os.path.join(scratch, "index")
        if seeded:
            info = b"".join(
                f"{mode} {sha}\t".encode() + name.encode("utf-8", "surrogateescape") + b"\0"
                for name, (mode, sha) in seeded.items()
            )
            snap.check(["update-index", "-z", "--index-info"], input=info, index=index)
        snapshot_add.add_paths(snap, paths, index)
        new = staged_entries(Path(index))
    limit = settings.SNAPSHOT_MAX_FILE_BYTES
    found: dict[str, tuple[str, str] | None] = dict.fromkeys(seeded)
    for name, entry in new.items():
        if entry[0] == git_output.GITLINK:
            continue  # none is left (``add_all``), none is taken
        if limit and entry[0] != "120000" and _size(snap, name) > limit:
            continue  # large files stay out of snapshots (``skipped`` reports them)
        found[name] = entry
    return found


def _beneath(
    snap: Snapshots, last: str, paths: list[str], trees: dict[str, Entries]
) -> dict[str, tuple[str, str]]:
    """``{path: (mode, id)}`` of the files ``last`` holds at or beneath ``paths``: a file's
    entry read from its folder's tree (read already, for the new tree); a folder's files
    listed by git (``ls-tree -r``) only when a path names a folder."""
    old: dict[str, tuple[str, str]] = {}
    folders = []
    for path in paths:
        parent, _, leaf = path.rpartition("/")
        entry = trees.get(parent, {}).get(leaf.encode("utf-8", "surrogateescape"))
        if entry is None:
            continue
        if entry[0] == b"40000":
            folders.append(path)
        elif entry[0] != b"160000":
            old[path] = (entry[0].decode("ascii"), entry[1].hex())
    if folders:
        old.update(snap.blob_entries(last, folders))
    return old


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
