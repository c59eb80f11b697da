"""The files-only rewind (docs/semantics.md §14.5, rewind mode ``files``): the files go to the tree
a revert to that point would give and the conversation stays — no pending revert, a
``files-revert`` history event with ``files_before`` / ``files_after``. Refused (409) while a
revert is pending. ``unrevert`` undoes it (``undo_files_rewind``) as long as it is the
session's latest history move and the files are still what it left."""

from __future__ import annotations

from django.db import transaction

from core.errors import ConflictError
from realtime import events
from workspace import snapshots

from ..models import HistoryEvent, Session
from ..selectors import active_path, session_data
from . import lock
from .changes import changes_summary, path_start
from .files_follow import FilesFollow
from .revert_plan import FILES_REVERT, make_plan, refuse_while_revert_pending


def rewind_files(
    *,
    session: Session,
    message_id: str,
    part_id: str | None = None,
    user=None,  # noqa: ANN001
) -> Session:
    """Rewind mode ``files``: the files go to the tree a revert to that point gives, the
    conversation stays. A history event records the trees before and after, so ``unrevert``
    can put them back (``undo_files_rewind``)."""
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        refuse_while_revert_pending(locked)
        plan = make_plan(locked, message_id, part_id)
        current, target = plan.current, plan.target
        snap = snapshots.for_session(locked)
        with follow.writing(snap, current):
            snap.checkout(target, snap.patch(current, target))
            diff = snap.diff_stat(current, target)
            locked.summary = changes_summary(snap, path_start(active_path(locked)), target)
            locked.save(update_fields=["summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind=FILES_REVERT,
                created_by=user,
                data={
                    "message_id": plan.boundary.message.id,
                    "part_id": plan.boundary.part.id if plan.boundary.part else None,
                    "files_before": current,
                    "files_after": target,
                    "files": plan.files,
                },
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            events.publish_on_commit(
                locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
            )
    return locked


def undo_files_rewind(locked: Session, follow: FilesFollow, user) -> Session:  # noqa: ANN001
    """Under the session row lock: when the session's latest history event is a ``files``
    rewind and the files are still what it left, they go back to what they were before it
    (409 when they changed since); otherwise nothing to undo."""
    last = HistoryEvent.objects.filter(session=locked).order_by("-id").first()
    if last is None or last.kind != FILES_REVERT:
        return locked
    snap = snapshots.for_session(locked)
    current = snap.track(journal=True)
    before, after = last.data["files_before"], last.data["files_after"]
    if current != after:
        raise ConflictError(
            "The files changed since they were rewound: rewind them again to the point you want."
        )
    diff = snap.diff_stat(current, before)
    with follow.writing(snap, current):
        snap.restore(before, journal=True)
        locked.summary = changes_summary(snap, path_start(active_path(locked)), before)
        locked.save(update_fields=["summary", "updated_at"])
        HistoryEvent.objects.create(
            session=locked,
            kind="unrevert",
            created_by=user,
            data={"snapshot": before, "mode": "files", "files_revert_id": last.id},
        )
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
        if diff:
            events.publish_on_commit(
                locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
            )
    return locked
