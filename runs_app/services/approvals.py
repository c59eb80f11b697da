"""The owner's decisions on tool calls that wait (docs/semantics.md §8.3–§8.5): ``allow`` runs the
call, ``deny`` ends it as a tool error carrying the owner's reason (which the model reads),
``always`` allows it and adds a session rule for exactly its argument. Calls of one batch are
decided one by one; the run goes on (pending again, a task enqueued) once none is left
undecided. Every decision is a HistoryEvent."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from core.errors import ConflictError, InvalidInput
from realtime import events
from sessions_app import permissions
from sessions_app.models import HistoryEvent, Part, Session
from sessions_app.selectors import part_data, session_data
from sessions_app.services import lock

from .. import lifecycle
from ..models import Run
from ..selectors import run_data, waiting_calls

DECISIONS = ("allow", "deny", "always")
REASON_MAX = 2000


def decide(*, run: Run, user: Any, part_id: str, decision: str, reason: str = "") -> Run:
    """Record the owner's ``decision`` on one waiting call of ``run`` (the caller has checked
    that ``user`` owns it: outsiders get 404 before this)."""
    if decision not in DECISIONS:
        raise InvalidInput("decision must be 'allow', 'deny' or 'always'.")
    if not isinstance(reason, str) or len(reason) > REASON_MAX:
        raise InvalidInput(f"reason must be a string of at most {REASON_MAX} characters.")
    with transaction.atomic():
        locked: Session = lock.lock_session(run.session_id)
        run = Run.objects.select_for_update().get(id=run.id)
        if run.status != Run.Status.REQUIRES_ACTION:
            raise ConflictError(f"Run {run.id} is not waiting for a decision ({run.status}).")
        part = _waiting_call(run, part_id)
        state = _decided(dict(part.state), decision, user=user, reason=reason)
        if decision == "always":
            _allow_always(locked, part, state)
        part.state = state
        part.save(update_fields=["state"])
        HistoryEvent.objects.create(
            session_id=locked.id,
            kind="approval",
            run_id=run.id,
            created_by=user,
            data={"part_id": part.id, "tool": part.tool, "decision": decision, "reason": reason},
        )
        events.publish_on_commit(locked.id, events.PART_UPDATED, part=part_data(part))
        if not waiting_calls(run):
            lifecycle.resume_decided(locked, run)
        else:
            events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


def _waiting_call(run: Run, part_id: str) -> Part:
    """Under the session row lock: the tool call ``part_id`` of ``run``'s session, locked,
    if it waits for a decision; ConflictError otherwise."""
    part = (
        Part.objects.select_for_update()
        .filter(id=part_id, session_id=run.session_id, type=Part.Type.TOOL)
        .first()
    )
    state = (part.state if part else None) or {}
    approval = state.get("approval") or {}
    if part is None or state.get("status") != "pending" or approval.get("status") != "requested":
        raise ConflictError(f"Part {part_id} is not a tool call waiting for a decision.")
    return part


def _decided(state: dict, decision: str, *, user: Any, reason: str) -> dict:
    """The call's ``state`` with the decision recorded in its ``approval``; a denied call
    ends as a tool error that carries the owner's reason (the model reads it)."""
    approval = dict(state.get("approval") or {})
    approval.update(
        status="denied" if decision == "deny" else "allowed",
        decision=decision,
        decided_by=user.pk,
        decided_at=timezone.now().isoformat(),
    )
    if reason:
        approval["reason"] = reason
    state["approval"] = approval
    if decision == "deny":
        text = reason.strip() or "no reason given"
        state.update(
            status="error",
            error=f"The user denied this call: {text}",
            metadata={**(state.get("metadata") or {}), "denied": True, "by": "user"},
        )
        state.setdefault("time", {})["end"] = time.time()
    return state


def _allow_always(locked: Session, part: Part, state: dict) -> None:
    """``always``: the session's rules allow exactly this call's argument from now on."""
    try:
        rules = permissions.with_exact_allow(
            locked.permissions, part.tool or "", state.get("input")
        )
    except ValueError:
        rules = None  # an argument too long to be a pattern: this call only
    if rules is not None:
        locked.permissions = rules
        locked.save(update_fields=["permissions", "updated_at"])
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
