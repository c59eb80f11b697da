"""The files of a session import (``importing.py``): written into the session's own store and
worktree where this process holds worktrees (``write_files``), else through the central
store (issue 45, step 3: a web process started with ``WORKSPACE_ROOT=""``,
``core.mode.holds_worktrees()`` False), as an upload is (``sessions_app/repositories/
upload_store.py``).

**Without a worktree.** The document's objects and the head's files are written in a scratch
directory outside ``WORKSPACE_ROOT`` (``tempfile``): a scratch git dir and the worktree beside
it, whose snapshot is the head's tree. Every tree the imported rows name (parts' snapshots, a
run's branch's files, a pending revert's) becomes one commit of a chain, one per distinct
tree in the order the rows name them, parented in that order (``replication.commit``'s fixed
identity), the head's tree last; the chain is pushed once to the central store
(``SNAPSHOT_REMOTE``) as the new session's ref ``refs/sessions/<id>/head``. The web's mirror
then reads every step's files, and a host that materialises the session fetches every tree
a revert may need. Objects the document leaves out because the source session (the
importer's own) names them are read from the mirror (``importing._check_missing_objects``
fetched them there): the scratch store borrows the mirror's objects (git's
``objects/info/alternates``) so that a tree reaching one is whole and pushed. A tree the
store lacks part of (an object the source had lost) is left out of the chain: reading it
fails here as it failed in the source.

The caller records the ref (``Session.replicated_*``) with the rows; if that fails, the ref
is deleted again (best effort). Then the session's home materialises the head's files
(``host_calls``' ``materialize``, bounded by ``HOST_CALL_TIMEOUT``); a home that does not
answer in time does it at the session's next run or move, and the import still succeeds.
"""

from __future__ import annotations

import contextlib
import logging
import os
import tempfile
from collections.abc import Iterator
from pathlib import Path

from sessions_app import host_calls
from sessions_app.models import Session
from workspace import replication, snapshots, store, tree_objects

from .import_checks import ImportPlan

log = logging.getLogger(__name__)

NEEDS_STORE = (
    "An import needs the central store (SNAPSHOT_REMOTE) on a web process that holds no worktree."
)


def write_files(snap: snapshots.Snapshots, plan: ImportPlan) -> str:
    """The snapshot objects into the store, the files into the (new, empty) worktree; the
    worktree's tree."""
    snap.ensure()
    for item in plan.objects:
        tree_objects.write_object(
            snap, item.type, item.body
        )  # its id is checked: the hash of its content
    root = snap.worktree
    for file in plan.files:
        target = root / file.path
        target.parent.mkdir(parents=True, exist_ok=True)
        # O_EXCL | O_NOFOLLOW: the worktree is new, and nothing is written through a link.
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW
        fd = os.open(target, flags, 0o600)
        with os.fdopen(fd, "wb") as fh:
            fh.write(file.content)
        os.chmod(target, 0o755 if file.executable else 0o644)
    return snap.track()


def named_trees(plan: ImportPlan) -> list[str]:
    """The trees the imported rows name, each once, in the order they name them: the parts'
    snapshots (oldest message first), the runs' branches' files, a pending revert's."""
    names = [p["data"].get("snapshot") for m in plan.messages for p in m["parts"]]
    names += [(r["branch"] or {}).get("files") for r in plan.runs]
    names.append((plan.session["revert"] or {}).get("snapshot"))
    wanted = [n for n in names if isinstance(n, str) and n != snapshots.EMPTY_TREE]
    return list(dict.fromkeys(wanted))


@contextlib.contextmanager
def pushed(
    session_id: str, plan: ImportPlan, borrowed: snapshots.Snapshots | None
) -> Iterator[tuple[str, str]]:
    """(No worktree here.) The document written in a scratch store and pushed as the
    session's ref (see the module): ``(commit, head's tree)``, for the caller to record
    inside the ``with``; a failure there deletes the ref again. ``borrowed``: the mirror
    the objects the document left out were read from (None: none left out)."""
    with tempfile.TemporaryDirectory(prefix="agentplat-import-") as scratch:
        root = Path(scratch)
        snap = snapshots.Snapshots(git_dir=root / "git", worktree=root / "tree")
        snap.ensure()
        if borrowed is not None:
            alternates = snap.git_dir / "objects" / "info" / "alternates"
            alternates.write_text(f"{(borrowed.git_dir / 'objects').resolve()}\n")
        head = write_files(snap, plan)
        tree_objects.write_object(snap, "tree", b"")  # the empty tree, when it is the head's
        parent = ""
        for tree in _whole(snap, [t for t in named_trees(plan) if t != head]):
            parent = replication.commit(snap, tree, parent)
        try:
            commit = replication.push(snap, session_id, head, "", parent=parent)
        except replication.ReplicationError as exc:
            log.warning(
                "session %s: the import did not reach the central store: %s", session_id, exc
            )
            raise host_calls.HostUnavailable(
                "The import could not be stored (the central store did not take it); try again."
            ) from None
        try:
            yield commit, head
        except BaseException:
            with contextlib.suppress(replication.ReplicationError):
                replication.delete(snap, session_id, commit)
            raise


def _whole(snap: snapshots.Snapshots, trees: list[str]) -> list[str]:
    """Those of ``trees`` the scratch store holds whole (every object they reach), in order."""
    held = {sha for sha, kind, _size in store.object_info(snap, trees) if kind == "tree"}
    trees = [t for t in trees if t in held]
    _reachable, lost = store.objects_named(snap, trees)
    if not lost:
        return trees
    return [t for t in trees if not store.objects_named(snap, [t])[1]]


def materialize(session: Session, user) -> Session:  # noqa: ANN001
    """Ask the session's home to materialise its files now (a home that does not answer in
    time does it at the next run or move)."""
    try:
        return host_calls.call("materialize", session=session, user=user)
    except host_calls.HostUnavailable as exc:
        log.warning("session %s: the import is not on its host yet: %s", session.id, exc)
        return Session.objects.get(id=session.id)
