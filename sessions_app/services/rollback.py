"""Rollback N user turns (docs/semantics.md §4): the head moves to just before the N-th last user
turn. Nothing is deleted: the rolled-back messages stay a branch that ``head`` can switch back to,
and a rollback marker goes into the history log. Files are not touched (revert does that)."""

from __future__ import annotations

from typing import Any

from django.db import transaction

from core.errors import ConflictError, InvalidInput
from realtime import events
from workspace import snapshots

from ..models import HistoryEvent, Message, Session
from ..selectors import active_path, session_data
from . import lock
from .changes import changes_summary, path_start


def estimate_context_tokens(path: list[Message]) -> int:
    """A rough size of what the model would be sent: four characters a token."""
    chars = 0
    for message in path:
        for part in message.loaded_parts:
            chars += len(part.text or "")
            if part.type == "tool":
                chars += len(str((part.state or {}).get("input") or ""))
                chars += len(str((part.state or {}).get("output") or ""))
    return chars // 4


def rollback_session(*, session: Session, num_turns: Any, user=None) -> Session:  # noqa: ANN001
    if isinstance(num_turns, bool) or not isinstance(num_turns, int) or num_turns < 1:
        raise InvalidInput("num_turns must be an integer of at least 1.")
    with transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if locked.revert:
            raise ConflictError("A revert is pending: unrevert or confirm it before a rollback.")
        path = active_path(locked)
        starts = [i for i, m in enumerate(path) if m.role == Message.Role.USER]
        keep = 0 if num_turns >= len(starts) else starts[-num_turns]
        previous = locked.head_id
        locked.head_id = path[keep - 1].id if keep > 0 else None
        locked.context_tokens = estimate_context_tokens(path[:keep])
        snap = snapshots.for_session(locked)
        locked.summary = changes_summary(snap, path_start(path[:keep]), snap.peek(journal=True))
        locked.save(update_fields=["head", "context_tokens", "summary", "updated_at"])
        HistoryEvent.objects.create(
            session=locked,
            kind="rollback",
            created_by=user,
            data={
                "num_turns": num_turns,
                "from_head": previous,
                "to_head": locked.head_id,
                "turns_rolled_back": min(num_turns, len(starts)),
            },
        )
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    return locked
