"""A worktree put back as it was before a shell command that went over its limits
(``sandbox.run``'s ``worktree-size``): the snapshot taken before it, and the list of every
entry for what snapshots do not hold."""

from __future__ import annotations

import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from .worktree_usage import open_up, walk


def _kind(entry: os.DirEntry) -> tuple[str, int]:
    """An entry's kind (``d``irectory, ``l``ink, ``f``ile, ``o``ther) and a file's size."""
    try:
        if entry.is_dir(follow_symlinks=False):
            return "d", 0
        if entry.is_symlink():
            return "l", 0
        return ("f" if entry.is_file(follow_symlinks=False) else "o"), entry.stat(
            follow_symlinks=False
        ).st_size
    except OSError:
        return "o", 0


class SnapshotsLike(Protocol):
    """What ``Undo`` needs of a session's snapshots (``workspace.snapshots.Snapshots``)."""

    def track(self) -> str: ...
    def restore(self, tree: str) -> None: ...


@dataclass
class Undo:
    """A worktree as it was before a command: a snapshot (``track``, which the loop may take:
    it holds the session's lock) and the list of every entry, kind and size, for what
    snapshots do not hold (files over ``SNAPSHOT_MAX_FILE_BYTES``, ignored ones, names git
    refuses, empty directories, a nested ``.git``)."""

    worktree: Path
    snapshots: SnapshotsLike
    tree: str
    entries: dict[str, tuple[str, int]]

    @classmethod
    def record(cls, worktree: Path, snapshots: SnapshotsLike) -> Undo:
        tree = snapshots.track()
        entries = {name: _kind(entry) for name, entry in walk(worktree)}
        return cls(worktree, snapshots, tree, entries)

    def apply(self) -> list[str]:
        """Put the worktree back (the command's processes are gone): every entry it made
        is deleted (first: the bulk of what it wrote never reaches the snapshot store),
        then the snapshot is restored. The paths that could not be put back (changed files
        snapshots do not hold), [] when it is exactly as before."""
        open_up(self.worktree)
        doomed = [
            name
            for name, entry in walk(self.worktree)
            if self.entries.get(name, ("", 0))[0] != _kind(entry)[0]
        ]
        for name in doomed:  # a directory before its contents (the walk's order)
            path = os.path.join(self.worktree, name)
            try:
                if os.path.isdir(path) and not os.path.islink(path):
                    shutil.rmtree(path)  # by descriptor, never following a link
                else:
                    os.unlink(path)
            except FileNotFoundError:
                continue
        self.snapshots.restore(self.tree)
        now = {name: _kind(entry) for name, entry in walk(self.worktree)}
        return sorted(name for name, was in self.entries.items() if now.get(name) != was)
