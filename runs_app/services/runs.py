"""Run requests: starting (or queueing) a run, cancelling one, waiting for one. The run's
states and transitions are ``lifecycle``'s."""

from __future__ import annotations

import time
from typing import Any

from django.conf import settings
from django.db import transaction

from core.errors import ConflictError, InvalidInput, NotFoundError
from sessions_app import host_calls
from sessions_app.models import Session
from sessions_app.services import lock

from ..execution import runtime
from ..lifecycle import admit, cancel_waiting, end_abandoned, finish_unstarted
from ..models import Run


def check_run_input(
    *,
    mode: str,
    messages: list[dict[str, str]] | None,
    multitask_strategy: str,
    output_schema: dict[str, Any] | None,
) -> list[dict[str, str]]:
    """The run's input: the user messages of a ``prompt`` run, none for ``resume``. A run
    request's shape (docs/semantics.md §1.2: mode, messages, multitask_strategy, output_schema) is
    validated once, at the API's door (``runs_app.api.serializers.RunIn``, in the contract's
    words); callers in code (the admin, benchmarks) pass those values typed."""
    if mode in (Run.Mode.RESUME, Run.Mode.COMPACT):
        return []
    return check_messages(messages or [])


def check_messages(
    messages: list[dict[str, str]], *, field: str = "messages"
) -> list[dict[str, str]]:
    """User turns as a run stores them: ``{"role": "user", "content"}`` each (validated at
    the door: ``runs_app.api.serializers.UserMessageIn``)."""
    return [{"role": "user", "content": m["content"]} for m in messages]


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
        # The row lock orders us against the holder's hand-over (lifecycle.finish), so a
        # queued run is never left behind a lock that was just released.
        locked = lock.lock_session(session.id)
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


def compact_session(*, session: Session, user) -> Run:  # noqa: ANN001
    """ "Compact now": a run that summarises the path's older turns (docs/semantics.md §10) and ends
    with ``result: "compact"``; a busy session answers 409, like any run request."""
    return start_run(session=session, user=user, mode=Run.Mode.COMPACT)


def cancel_run(*, run: Run) -> Run:
    """Ask the loop to stop (it checks between deltas and tool calls); the run then ends
    ``cancelled`` with what it produced persisted, unfinished, for ``resume``."""
    run.refresh_from_db()
    if run.is_terminal:
        raise ConflictError(f"Run {run.id} has already finished ({run.status}).")
    if run.status == Run.Status.REQUIRES_ACTION:
        # Waiting for its owner: no loop to stop; it ends here (docs/semantics.md §8.4).
        return cancel_waiting(run)
    Run.objects.filter(id=run.id).update(abort_requested=True)
    run.abort_requested = True
    transaction.on_commit(lambda: runtime.abort_bus().notify(run.id))
    if run.status == Run.Status.PENDING:
        # Not started: no loop to stop, end it now (a task delivered later skips it).
        return finish_unstarted(run)
    if run.status == Run.Status.RUNNING and not _held(run):
        # Its worker is gone (the lease expired): no loop would see the flag. It ends where
        # its files are, which its open step's closing parts record (``end_abandoned``): here,
        # or on the session's home host from a web process that holds no worktree.
        host_calls.call("cancel", session=run.session, run_id=run.id)
        run.refresh_from_db()
    return run


def _held(run: Run) -> bool:
    """Whether an execution holds ``run`` (its session's busy lock, its lease live): the
    loop then stops at its next check, and nothing here touches the files."""
    session = Session.objects.filter(id=run.session_id).first()
    return session is not None and session.busy_run_id == run.id and lock.is_busy(session)


def cancel_abandoned(*, session: Session, user=None, run_id: str) -> Session:  # noqa: ANN001
    """(Where the session's files are: a host call, ``runs_app/apps.py``.) End the running
    ``run_id`` of ``session`` that no execution holds, cancelled, its open step closed on the
    files as they are (``end_abandoned``: nothing when its lease is live again)."""
    run = Run.objects.filter(id=run_id, session_id=session.id).first()
    if run is None:
        raise NotFoundError("No such run in this session.")
    if run.status == Run.Status.RUNNING:
        end_abandoned(run, Run.Status.CANCELLED)
    return session


# On the allow-list of calls on a home host (sessions_app imports no runs_app module, so this
# module adds its own; runs_app/apps.py imports it in every process).
host_calls.register("cancel", cancel_abandoned, frozenset({"run_id"}))


def abort_session(*, session: Session) -> Run | None:
    session.refresh_from_db()
    if not session.busy_run_id:
        return None
    run = Run.objects.filter(id=session.busy_run_id).first()
    if run is None or run.is_terminal:
        return run
    return cancel_run(run=run)


def wait_for_run(run: Run, *, timeout: float = 600.0) -> Run:
    """Block (polling the database) until ``run`` ends or waits for its owner: for scripts,
    management commands and tests. The API's ``wait: true`` never does this: it waits on the
    run's events holding no thread and no connection (``runs_app.waits``)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        run.refresh_from_db()
        if run.is_terminal or run.status == Run.Status.REQUIRES_ACTION:
            return run  # ended, or stopped until its owner decides
        time.sleep(0.05)
    return run
