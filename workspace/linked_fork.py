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

import contextlib
import os
import shutil
import stat
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from . import worktree_files
from .index_files import holding_index, shared_indexes
from .snapshots import EMPTY_TREE, INDEX_WAIT_SECONDS, SnapshotError, Snapshots

LINKABLE = ("100644", "100755")
LINK_THREADS = 2


def materialize(fork: Snapshots, tree: str, source: Snapshots) -> int:
    """Fill ``fork``'s empty worktree with ``tree`` (see the module): the files linked. The
    check after is never skipped: the source's last snapshot may be behind its worktree (a
    revert checks files out without one; a run may be mid-step)."""
    fork.ensure()
    if tree == EMPTY_TREE:
        return 0
    with tempfile.TemporaryDirectory(prefix="fork-index-") as scratch:
        index = os.path.join(scratch, "index")
        shared = _take_index(source, fork, index)
        # What the source's worktree holds: its last snapshot (a file changed since is found
        # by the check below), else a snapshot in the scratch index (written whole).
        last = source.git_dir / "last-tree"
        now = last.read_text().strip() if last.is_file() else ""
        now = now or source.track(index=index)
        if not shared:
            # Whole, not split: a split index names a shared part in the source's git dir.
            source.git("update-index", "--no-split-index", index=index)
        differs = set(fork.patch(now, tree)) if now != tree else set()
        # Without -l: a blob's size would cost a look into the store for each file.
        listing = fork.git("ls-tree", "-r", "-z", tree)
        links, write = [], []
        for record in filter(None, listing.split("\0")):
            meta, _, path = record.partition("\t")
            (links if meta[:6] in LINKABLE and path not in differs else write).append(path)
        linked, missed = _link_all(source.worktree, fork.worktree, links)
        fork.checkout(tree, sorted(write + missed))
        shutil.copyfile(index, fork.git_dir / "index")
    # The fork's files are ``tree``'s: only what differs from it needs a size check.
    (fork.git_dir / "last-tree").write_text(tree)
    made = fork.track()
    if made != tree:
        fork.checkout(tree, fork.patch(made, tree))
        made = fork.track()
        if made != tree:
            raise SnapshotError(f"fork: the worktree is {made}, not {tree}")
    (fork.git_dir / "last-tree").write_text(tree)
    return linked


def _take_index(source: Snapshots, fork: Snapshots, index: str) -> bool:
    """Copy the source's index to ``index``, and link the shared parts of a split index
    (``sharedindex.<id>``: never rewritten, named by their content) into the fork's git dir:
    at 50,000 files the shared part is most of the index's 3 MB, which a fork then does not
    write again. Under the source's index lock, so no git of the source removes a shared part
    meanwhile; False when the lock was not had (the caller makes the index whole)."""
    with holding_index(source.git_dir, INDEX_WAIT_SECONDS) as held:
        if not held:
            if (source.git_dir / "index").is_file():
                shutil.copy2(source.git_dir / "index", index)
            return False
        try:
            shutil.copy2(source.git_dir / "index", index)
        except FileNotFoundError:
            return True  # no index: nothing is split
        for part in shared_indexes(source.git_dir):
            with contextlib.suppress(FileExistsError):
                os.link(part, fork.git_dir / part.name)
        return True


def _link_all(source: Path, fork: Path, paths: list[str]) -> tuple[int, list[str]]:
    """Hard-link ``paths`` (the source's regular files) into the fork: its directories made
    first, the source's opened once each, then the links on ``LINK_THREADS`` threads (a link
    is a system call that gives up the interpreter). The count linked, and the paths that
    could not be (to be written from the store)."""
    directories = sorted({p.rpartition("/")[0] for p in paths})
    made: set[str] = {""}
    missed: list[str] = []
    with _Directories(source) as opened:
        usable = {d for d in directories if _own_dirs(fork, d, made) and opened.of(d) is not None}
        chunks: list[list[tuple[int, str, str]]] = [[] for _ in range(LINK_THREADS)]
        for i, path in enumerate(paths):
            directory, _, leaf = path.rpartition("/")
            if directory not in usable:
                missed.append(path)
                continue
            fd = opened.of(directory)
            assert fd is not None
            chunks[i % LINK_THREADS].append((fd, leaf, os.path.join(fork, path)))
        with ThreadPoolExecutor(LINK_THREADS) as pool:
            for failed in pool.map(_link_chunk, chunks):
                missed += [os.path.relpath(t, fork) for t in failed]
    return len(paths) - len(missed), missed


def _link_chunk(chunk: list[tuple[int, str, str]]) -> list[str]:
    """Link each ``(source directory fd, name, target)``; the targets that failed. A link is
    kept only to a regular file (a link or a special file swapped in since the look goes)."""
    failed = []
    for fd, leaf, target in chunk:
        try:
            os.link(leaf, target, src_dir_fd=fd, follow_symlinks=False)
            if stat.S_ISREG(os.lstat(target).st_mode):
                continue
            os.unlink(target)
        except OSError:
            pass
        failed.append(target)
    return failed


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


def _own_dirs(root: Path, relative: str, made: set[str]) -> bool:
    """``root / relative`` as directories of the fork's own, made where missing; False when a
    file or link stands on the way (the fork's worktree is new: only this function makes its
    directories)."""
    if relative in made:
        return True
    parent = relative.rpartition("/")[0]
    if not _own_dirs(root, parent, made):
        return False
    path = os.path.join(root, relative)
    try:
        os.mkdir(path, 0o755)
    except FileExistsError:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return False
    made.add(relative)
    return True
