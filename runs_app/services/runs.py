"""Starting, queueing and stopping runs."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from sessions_app import events
from sessions_app.errors import ConflictError, InvalidInput, SessionBusyError
from sessions_app.models import Session
from sessions_app.services import lock

from .. import abort_bus
from ..executor import enqueue_on_commit
from ..models import Run
from ..selectors import run_data

STRATEGIES = ("reject", "enqueue", "interrupt", "rollback")
QUEUED_STRATEGIES = ("enqueue", "interrupt", "rollback")


def check_run_input(
    *, mode: Any, messages: Any, multitask_strategy: Any, output_schema: Any
) -> list[dict[str, str]]:
    """Validate a run request (SEMANTICS 1.2); returns the normalised user messages."""
    if mode not in (Run.Mode.PROMPT, Run.Mode.RESUME):
        raise InvalidInput("mode must be 'prompt' or 'resume'.")
    if multitask_strategy not in STRATEGIES:
        raise InvalidInput(f"multitask_strategy must be one of {', '.join(STRATEGIES)}.")
    if output_schema is not None and not isinstance(output_schema, dict):
        raise InvalidInput("output_schema must be a JSON Schema object.")
    if mode == Run.Mode.RESUME:
        if messages:
            raise InvalidInput("messages is not allowed in resume mode.")
        return []
    if not messages:
        raise InvalidInput("messages is required in prompt mode.")
    return check_messages(messages)


def check_messages(messages: Any, *, field: str = "messages") -> list[dict[str, str]]:
    if not isinstance(messages, list) or not messages:
        raise InvalidInput(f"{field} must be a list of {{role, content}} objects.")
    each = "each message" if field == "messages" else f"each entry of {field}"
    normalised = []
    for item in messages:
        if not isinstance(item, dict) or item.get("role", "user") != "user":
            raise InvalidInput(f"{each} must be an object with role 'user'.")
        content = item.get("content")
        if not isinstance(content, str) or not content.strip():
            raise InvalidInput(f"{each} needs a non-empty string content.")
        normalised.append({"role": "user", "content": content})
    return normalised


def start_run(
    *,
    session: Session,
    user,  # noqa: ANN001
    mode: str = Run.Mode.PROMPT,
    messages: Any = None,
    multitask_strategy: str = "reject",
    output_schema: Any = None,
    checkpoint: str = "",
    defer_enqueue: bool = False,
) -> Run:
    """Create a run and take the session's busy lock for it, or queue it behind the run that
    holds the session (``enqueue``/``interrupt``/``rollback``), or refuse (``reject``, 409)."""
    normalised = check_run_input(
        mode=mode,
        messages=messages,
        multitask_strategy=multitask_strategy,
        output_schema=output_schema,
    )
    if checkpoint and checkpoint not in Session.Checkpoint.values:
        raise InvalidInput(f"checkpoint must be one of {', '.join(Session.Checkpoint.values)}.")
    with transaction.atomic():
        # The row lock orders us against the holder's hand-over (engine.finish), so a queued
        # run is never left behind a lock that was just released.
        locked = Session.objects.select_for_update().get(id=session.id)
        run = Run(
            session=locked,
            mode=mode,
            input=normalised,
            output_schema=output_schema,
            model=locked.model or settings.AGENT_MODEL,
            checkpoint=checkpoint or locked.checkpoint,
            multitask_strategy=multitask_strategy,
            max_steps=settings.AGENT_MAX_STEPS,
            created_by=user if getattr(user, "is_authenticated", False) else None,
        )
        return admit(locked, run, defer_enqueue=defer_enqueue)


def admit(locked: Session, run: Run, *, defer_enqueue: bool = False) -> Run:
    """Inside the transaction that holds the session row: save ``run`` and take the busy
    lock for it, or queue it behind the holder (``enqueue``/``interrupt``/``rollback``), or
    refuse (``reject``, 409, and nothing is saved)."""
    strategy = run.multitask_strategy
    busy = lock.is_busy(locked) and locked.busy_run_id != run.id
    if busy and strategy == "reject":
        raise SessionBusyError()
    if busy and strategy in ("interrupt", "rollback"):
        run.interrupted_run_id = locked.busy_run_id
    run.save()
    if busy:
        if run.interrupted_run_id:
            # The holder stops at its next check and hands the session to the oldest
            # queued run; with "rollback" that run first moves the head back (engine).
            Run.objects.filter(id=run.interrupted_run_id).update(abort_requested=True)
            stopped = run.interrupted_run_id
            transaction.on_commit(lambda: abort_bus.notify(stopped))
    else:
        if not lock.claim(locked.id, run.id):
            raise SessionBusyError()
        if not defer_enqueue:
            enqueue_on_commit(run.id)
        events.publish_on_commit(locked.id, events.SESSION_STATUS, status="busy", run_id=run.id)
    events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


def finish_unstarted(run: Run, status: str = Run.Status.CANCELLED) -> Run:
    """End a run that never started, handing the lock on if it held it."""
    with transaction.atomic():
        locked = Session.objects.select_for_update().get(id=run.session_id)
        updated = Run.objects.filter(id=run.id, status=Run.Status.PENDING).update(
            status=status, finished_at=timezone.now()
        )
        run.refresh_from_db()
        if updated and locked.busy_run_id == run.id:
            next_run = (
                Run.objects.filter(
                    session_id=locked.id,
                    status=Run.Status.PENDING,
                    multitask_strategy__in=QUEUED_STRATEGIES,
                )
                .exclude(id=run.id)
                .order_by("id")
                .first()
            )
            lock.hand_over(locked.id, run.id, next_run.id if next_run else None)
            if next_run:
                enqueue_on_commit(next_run.id)
            else:
                events.publish_on_commit(
                    locked.id, events.SESSION_STATUS, status="idle", run_id=None
                )
        events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


def cancel_run(*, run: Run) -> Run:
    """Ask the loop to stop (it checks between deltas and tool calls); the run then ends
    ``cancelled`` with what it produced persisted, unfinished, for ``resume``."""
    run.refresh_from_db()
    if run.is_terminal:
        raise ConflictError(f"Run {run.id} has already finished ({run.status}).")
    Run.objects.filter(id=run.id).update(abort_requested=True)
    run.abort_requested = True
    transaction.on_commit(lambda: abort_bus.notify(run.id))
    if run.status == Run.Status.PENDING:
        # Not started: no loop to stop, end it now (a task delivered later skips it).
        return finish_unstarted(run)
    return run


def abort_session(*, session: Session) -> Run | None:
    session.refresh_from_db()
    if not session.busy_run_id:
        return None
    run = Run.objects.filter(id=session.busy_run_id).first()
    if run is None or run.is_terminal:
        return run
    return cancel_run(run=run)


def wait_for_run(run: Run, *, timeout: float = 600.0) -> Run:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_terminal:
            return run
        time.sleep(0.05)
    return run
