"""What downloads, shares and blame read out of the snapshots, in the forms they hand on: a
tree's file list (``list_tree``) and blobs (``blobs``, an archive's entries), a diff that
``git apply`` takes (``full_diff``), commits as a mailbox that ``git am`` takes
(``format_patch``) — both streamed, and measured before by ``changed_sizes`` — and ``git
blame`` of a chain of commits (``blame``). The commits are the callers' own, written into
the store with ``tree_objects.write_object``."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from . import git_output, store
from .snapshots import EMPTY_TREE, Snapshots

ZERO_ID = "0" * 40  # the id a raw diff gives the side of a file that is not there


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


def changed_sizes(snap: Snapshots, pairs: Sequence[tuple[str, str]]) -> list[tuple[str, int]]:
    """``(path, size before + size after)`` of each file that differs between the two trees
    of each of ``pairs`` (once for each pair it differs in): what git would read to write
    their diffs, found without writing them (a raw ``diff-tree`` and the sizes of the
    blobs it names). A side that is no blob (absent, a gitlink) counts 0."""
    pairs = [(a, b) for a, b in pairs if a != b]
    if not pairs:
        return []
    snap.ensure()
    lines = "".join(f"{a} {b}\n" for a, b in pairs).encode("ascii")
    raw = snap.check(["diff-tree", "-r", "-z", "--no-renames", "--stdin"], input=lines)
    changes = git_output.raw_changes(raw.decode("utf-8", "surrogateescape"))
    ids = {sha for _, before, after in changes for sha in (before, after)} - {ZERO_ID}
    sizes = {sha: size for sha, kind, size in store.object_info(snap, ids) if kind == "blob"}
    return [(path, sizes.get(before, 0) + sizes.get(after, 0)) for path, before, after in changes]


def full_diff(snap: Snapshots, tree: str, other: str) -> Iterator[bytes]:
    """The whole unified diff from ``tree`` to ``other``, binary files included (what
    ``git apply`` takes), in chunks as git writes it."""
    if tree == other:
        return iter(())
    snap.ensure()
    args = ["diff-tree", "-r", "-p", "--binary", "--full-index", "--no-renames", "--no-color"]
    return snap.stream([*args, tree, other])


def format_patch(snap: Snapshots, base: str, tip: str) -> Iterator[bytes]:
    """The commits ``base..tip`` (written with ``tree_objects.write_object``) as a mailbox (what
    ``git am`` takes), in chunks as git writes it."""
    snap.ensure()
    args = ["format-patch", "--stdout", "--binary", "--full-index", "--no-signature"]
    return snap.stream([*args, f"{base}..{tip}"])


def blame(snap: Snapshots, commit: str, path: str) -> list[tuple[int, int, str]]:
    """``git blame`` of ``path`` at ``commit`` (a chain written with ``tree_objects.write_object``):
    ``(start, end, commit)`` for each run of lines (1-based, ``end`` included), in line
    order; what ``--incremental`` gives, without the lines themselves. ``--no-follow``:
    a file a commit adds is its own, never another one's renamed."""
    snap.ensure()
    out = snap.git("blame", "--incremental", "--no-follow", commit, "--", path)
    return git_output.blame_groups(out)
