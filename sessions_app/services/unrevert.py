"""Unrevert (docs/semantics.md §3.5, §14.5): the pending revert undone — the pre-revert tree put
back exactly, unless the revert never moved the files (a ``conversation`` rewind) — or, with none
pending, a files-only rewind undone (``rewind.undo_files_rewind``). It holds the session row
while it works on the files (a run that holds the busy lock makes it answer 409), and the
files follow its transaction (``FilesFollow``)."""

from __future__ import annotations

from django.db import transaction

from realtime import events
from workspace import snapshots

from ..models import HistoryEvent, Session
from ..selectors import active_path, session_data
from . import lock
from .changes import changes_summary, path_start
from .files_follow import FilesFollow
from .rewind import undo_files_rewind


def unrevert_session(*, session: Session, user=None) -> Session:  # noqa: ANN001
    """Undo the pending revert (its files too, unless it never moved them: a
    ``conversation`` rewind); with none pending, undo a ``files`` rewind that is the
    session's latest history move."""
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if not locked.revert:
            return undo_files_rewind(locked, follow, user)
        revert = locked.revert
        if revert.get("mode") == "conversation" and not revert.get("files"):
            locked.revert = None
            locked.save(update_fields=["revert", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind="unrevert",
                created_by=user,
                data={"snapshot": revert["snapshot"], "mode": "conversation"},
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            return locked
        snap = snapshots.for_session(locked)
        current = snap.track(journal=True)
        pre = revert["snapshot"]
        diff = snap.diff_stat(current, pre)
        with follow.writing(snap, current):
            snap.restore(pre, journal=True)
            locked.revert = None
            locked.summary = changes_summary(snap, path_start(active_path(locked)), pre)
            locked.save(update_fields=["revert", "summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked, kind="unrevert", created_by=user, data={"snapshot": pre}
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if diff:
                events.publish_on_commit(
                    locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
                )
    return locked
