"""A session's snapshots replicated to the central store (``SNAPSHOT_REMOTE``; the git side
and the ref's design are ``workspace/replication.py``), and the record of it on the session
row: ``replicated_commit`` (what the store's ref names), ``replicated_snapshot`` (the tree it
wraps) and ``replicated_at``, where re-homing a session will restart from.

Called wherever the session's files get a new snapshot: the end of each step that ran tools
(``runs_app/execution/loop/step_end.py``, inside the step: the step is not over before its
files are in the store), the history moves that write files (``FilesFollow``, after their
commit) and a clone's or upload's first snapshot (``repositories/fill.py``). A rollback moves
the conversation only: the files, and so the replicated snapshot, stay as they are.

A push that fails (the store down, a deadline passed) is logged and never fails the run or
the move: the row keeps the last snapshot that did reach the store, and the next step or
move pushes the session's snapshot of then (a retry that sends whatever the failed ones did
not). Until then a host's loss would cost the steps since ``replicated_at``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from django.utils import timezone

from workspace import replication, snapshots

from .models import Session

log = logging.getLogger(__name__)


def replicate(
    session_id: str,
    snap: snapshots.Snapshots,
    tree: str,
    *,
    still_holds: Callable[[], bool] = lambda: True,
) -> bool:
    """Push ``tree`` as the session's snapshot in the central store and record it: whether
    the store now holds it. ``still_holds``: whether the caller still owns the session (a
    run's lease); a caller that does not pushes nothing. Never raises."""
    if not replication.enabled():
        return False
    try:
        return _replicate(session_id, snap, tree, still_holds)
    except Exception:  # a snapshot's replication never costs the run or the move
        log.exception("session %s: replicating snapshot %s failed", session_id, tree)
        return False


def _replicate(
    session_id: str, snap: snapshots.Snapshots, tree: str, still_holds: Callable[[], bool]
) -> bool:
    row = (
        Session.objects.filter(id=session_id)
        .values_list("replicated_commit", "replicated_snapshot")
        .first()
    )
    if row is None or not still_holds():
        return False
    expected, done = row
    if done == tree:
        return True
    try:
        try:
            new = replication.push(snap, session_id, tree, expected)
        except replication.ReplicationRejected:
            # The store's ref is not what the row says: our own push that was not recorded,
            # or a stale worker's. The session's owner wins: it pushes on what is there.
            if not still_holds():
                return False
            new = replication.push(snap, session_id, tree, replication.remote_tip(snap, session_id))
    except replication.ReplicationError as exc:
        log.warning("session %s: snapshot %s not replicated: %s", session_id, tree, exc)
        return False
    recorded = Session.objects.filter(id=session_id, replicated_commit=expected).update(
        replicated_commit=new, replicated_snapshot=tree, replicated_at=timezone.now()
    )
    return bool(recorded)


def after_move(session_id: str, snap: snapshots.Snapshots) -> None:
    """(On a history move's commit.) Replicate the files as the move left them."""
    if not replication.enabled():
        return
    try:
        tree = snap.peek(journal=True)
    except snapshots.SnapshotError:
        log.exception("session %s: no snapshot to replicate after a move", session_id)
        return
    replicate(session_id, snap, tree)
