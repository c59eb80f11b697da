"""Revert (docs/semantics.md §3): a boundary in the conversation plus the files as they were there.
``revert`` marks and restores but deletes nothing; ``unrevert`` (``unrevert.py``) puts the
pre-revert tree back exactly; ``cleanup`` (``cleanup.py``) confirms, deleting what lies after
the boundary. Where the boundary falls and which tree the files go to is the plan's
(``revert_plan.py``).

The revert holds the session row (``select_for_update``) while it works on the files, so no
run can start in between; a run that holds the busy lock makes it answer 409. The files are
written inside its transaction, so they follow it (``FilesFollow``): when it does not commit,
the worktree goes back to the tree it had before the writes, and the database and the files
never disagree about whether the session is reverted.

Rewind modes (docs/semantics.md §14.5), ``mode`` of ``revert_session`` and ``plan_revert``:

* ``both`` (the default): the conversation's boundary moves and the files go back
  (docs/semantics.md §3).
* ``conversation``: the boundary moves as with ``both`` (a pending revert, confirmable and
  unrevertable) but the files are left exactly as they are. The record says ``mode``; an
  unrevert of it touches no file unless an earlier pending revert had moved them.
* ``files``: the files only (``rewind.py``): the conversation stays, no pending revert.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.db import transaction

from core.errors import InvalidInput
from realtime import events
from workspace import snapshots

from ..models import HistoryEvent, Session
from ..selectors import active_path, session_data
from . import lock
from .changes import changes_summary, path_start
from .files_follow import FilesFollow
from .revert_plan import MODES, RevertPlan, make_plan, not_kept
from .rewind import rewind_files


def revert_session(
    *,
    session: Session,
    message_id: str,
    part_id: str | None = None,
    mode: str = "both",
    user=None,  # noqa: ANN001
) -> Session:
    """Revert ``session`` to the boundary at ``message_id`` (``part_id``: inside that
    message) in ``mode``; a ``files`` rewind is ``rewind.rewind_files``."""
    if mode not in MODES:
        raise InvalidInput("mode must be 'both', 'conversation' or 'files'.")
    if mode == "files":
        return rewind_files(session=session, message_id=message_id, part_id=part_id, user=user)
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        plan = make_plan(locked, message_id, part_id)
        snap = snapshots.for_session(locked)
        target, files = plan.target, plan.files
        if mode == "conversation":
            # The files stay as they are: what an earlier pending revert restored, if any.
            target, files = plan.current, (locked.revert or {}).get("files", [])
        moving = mode == "both"
        with follow.writing(snap, plan.current) if moving else nullcontext():
            if moving:
                snap.checkout(target, snap.patch(plan.current, target))
            diff = _record_revert(locked, snap, plan, mode, target, files, user)
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if moving:
                events.publish_on_commit(
                    locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
                )
    return locked


def _record_revert(
    locked: Session,
    snap: snapshots.Snapshots,
    plan: RevertPlan,
    mode: str,
    target: str,
    files: list[str],
    user,  # noqa: ANN001
) -> list[dict]:
    """Store the pending revert on the locked session (and, when the files moved, its new
    summary) and its history event: the per-file diff from the pre-revert tree to ``target``."""
    moving = mode == "both"
    boundary, pre = plan.boundary, plan.pre
    same = not moving and pre == target  # nothing to tell: no git call
    diff = [] if same else snap.diff_stat(pre, target)
    locked.revert = {
        "message_id": boundary.message.id,
        "part_id": boundary.part.id if boundary.part else None,
        "mode": mode,
        "snapshot": pre,
        "diff": "" if same else snap.diff_text(pre, target),
        "files": files,
        "changes": diff,
        # What it left alone: files no snapshot holds (docs/semantics.md §13.3).
        "not_kept": not_kept(snap),
    }
    fields = ["revert", "updated_at"]
    if moving:
        locked.summary = changes_summary(snap, path_start(active_path(locked)), target)
        fields.append("summary")
    locked.save(update_fields=fields)
    HistoryEvent.objects.create(
        session=locked,
        kind="revert",
        created_by=user,
        data={
            "message_id": boundary.message.id,
            "part_id": locked.revert["part_id"],
            "mode": mode,
            "snapshot": pre,
            "files": files,
        },
    )
    return diff
