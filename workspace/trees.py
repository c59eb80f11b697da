"""Trees made in the object store, never in the worktree or the index: ``compose`` (a tree
with some files taken from other trees, what a revert writes) and ``merge_trees`` (a
three-way merge, what applying a change to a moved-on session writes)."""

from __future__ import annotations

from . import git_output
from .git_output import OBJECT_ID
from .snapshots import SnapshotError, Snapshots
from .tree_objects import compose_entries, write_object


def compose(snap: Snapshots, base: str, sources: dict[str, str]) -> str:
    """The tree that is ``base`` with each file of ``sources`` as it is in its tree
    (absent there → absent here). Only the trees on the changed paths are read and
    written, so the cost follows the files changed, not the worktree; the worktree and
    the index are not touched."""
    if not sources:
        return base
    wanted: dict[str, tuple[str, str] | None] = {}
    by_tree: dict[str, list[str]] = {}
    for name, tree in sources.items():
        by_tree.setdefault(tree, []).append(name)
    for tree, names in by_tree.items():
        entries = snap.blob_entries(tree, names)
        for name in names:
            wanted[name] = entries.get(name)
    return compose_entries(snap, base, wanted)


def merge_trees(snap: Snapshots, base: str, ours: str, theirs: str) -> tuple[str, list[str]]:
    """Three-way, in the store (no worktree, no index): ``ours`` with the change from
    ``base`` to ``theirs`` applied, by git's own merge (``merge-tree --write-tree``, on
    three commits made for it: ``base`` the parent of the two others). The resulting
    tree, and the files it left with conflict markers. No rename detection: a file is
    its path; nothing of the trees' ``.gitattributes`` can name a driver that runs
    (no config names one)."""
    ident = "agentplat <agentplat@agentplat.invalid> 0 +0000"

    def commit(tree: str, parent: str | None = None) -> str:
        lines = [f"tree {tree}", *([f"parent {parent}"] if parent else [])]
        body = "\n".join([*lines, f"author {ident}", f"committer {ident}", "", "merge", ""])
        return write_object(snap, "commit", body.encode())

    root = commit(base)
    result = snap.run(
        [
            "-c", "merge.renames=false", "-c", "merge.conflictStyle=merge",
            "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages",
            commit(ours, root), commit(theirs, root),
        ]
    )  # fmt: skip
    if result.code not in (0, 1):
        raise SnapshotError(f"git merge-tree: {result.stderr.strip()}")
    tree, conflicts = git_output.merge_tree(result.stdout)
    if not OBJECT_ID.fullmatch(tree):
        raise SnapshotError("git merge-tree gave no tree")
    return tree, conflicts
