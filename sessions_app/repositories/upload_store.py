"""An upload received by a web process that holds no worktree (issue 45, step 3:
``WORKSPACE_ROOT=""``, ``core.mode.holds_worktrees()`` False), recorded through the central
store; anywhere else, ``fill.fill_from_upload`` as before.

The archive is checked and unpacked as always (``unpack``), but in a scratch directory
outside ``WORKSPACE_ROOT`` (``tempfile``), snapshotted in a scratch git dir beside it, and
pushed to the central store (``SNAPSHOT_REMOTE``) as the session's ref
(``replication.push``); then, holding the session row, the first message is recorded exactly
as a local upload records it (``fill.record_first_message``: its text, its step and the patch
part naming every file) with the session's replicated snapshot (``Session.replicated_*``).
The home host then has what re-homing needs: ``rehome.on_claim`` materialises a missing
worktree from that snapshot. The web asks it to at once (``host_calls``' ``materialize``,
bounded by ``HOST_CALL_TIMEOUT``); a host that does not answer in time materialises it at
the session's next run or move instead, so the upload itself still succeeds.

Why through the store and not the archive sent to the host: the store is already the way a
session's files reach a host that lacks them (re-homing, forks across hosts), an archive may
be as large as ``REPO_MAX_BYTES`` (no Redis message, no broker for that), and the unpack's
checks stay in the request that can refuse the upload with its sentence. The web then writes
only a scratch directory it deletes, never a worktree.
"""

from __future__ import annotations

import logging
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from core import mode
from core.errors import ConflictError
from realtime import events
from workspace import replication, snapshots

from .. import host_calls
from ..models import Session
from ..selectors import session_data
from ..services import lock
from . import fill

log = logging.getLogger(__name__)


def fill_upload(
    *,
    session: Session,
    name: str,
    fileobj=None,  # noqa: ANN001
    files=None,  # noqa: ANN001
    strip_top: bool = False,
) -> Session:
    """``fill.fill_from_upload``, through the central store when this process holds no
    worktree (see the module); ``strip_top`` applies on both paths."""
    if mode.embedded() or mode.holds_worktrees():
        return fill.fill_from_upload(
            session=session, name=name, fileobj=fileobj, files=files, strip_top=strip_top
        )
    if not replication.enabled():
        session.delete()
        raise host_calls.HostUnavailable(
            "An upload needs the central store (SNAPSHOT_REMOTE) on a web process that holds "
            "no worktree."
        )
    recorded = fill.fill_from_upload(
        session=session,
        name=name,
        fileobj=fileobj,
        files=files,
        record=_record,
        strip_top=strip_top,
    )
    try:
        return host_calls.call("materialize", session=recorded)
    except host_calls.HostUnavailable as exc:
        # The files are in the store: the home materialises them at its next run or move.
        log.warning("session %s: the upload is not on its host yet: %s", recorded.id, exc)
        return recorded


def _record(session_id: str, tree: Path, source: dict, text: str) -> Session:
    """Snapshot ``tree`` in a scratch git dir beside it, push it as the session's ref and
    record the first message with the replicated snapshot."""
    snap = snapshots.Snapshots(git_dir=tree.parent / "git", worktree=tree)
    after = snap.track(index=str(tree.parent / "index"))
    try:
        commit = replication.push(snap, session_id, after, "")
    except replication.ReplicationError as exc:
        log.warning("session %s: the upload did not reach the central store: %s", session_id, exc)
        raise host_calls.HostUnavailable(
            "The upload could not be stored (the central store did not take it); try again."
        ) from None
    with transaction.atomic():
        locked = lock.lock_session(session_id)
        if locked.head_id or lock.is_busy(locked):
            raise ConflictError("The session is not new any more.")
        locked.replicated_commit, locked.replicated_snapshot = commit, after
        locked.replicated_at = timezone.now()
        locked.save(update_fields=["replicated_commit", "replicated_snapshot", "replicated_at"])
        fill.record_first_message(locked, None, snap, source, text, after)
        events.publish_on_commit(session_id, events.SESSION_UPDATED, session=session_data(locked))
    return locked
