"""What downloads, shares and blame read out of the snapshots, in the forms they hand on: a
tree's file list (``list_tree``) and blobs (``blobs``, an archive's entries), a diff that
``git apply`` takes (``full_diff``), commits as a mailbox that ``git am`` takes
(``format_patch``), and ``git blame`` of a chain of commits (``blame``). The commits are
the callers' own, written into the store with ``store.write_object``."""

from __future__ import annotations

from . import git_output
from .snapshots import EMPTY_TREE, Snapshots


def list_tree(snap: Snapshots, tree: str) -> list[dict[str, object]]:
    """The files of ``tree`` with their sizes (a pinned share's file list)."""
    snap.ensure()
    entries = git_output.tree_entries(snap.git("ls-tree", "-r", "-l", "-z", tree))
    files = [
        {"path": e.path, "size": int(e.size) if e.size.isdigit() else 0}
        for e in entries
        if e.kind == "blob"
    ]
    return sorted(files, key=lambda f: f["path"])


def blobs(snap: Snapshots, tree: str) -> list[tuple[str, int, str, int]]:
    """``(path, mode, id, size)`` of every blob of ``tree`` (files, executables, symbolic
    links), by path: what an archive of it holds."""
    if tree == EMPTY_TREE:
        return []
    snap.ensure()
    entries = git_output.tree_entries(snap.git("ls-tree", "-r", "-l", "-z", tree))
    return sorted((e.path, int(e.mode, 8), e.sha, int(e.size)) for e in entries if e.kind == "blob")


def full_diff(snap: Snapshots, tree: str, other: str) -> str:
    """The whole unified diff from ``tree`` to ``other``, binary files included (what
    ``git apply`` takes)."""
    if tree == other:
        return ""
    snap.ensure()
    return snap.git(
        "diff-tree",
        "-r",
        "-p",
        "--binary",
        "--full-index",
        "--no-renames",
        "--no-color",
        tree,
        other,
    )


def format_patch(snap: Snapshots, base: str, tip: str) -> str:
    """The commits ``base..tip`` (written with ``store.write_object``) as a mailbox (what
    ``git am`` takes)."""
    snap.ensure()
    return snap.git(
        "format-patch",
        "--stdout",
        "--binary",
        "--full-index",
        "--no-signature",
        f"{base}..{tip}",
    )


def blame(snap: Snapshots, commit: str, path: str) -> list[tuple[int, int, str]]:
    """``git blame`` of ``path`` at ``commit`` (a chain written with ``store.write_object``):
    ``(start, end, commit)`` for each run of lines (1-based, ``end`` included), in line
    order; what ``--incremental`` gives, without the lines themselves. ``--no-follow``:
    a file a commit adds is its own, never another one's renamed."""
    snap.ensure()
    out = snap.git("blame", "--incremental", "--no-follow", commit, "--", path)
    return git_output.blame_groups(out)
