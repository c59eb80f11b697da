"""Cleanup (docs/semantics.md §3.6): the pending revert confirmed — what lies after its boundary is
deleted (with the branches hanging off it), and the files stay the reverted ones. It holds
the session row; a prompt run that holds the busy lock cleans up first (docs/semantics.md
§1.3)."""

from __future__ import annotations

from collections.abc import Callable

from django.db import transaction

from realtime import events
from workspace import snapshots

from ..models import HistoryEvent, Message, Part, Session
from ..selectors import active_path, session_data
from . import lock
from .changes import changes_summary, path_start


def cleanup_session(
    *,
    session: Session,
    user=None,
    holder_run_id: str | None = None,  # noqa: ANN001
    fence: Callable[[], None] | None = None,
) -> Session:
    """docs/semantics.md §3.6. ``holder_run_id``: a prompt run that holds the lock cleans up first
    (docs/semantics.md §1.3); ``fence`` (that run's execution) raises inside the transaction when
    the execution does not own its run any more (runs_app/execution/fencing.py): then nothing is
    cleaned up."""
    with transaction.atomic():
        locked = lock.lock_idle_session(session.id, holder_run_id=holder_run_id)
        if fence is not None:
            fence()
        revert = locked.revert
        if not revert:
            return locked
        doomed_ids, removed_parts = _cut(locked, revert)
        Part.objects.filter(id__in=[p.id for p in removed_parts]).delete()
        Message.objects.filter(id__in=doomed_ids).delete()
        locked.revert = None
        snap = snapshots.for_session(locked)
        # The path lost what lay after the boundary; the files stay the reverted ones.
        now = snap.peek(journal=True)
        locked.summary = changes_summary(snap, path_start(active_path(locked)), now)
        locked.save(update_fields=["revert", "summary", "head", "updated_at"])
        HistoryEvent.objects.create(
            session=locked,
            kind="cleanup",
            created_by=user,
            run_id=holder_run_id,
            data={
                "message_id": revert["message_id"],
                "part_id": revert.get("part_id"),
                "removed_messages": doomed_ids,
                "removed_parts": [p.id for p in removed_parts],
            },
        )
        for part in removed_parts:
            events.publish_on_commit(
                locked.id, events.PART_REMOVED, message_id=part.message_id, part_id=part.id
            )
        for mid in doomed_ids:
            events.publish_on_commit(locked.id, events.MESSAGE_REMOVED, message_id=mid)
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    return locked


def _cut(locked: Session, revert: dict) -> tuple[list[str], list[Part]]:
    """What the confirmed revert removes: the messages (with every branch below them) and the
    parts of a message cut at a part; the session's head moved to what stays."""
    path = active_path(locked)
    index = next((i for i, m in enumerate(path) if m.id == revert["message_id"]), None)
    removed_parts: list[Part] = []
    if index is None:  # the boundary left the path (head switched): nothing to delete
        doomed: list[Message] = []
    elif revert.get("part_id"):
        message = path[index]
        cut = next((p for p in message.loaded_parts if p.id == revert["part_id"]), None)
        removed_parts = [p for p in message.loaded_parts if cut and p.order >= cut.order]
        doomed = path[index + 1 :]
        locked.head_id = message.id
    else:
        doomed = path[index:]
        locked.head_id = path[index - 1].id if index > 0 else None
    return _with_descendants(locked, [m.id for m in doomed]), removed_parts


def _with_descendants(session: Session, ids: list[str]) -> list[str]:
    """``ids`` and every message below them (other branches hang off them and go too)."""
    if not ids:
        return []
    children: dict[str | None, list[str]] = {}
    for mid, parent in Message.objects.filter(session=session).values_list("id", "parent_id"):
        children.setdefault(parent, []).append(mid)
    result, stack, seen = [], list(ids), set()
    while stack:
        mid = stack.pop()
        if mid in seen:
            continue
        seen.add(mid)
        result.append(mid)
        stack.extend(children.get(mid, []))
    return sorted(result)
