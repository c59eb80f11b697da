"""A fork's worktree made of hard links (issue 43): where no process writes a worktree file
in place (the shell writes into a layer, ``layers``; the tools, checkouts and merges make a
new file and rename it), a file can be shared between worktrees by hard link, and a change
only ever makes a new file that its own worktree sees.

``materialize`` fills a fork's empty worktree with ``tree``: each file whose content the
source's worktree holds now is a hard link to it (directories are the fork's own); the rest
(a file changed since ``tree``, a link, a file the source lost) is written from the store.
The fork's index starts as the source's, so the fork's first snapshot is a stat walk that
hashes only what was written. That snapshot is then checked against ``tree``: a file the
source replaced between the look and the link makes a difference, and each difference is
written from the store; the fork's files are ``tree`` whatever the source did meanwhile.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

from . import git_output, worktree_files
from .snapshots import EMPTY_TREE, SnapshotError, Snapshots

LINKABLE = ("100644", "100755")


def materialize(fork: Snapshots, tree: str, source: Snapshots) -> int:
    """Fill ``fork``'s empty worktree with ``tree`` (see the module): the files linked."""
    fork.ensure()
    if tree == EMPTY_TREE:
        return 0
    with tempfile.TemporaryDirectory(prefix="fork-index-") as scratch:
        index = os.path.join(scratch, "index")
        if (source.git_dir / "index").is_file():
            shutil.copy2(source.git_dir / "index", index)
        now = source.track(index=index)  # the source's worktree now, its index fresh
        # Whole, not split: a split index names a shared part in the source's git dir.
        source.git("update-index", "--no-split-index", index=index)
        differs = set(fork.patch(now, tree)) if now != tree else set()
        entries = git_output.tree_entries(fork.git("ls-tree", "-r", "-l", "-z", tree))
        linked, write = 0, []
        with _Directories(source.worktree) as directories:
            for entry in entries:
                linkable = entry.mode in LINKABLE and entry.path not in differs
                if linkable and _link(directories, fork.worktree, entry.path):
                    linked += 1
                    continue
                write.append(entry.path)
        fork.checkout(tree, write)
        shutil.copyfile(index, fork.git_dir / "index")
    made = fork.track()
    if made != tree:
        fork.checkout(tree, fork.patch(made, tree))
        made = fork.track()
        if made != tree:
            raise SnapshotError(f"fork: the worktree is {made}, not {tree}")
    (fork.git_dir / "last-tree").write_text(tree)
    return linked


class _Directories:
    """Descriptors of the source's directories, each opened once, from the worktree's own,
    one component at a time, never through a link (``worktree_files.open_dir``)."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.open: dict[str, int | None] = {}

    def __enter__(self) -> _Directories:
        return self

    def __exit__(self, *exc: object) -> None:
        for fd in self.open.values():
            if fd is not None:
                os.close(fd)

    def of(self, directory: str) -> int | None:
        if directory not in self.open:
            parts = tuple(p for p in directory.split("/") if p)
            try:
                self.open[directory] = worktree_files.open_dir(self.root, parts)
            except (OSError, ValueError):
                self.open[directory] = None
        return self.open[directory]


def _link(directories: _Directories, fork: Path, name: str) -> bool:
    """Hard-link the source's regular file ``name`` into the fork (its directories made);
    False when it is not one there now (a link, gone, a directory)."""
    target = fork / name
    directory, _, leaf = name.rpartition("/")
    source_dir = directories.of(directory)
    if source_dir is None:
        return False
    try:
        if _own_dirs(fork, Path(directory)) is None:
            return False
        os.link(leaf, target, src_dir_fd=source_dir, follow_symlinks=False)
    except OSError:
        return False
    if target.is_symlink() or not target.is_file():  # it was a link or a special file
        target.unlink()
        return False
    return True


def _own_dirs(root: Path, relative: Path) -> Path | None:
    """``root / relative`` as directories of the fork's own (made where missing); None when a
    file or link stands on the way."""
    path = root
    for part in relative.parts:
        path = path / part
        try:
            os.mkdir(path, 0o755)
        except FileExistsError:
            if path.is_symlink() or not path.is_dir():
                return None
    return path
