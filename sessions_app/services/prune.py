"""Pruning the shared snapshot store (``manage.py prune_snapshots``): the database side.

The store only grows: every step's ``git add`` and every composed revert tree adds objects,
and nothing deletes them when a cleanup, a rollback or a session's deletion stops naming a
tree. This module gathers every tree id a row names; ``store.prune_store`` keeps those,
what they reach and what the session git dirs name, and deletes the rest once it is old.
"""

from __future__ import annotations

import time

from workspace import snapshots, store
from workspace.git_output import OBJECT_ID

from ..models import HistoryEvent, Part, Session, Share

# HistoryEvent data keys that hold a tree id ("files" of a continue/regenerate; a revert's
# "files" is a list of names, which the id pattern leaves out).
EVENT_TREE_KEYS = ("snapshot", "files_before", "files")


def named_trees() -> set[str]:
    """Every tree id a row names: parts (step-start, step-finish, patch: any part whose data
    has a ``snapshot``), a pending revert's pre-revert tree, shares, and history events."""
    named: set[str] = set()
    parts = (
        Part.objects.filter(data__has_key="snapshot")
        .order_by()
        .values_list("data__snapshot", flat=True)
        .distinct()
    )
    named.update(tree for tree in parts.iterator(chunk_size=5000) if isinstance(tree, str))
    reverts = Session.objects.filter(revert__has_key="snapshot").values_list(
        "revert__snapshot", flat=True
    )
    named.update(tree for tree in reverts.iterator() if isinstance(tree, str))
    named.update(Share.objects.exclude(snapshot="").values_list("snapshot", flat=True).distinct())
    for data in HistoryEvent.objects.values_list("data", flat=True).iterator(chunk_size=5000):
        if isinstance(data, dict):
            named.update(v for k in EVENT_TREE_KEYS if isinstance(v := data.get(k), str))
    return {tree for tree in named if OBJECT_ID.fullmatch(tree)}


def prune_snapshots(*, days: float, dry_run: bool = False) -> store.PruneResult:
    """Delete the loose objects of the shared store that no row and no session git dir needs
    and that are older than ``days`` (``dry_run``: only count them)."""
    if days <= 0:
        raise ValueError("days must be positive: younger objects may belong to work in flight")
    # Taken before the rows are read: whatever is written after that read is younger.
    cutoff = time.time() - days * 86400
    named = named_trees()
    root = snapshots.store_path().parent
    # Listed after the rows: a session made meanwhile has its git dir (and last tree) seen.
    git_dirs = sorted(p for p in root.glob("*.git") if p.is_dir()) if root.is_dir() else []
    return store.prune_store(
        snapshots.store_path(), named, git_dirs=git_dirs, cutoff=cutoff, dry_run=dry_run
    )
