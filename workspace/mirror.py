"""The read-only mirror of the central store kept by a web process that holds no worktree
(issue 45, step 3; ``core.mode.holds_worktrees()`` False, ``WORKSPACE_ROOT=""``).

**What it is.** One git directory, ``MIRROR_ROOT/store.git``, made on first use: the refs
``refs/sessions/<id>/head`` fetched from ``SNAPSHOT_REMOTE`` (``replication.fetch``, with the
ref kept: the next fetch of the session brings only what is new), and the objects they reach.
Each ref is a chain of commits, one per replicated snapshot of the session
(``replication.py``), so one fetch brings every tree the session's steps replicated. Its
``Snapshots`` (``store()``) has the same read API the read services use on a session's own
store (``diff_stat``, ``diff_text``, ``read_blob``, ``tree_reads``…); its "worktree" is an
empty directory of the mirror's, which no git command of a read looks at. Nothing under
``WORKSPACE_ROOT`` is ever opened. The only objects written besides fetched ones are the
commits blame and a patch download build in their store (a fixed identity and date: the
same reads write the same objects). It is disposable: deleted, it refills itself.

**On demand.** ``ensure(lineage, trees)`` fetches only when one of ``trees`` is missing: first
the session's ref, then, while a tree is still missing, the refs of the sessions it was forked
from (a fork's parts name trees of its source's steps, which only the source's chain holds).
Fetches of the same session coalesce: each holds a lock file of the session's
(``MIRROR_ROOT/locks/<id>``, ``flock``: across threads and processes), and the one that waited
looks again before it fetches. Git runs through ``repos.run`` as a push does (``replication``:
a checked URL, the operator's credentials, a deadline), never in a worktree.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import re
from collections.abc import Iterable, Iterator
from pathlib import Path

from django.conf import settings

from . import git_output, replication
from .snapshot_errors import MissingObjectError
from .snapshots import EMPTY_TREE, Snapshots

TREE_ID = re.compile(r"[0-9a-f]{40}")
SESSION_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")
NO_SUCH_REF = "couldn't find remote ref"


class MirrorMissing(MissingObjectError):
    """Trees that neither the mirror nor the central store holds (never replicated, or
    replicated under a session the lineage does not lead to)."""


def store() -> Snapshots:
    """The mirror's store (its git dir made on first use)."""
    root = Path(settings.MIRROR_ROOT)
    snap = Snapshots(git_dir=root / "store.git", worktree=root / "empty")
    snap.ensure()
    return snap


def missing(snap: Snapshots, trees: Iterable[str]) -> list[str]:
    """Those of ``trees`` the store lacks (a name that is not a tree id counts as lacking)."""
    wanted = sorted({t for t in trees if t and t != EMPTY_TREE})
    named = [t for t in wanted if TREE_ID.fullmatch(t)]
    lacking = [t for t in wanted if not TREE_ID.fullmatch(t)]
    if not named:
        return lacking
    query = "".join(f"{t}^{{tree}}\n" for t in named).encode()
    lines = snap.check(["cat-file", "--batch-check"], input=query).decode().splitlines()
    lacking += [t for t, line in zip(named, lines, strict=True) if line.endswith(" missing")]
    return lacking


def ensure(lineage: Iterable[str], trees: Iterable[str], *, strict: bool = True) -> Snapshots:
    """The mirror's store, holding every one of ``trees`` (the empty tree is always there):
    what it lacks is fetched from the central store, the refs of ``lineage`` in order (the
    session, then the sessions it was forked from; asked for only as long as a tree is
    missing). ``MirrorMissing`` when trees are still missing at the end (``strict``; else
    the store is returned as it is), ``replication.ReplicationError`` when the store cannot
    be reached."""
    snap = store()
    left = missing(snap, trees)
    for session_id in lineage if left else ():
        if not SESSION_ID.fullmatch(session_id):
            continue
        with _session_lock(session_id):
            left = missing(snap, left)  # another request may have fetched it meanwhile
            if not left:
                break
            _fetch(snap, session_id)
            left = missing(snap, left)
        if not left:
            break
    if left and strict:
        raise MirrorMissing(f"{len(left)} snapshot(s) are in neither the mirror nor the store")
    return snap


def _fetch(snap: Snapshots, session_id: str) -> None:
    """The session's ref from the central store; a session never replicated has none (not an
    error: the next of the lineage may hold the trees)."""
    try:
        replication.fetch(snap, session_id, keep=True)
    except replication.ReplicationError as exc:
        if NO_SUCH_REF not in str(exc):
            raise


@contextlib.contextmanager
def _session_lock(session_id: str) -> Iterator[None]:
    """The session's lock file, held for one fetch (an open file description of its own per
    holder: threads of one process wait on each other as processes do)."""
    locks = Path(settings.MIRROR_ROOT) / "locks"
    locks.mkdir(parents=True, exist_ok=True)
    fd = os.open(locks / session_id, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW, 0o600)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


# -- a path of a tree, as the file viewer reads the worktree's ---------------------------------
class NotInTree(Exception):
    """Nothing at that path of the tree."""


class LinkInTree(Exception):
    """The path names a symbolic link (the viewer never follows one)."""


def tree_entry(
    snap: Snapshots, tree: str, parts: tuple[str, ...], *, limit: int
) -> list[dict[str, object]] | bytes:
    """``parts`` in ``tree``: a directory as the files under it (``{"path", "size"}`` by path,
    at most ``limit``: what the worktree's listing gives), a file as its bytes. ``NotInTree``,
    ``LinkInTree``; a file read from the mirror is this call with a file's path."""
    path = "/".join(parts)
    if path:
        found = git_output.tree_entries(snap.git("ls-tree", "-l", "-z", tree, "--", path))
        entry = next((e for e in found if e.path == path), None)
        if entry is None:
            raise NotInTree(path)
        if entry.kind == "blob":
            if entry.mode == "120000":
                raise LinkInTree(path)
            return snap.check(["cat-file", "blob", entry.sha])
        if entry.kind != "tree":
            raise NotInTree(path)
    listing = snap.git("ls-tree", "-r", "-l", "-z", tree, *(["--", f"{path}/"] if path else []))
    files = [
        {"path": e.path, "size": int(e.size) if e.size.isdigit() else 0}
        for e in git_output.tree_entries(listing)
        if e.kind == "blob"
    ]
    return sorted(files, key=lambda f: f["path"])[:limit]
