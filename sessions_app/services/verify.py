"""The verifier (issue 43): the walk of a worktree that the journal spares each step.

A step snapshots only the paths its writers said they changed (``workspace.change_journal``).
What a writer changed without saying so would stay out of every snapshot; so an idle
session's worktree is walked whole, at most once per ``change_journal.VERIFY_SECONDS`` and
only when something was written since its last walk, by the sweep every worker and the
embedded server run (``runs_app.execution.sweeper``). A difference the walk finds is recorded
as a step of its own: a message on the head's path, like an apply's, with the snapshots before and
after, so a revert to before it puts the files back as they were and the chat shows it.
"""

from __future__ import annotations

import logging
import os
import time
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import NotFoundError, SessionBusyError
from realtime import events
from workspace import change_journal, snapshots

from ..models import HistoryEvent, Message, Part, Session
from ..selectors import active_path, message_data, session_data
from . import lock
from .changes import changes_summary, path_start

log = logging.getLogger(__name__)

IDLE_SECONDS = 60  # nothing written for this long: the session is idle
SESSIONS_PER_SWEEP = 20
SWEEP_SECONDS = 60.0  # a process looks for due worktrees at most this often
_last_sweep = -SWEEP_SECONDS
FILES_NAMED = 5


def due(now: float | None = None) -> list[str]:
    """The sessions whose worktree is due a walk: written to since the last walk, which is
    ``VERIFY_SECONDS`` old, and idle for ``IDLE_SECONDS``."""
    now = time.time() if now is None else now
    root = Path(settings.WORKSPACE_ROOT)
    found: list[str] = []
    try:
        names = sorted(os.listdir(root / change_journal.JOURNALS))
    except OSError:
        return []
    for name in names:
        try:
            written = os.stat(root / change_journal.JOURNALS / name / "paths").st_mtime
        except OSError:
            continue
        git_dir = root / ".snapshots" / f"{name}.git"
        if not git_dir.is_dir():  # the session is gone: its journal goes, no row is asked
            change_journal.remove(root / name)
            continue
        walked = change_journal.last_walk(git_dir)
        due_walk = now - walked >= change_journal.VERIFY_SECONDS
        if written > walked and due_walk and now - written >= IDLE_SECONDS:
            found.append(name)
        if len(found) >= SESSIONS_PER_SWEEP:
            break
    return found


def verify_due() -> dict[str, list[str]]:
    """Walk the worktrees that are due (``due``): the files found changed, by session. At
    most once per ``SWEEP_SECONDS`` in a process (the sweep that calls it runs every half
    lease)."""
    global _last_sweep
    if time.monotonic() - _last_sweep < SWEEP_SECONDS:
        return {}
    _last_sweep = time.monotonic()
    found = {}
    for session_id in due():
        try:
            changed = verify_session(session_id)
        except snapshots.SnapshotError:
            log.exception("the verifier's walk of %s failed", session_id)
            continue
        if changed:
            found[session_id] = changed
    return found


def verify_session(session_id: str) -> list[str] | None:
    """Walk ``session_id``'s worktree and record what the snapshots missed: the files
    (None: the session is busy, preparing, reverted or gone; the walk waits for later)."""
    with transaction.atomic():
        try:
            locked = lock.lock_idle_session(session_id)
        except SessionBusyError:
            return None
        except NotFoundError:  # deleted: its journal goes too (it is never due again)
            change_journal.remove(Path(settings.WORKSPACE_ROOT) / session_id)
            return None
        if locked.revert or locked.status == Session.Status.PREPARING:
            return None
        snap = snapshots.for_session(locked)
        before = snap.track(journal=True)  # what the snapshots say the worktree is
        after = snap.track()  # the walk
        if after == before:
            return []
        changed = snap.patch(before, after)
        _record(locked, snap, before, after, changed)
    log.warning(
        "the verifier found %d file(s) changed outside a step in %s", len(changed), session_id
    )
    return changed


def _record(
    locked: Session, snap: snapshots.Snapshots, before: str, after: str, changed: list[str]
) -> None:
    named = ", ".join(changed[:FILES_NAMED]) + (" …" if len(changed) > FILES_NAMED else "")
    message = Message.objects.create(
        session=locked,
        parent_id=locked.head_id,
        role=Message.Role.USER,
        completed_at=timezone.now(),
    )
    rows = [
        (Part.Type.TEXT, f"Files changed outside any step: {named}.", {"source": "verified"}),
        (Part.Type.STEP_START, "", {"snapshot": before, "step": 0}),
        (Part.Type.STEP_FINISH, "", {"snapshot": after, "step": 0, "verified": True}),
        (Part.Type.PATCH, "", {"snapshot": before, "files": changed}),
    ]
    parts = Part.objects.bulk_create(
        Part(message=message, session=locked, order=i, type=t, text=body, data=data)
        for i, (t, body, data) in enumerate(rows)
    )
    locked.head = message
    locked.summary = changes_summary(snap, path_start(active_path(locked)), after)
    locked.save(update_fields=["head", "summary", "updated_at"])
    HistoryEvent.objects.create(
        session=locked, kind="verify", data={"files": changed, "message_id": message.id}
    )
    events.publish_on_commit(
        locked.id, events.MESSAGE_UPDATED, message=message_data(message, parts)
    )
    events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    events.publish_on_commit(
        locked.id, events.SESSION_DIFF, diff=snap.diff_stat(before, after), summary=locked.summary
    )
