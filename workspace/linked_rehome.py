"""A re-homed session's worktree made of hard links where it can be (issue 45, step 4: "its
files shared by hard link with sessions of the same commit already on that host").

``materialize`` fills a session's empty worktree on this host with ``tree`` (its last
replicated snapshot, already fetched into the store). Where no process writes a worktree
file in place (``sandbox.uses_layers``, as ``linked_fork`` and ``shared_checkouts`` require),
the files come by hard link from what this host already holds of the same tree:

* a local session whose last snapshot (``last-tree`` in its git dir) is ``tree``: the fork's
  path, ``linked_fork.materialize`` (its files linked, its index taken, the result checked
  against ``tree`` and each difference written from the store, whatever that session's run
  does meanwhile);
* else a kept checkout of ``tree`` (``shared_checkouts``, a clone's files of that commit):
  its files linked and its index taken the same way, then checked the same way.

Otherwise, or when linking fails (its partial worktree is emptied first), the tree is
checked out from the store (``Snapshots.materialize``), as before. The look for a same-tree
session reads one small file per session of this host (``WORKSPACE_ROOT/.snapshots``); it
needs no database, so the host's disk alone says what it holds.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path

from django.conf import settings

from . import linked_fork, sandbox, shared_checkouts
from .snapshots import EMPTY_TREE, SnapshotError, Snapshots, store_path

log = logging.getLogger(__name__)


def materialize(snap: Snapshots, tree: str) -> int:
    """Fill ``snap``'s empty worktree with ``tree`` (see the module): the files linked."""
    if tree != EMPTY_TREE and sandbox.uses_layers(snap.worktree):
        try:
            source = same_tree_session(snap, tree)
            if source is not None:
                return linked_fork.materialize(snap, tree, source)
            entry = shared_checkouts.root() / tree
            if shared_checkouts.enabled() and (entry / "index").is_file():
                return _from_checkout(snap, tree, entry)
        except (SnapshotError, OSError) as exc:
            log.info("re-home of %s not linked (%s): checked out instead", snap.worktree, exc)
            _empty(snap.worktree)
    snap.materialize(tree)
    return 0


def same_tree_session(snap: Snapshots, tree: str) -> Snapshots | None:
    """Another session of this host whose last snapshot is ``tree`` and whose worktree is
    here; None when there is none."""
    root = Path(settings.WORKSPACE_ROOT)
    try:
        entries = list(os.scandir(root / ".snapshots"))
    except FileNotFoundError:
        return None
    for entry in entries:
        if not entry.name.endswith(".git") or Path(entry.path) == snap.git_dir:
            continue
        try:
            with open(os.path.join(entry.path, "last-tree")) as f:
                last = f.read().strip()
        except OSError:
            continue
        worktree = root / entry.name.removesuffix(".git")
        if last == tree and worktree.is_dir() and not worktree.is_symlink():
            return Snapshots(git_dir=Path(entry.path), worktree=worktree, objects=store_path())
    return None


def _from_checkout(snap: Snapshots, tree: str, entry: Path) -> int:
    """``tree``'s files linked from a kept checkout of it, its index taken (the links share
    its stat data but for ctime, which the snapshot ignores), then checked as a fork's."""
    snap.ensure()
    os.utime(entry)  # used now: the sweep keeps it
    listing = snap.git("ls-tree", "-r", "-z", tree)
    links, write = [], []
    for record in filter(None, listing.split("\0")):
        meta, _, path = record.partition("\t")
        (links if meta[:6] in linked_fork.LINKABLE else write).append(path)
    linked, missed = linked_fork._link_all(entry / "files", snap.worktree, links)
    snap.checkout(tree, sorted(write + missed))
    shutil.copy2(entry / "index", snap.git_dir / "index")
    (snap.git_dir / "last-tree").write_text(tree)
    made = snap.track()
    if made != tree:
        snap.checkout(tree, snap.patch(made, tree))
        made = snap.track()
        if made != tree:
            raise SnapshotError(f"re-home: the worktree is {made}, not {tree}")
    (snap.git_dir / "last-tree").write_text(tree)
    return linked


def _empty(worktree: Path) -> None:
    """The worktree's contents removed (a half-linked attempt), the directory kept."""
    for entry in os.scandir(worktree):
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
