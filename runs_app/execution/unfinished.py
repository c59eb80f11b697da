"""What a run's execution leaves unfinished when it does not end the run itself — its worker
died (``lifecycle.end_abandoned``), or the run waited for its owner and was cancelled
(``lifecycle.cancel_waiting``) — closed as an abort closes it (docs/semantics.md §1.7, §8.4): the
step left open, the tool calls that will never run or finish, the message never completed.

Only rows of parts and messages are written here; the run's status and the session's holder
are the lifecycle's, which calls these inside the transaction that holds the session row."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.utils import timezone

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import part_data
from workspace import snapshots

from ..models import Run

log = logging.getLogger(__name__)


def crashed_error(attempts: int) -> dict:
    """The error of a run ended because its executions kept stopping without ending it."""
    times = "once" if attempts == 1 else f"{attempts} times in a row"
    return {
        "type": "RunCrashed",
        "message": (
            f"The run stopped without finishing {times} (its worker crashed or was stopped), "
            "so it was not started again. What it saved is kept: continue or resume it."
        ),
    }


def close_open_step(run: Run, session: Session, prepared: list[Part]) -> None:
    """The step a dead execution left open (a ``step-start``, no ``step-finish``) ends as an
    abort's would (docs/semantics.md §1.7): its ``step-finish``, interrupted, with the files as they
    are now, and the ``patch`` of what the step changed — else what its tools did before the
    worker died would be in the worktree and in no snapshot (a revert would lose it).
    ``prepared``: those parts found before the row lock, written as they are unless the
    step's message changed since (an execution wrote to it meanwhile: found again)."""
    first = prepared[0] if prepared else None
    if first and Part.objects.filter(message_id=first.message_id, order__gte=first.order).exists():
        prepared = open_step_parts(run, session)
    for part in Part.objects.bulk_create(prepared):
        events.publish_on_commit(run.session_id, events.PART_UPDATED, part=part_data(part))


def open_step_parts(run: Run, session: Session) -> list[Part]:
    """(Reads, and git; writes nothing.) The parts that close the step an execution of
    ``run`` left open — its ``step-finish``, interrupted, with the files as they are now, and
    the ``patch`` of what the step changed — or none when its last step ended."""
    message = (
        Message.objects.filter(run_id=run.id, role=Message.Role.ASSISTANT).order_by("-id").first()
    )
    if message is None:
        return []
    parts = list(Part.objects.filter(message=message).order_by("order"))
    if any(p.type == Part.Type.STEP_FINISH for p in parts):
        return []
    start = next((p for p in parts if p.type == Part.Type.STEP_START), None)
    before = (start.data or {}).get("snapshot") if start else None
    if not before:
        return []
    snap = snapshots.for_session(session)
    try:
        after = snap.track(journal=True)
        changed = snap.patch(before, after) if after != before else []
    except snapshots.SnapshotError:
        log.exception("run %s: the files of its open step could not be recorded", run.id)
        return []
    order = parts[-1].order + 1
    step = (start.data or {}).get("step", 0)
    made = [
        Part(
            message=message,
            session_id=run.session_id,
            order=order,
            type=Part.Type.STEP_FINISH,
            data={"snapshot": after, "step": step, "interrupted": True},
        )
    ]
    if changed:
        made.append(
            Part(
                message=message,
                session_id=run.session_id,
                order=order + 1,
                type=Part.Type.PATCH,
                data={"snapshot": before, "files": changed},
            )
        )
    return made


def interrupt_calls(session_id: str, parts: Iterable[Part], reason: str) -> None:
    """Each tool call of ``parts`` (which will never run, or never finish) ends in error,
    interrupted for ``reason``, as an abort ends its calls; events to ``session_id``."""
    now = time.time()
    for part in parts:
        state = dict(part.state or {})
        state.update(
            status="error",
            error="Tool execution was interrupted.",
            metadata={**(state.get("metadata") or {}), "interrupted": True, "reason": reason},
        )
        state.setdefault("time", {})["end"] = now
        part.state = state
        part.save(update_fields=["state"])
        events.publish_on_commit(session_id, events.PART_UPDATED, part=part_data(part))


def end_crashed_calls(run: Run, error: dict) -> None:
    """A run ended in error after its executions crashed: its unfinished tool calls and its
    unfinished messages end, so that a resume does not call again what crashed every
    attempt."""
    unfinished = Part.objects.filter(
        message__run_id=run.id, type=Part.Type.TOOL, state__status__in=["pending", "running"]
    )
    interrupt_calls(run.session_id, unfinished, "crashed")
    Message.objects.filter(run_id=run.id, completed_at__isnull=True).update(
        completed_at=timezone.now(),
        error={"reason": error.get("type", "RunCrashed"), "message": error.get("message", "")},
    )
