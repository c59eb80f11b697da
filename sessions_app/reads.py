"""Where the read services read snapshots (issue 45, step 3): the one choice between the
session's own snapshot store and the web's mirror of the central store.

A process that holds the worktrees (``core.mode.holds_worktrees()``: a worker, embedded mode,
a web process beside its workers on one disk) reads the session's store as it always did. A
web process started with ``WORKSPACE_ROOT=""`` holds none: it reads ``workspace.mirror``,
which fetches from ``SNAPSHOT_REMOTE`` the trees it lacks, following the session's lineage
(the sessions it was forked from) while one is still missing, and never opens a path under
``WORKSPACE_ROOT``. Called by the file viewer and listing (``selectors.worktree_entry``),
diffs (``services/changes.py``), downloads, compare, blame, the shared page and the export.

What a reader cannot have is a JSON error, never a 500: trees the store does not hold are a
404 (``NotFoundError``), a store that cannot be reached a 503 (``StoreUnavailable``).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from django.conf import settings

from core.errors import AppError, InvalidInput, NotFoundError
from core.mode import holds_worktrees
from workspace import mirror, replication, snapshots, worktree_files

from .models import Session

MISSING = "The snapshots this needs are not in the snapshot store."
LINK = "The path goes through a symbolic link; links are not followed."
LINEAGE_MAX = 100  # forks of forks followed back, at most


class StoreUnavailable(AppError):
    """The central store cannot be reached now (the mirror lacked what the read needs)."""

    status_code = 503
    type = "ServiceUnavailable"


def snapshots_for_read(
    session: Session, *trees: str | None, strict: bool = True
) -> snapshots.Snapshots:
    """The store to read ``trees`` of ``session`` from: its own (``snapshots.for_session``)
    when this process holds worktrees; else the mirror, holding ``trees`` (fetched when
    missing). ``strict`` False: the mirror as it is when some stay missing (the export lists
    the objects it lacks)."""
    if holds_worktrees():
        return snapshots.for_session(session)
    try:
        return mirror.ensure(lineage(session), [t for t in trees if t], strict=strict)
    except mirror.MirrorMissing:
        raise NotFoundError(MISSING) from None
    except replication.ReplicationError as exc:
        raise StoreUnavailable(f"The snapshot store cannot be reached now ({exc}).") from None


def lineage(session: Session) -> Iterator[str]:
    """The session's id, then those of the sessions it was forked from, nearest first (each
    read from the database only when the mirror still lacks a tree)."""
    seen = {session.id}
    yield session.id
    source = session.forked_from_session_id
    while source and source not in seen and len(seen) < LINEAGE_MAX:
        seen.add(source)
        yield source
        source = (
            Session.objects.filter(id=source).values_list("forked_from_session_id", flat=True)
        ).first()


def tree_entry(session: Session, tree: str, path: str) -> list[dict[str, object]] | bytes:
    """``path`` in ``tree`` (the session's files now, in a process without worktrees), read
    from the mirror: a directory's listing or a file's bytes, as ``worktree_entry`` gives the
    worktree's (the same errors for the same cases)."""
    try:
        parts = worktree_files.parts_of(Path("/"), path)
    except worktree_files.PathRefused as exc:
        raise InvalidInput(str(exc)) from exc
    snap = snapshots_for_read(session, tree)
    try:
        return mirror.tree_entry(snap, tree, parts, limit=settings.API_FILES_MAX)
    except mirror.NotInTree:
        raise NotFoundError("No such file.") from None
    except mirror.LinkInTree:
        raise InvalidInput(LINK) from None
    except snapshots.MissingObjectError:
        raise NotFoundError(MISSING) from None
