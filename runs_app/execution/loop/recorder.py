"""The one place a run's rows and events meet: a row is made (``new_message``,
``new_part``) or changed (``writer.touch``) in the loop's buffer, and its event is held with it
(``emit``) until the checkpoint that stores it (``Checkpointer.flush``) publishes it — so what a
browser sees was stored first. Text and tool-output deltas are the exception, by design:
they go out at once and are stored with the part every ``STREAM_FLUSH_SECONDS``."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data, part_data
from sessions_app.services.changes import changes_summary, path_start

from .context import RunContext
from .errors import UNFINISHED


def emit(ctx: RunContext, type: str, **payload: Any) -> None:
    """An event about this run's rows: published once they are stored (held for the
    checkpoint that writes them). ``checkpoint=runs`` stores them only at the end, so
    there they go out at once, marked ``"stored": false`` (the chat reads the run back
    when it ends)."""
    if ctx.control.lost.is_set():
        return  # another execution may own the run: it says what happens now
    if ctx.mode == Session.Checkpoint.RUNS and ctx.writer.pending:
        payload["stored"] = False
    elif ctx.writer.hold(type, payload):
        return
    events.publish(ctx.session.id, type, **payload)


def new_part(ctx: RunContext, message: Message, type: str, **fields: Any) -> Part:
    parts = message.loaded_parts
    part = Part(
        message_id=message.id, session_id=ctx.session.id, order=len(parts), type=type, **fields
    )
    parts.append(part)
    ctx.writer.add(part)
    return part


def new_message(ctx: RunContext, role: str) -> Message:
    message = Message(
        session_id=ctx.session.id,
        run_id=ctx.run.id,
        parent_id=ctx.head_id,
        role=role,
        model=ctx.run.model if role == Message.Role.ASSISTANT else "",
        created_at=timezone.now(),
    )
    message.loaded_parts = []
    ctx.writer.add(message)
    ctx.history.append(message)
    ctx.head_id = message.id
    ctx.writer.set_head(message.id)
    return message


def fence(ctx: RunContext) -> None:
    """Inside a transaction: ``LeaseLost`` unless this execution still owns the run."""
    ctx.writer.fence()


def interrupt(ctx: RunContext, part: Part, *, reason: str, now: float | None = None) -> None:
    state = dict(part.state or {})
    state.update(
        status="error",
        error="Tool execution was interrupted.",
        metadata={**(state.get("metadata") or {}), "interrupted": True, "reason": reason},
    )
    state.setdefault("time", {})["end"] = now or time.time()
    part.state = state
    ctx.writer.touch(part, "state")
    emit(ctx, events.PART_UPDATED, part=part_data(part))


def publish_diff(ctx: RunContext, before: str, after: str) -> None:
    diff = ctx.snap.diff_stat(before, after)
    emit(ctx, events.SESSION_DIFF, diff=diff, summary=store_summary(ctx, after))


def store_summary(ctx: RunContext, now: str) -> dict[str, int]:
    """The session's ``summary`` with its files at ``now``, counted over the path as this
    loop holds it (its rows may not all be written yet): what ``GET …/diff/`` lists."""
    summary = changes_summary(ctx.snap, path_start(ctx.history), now)
    with transaction.atomic():
        Session.objects.filter(id=ctx.session.id).update(summary=summary)
        fence(ctx)
    ctx.session.summary = summary
    return summary


def fail_last_message(ctx: RunContext, text: str) -> None:
    message = ctx.history[-1] if ctx.history else None
    if message is None or message.role != Message.Role.ASSISTANT or message.run_id != ctx.run.id:
        return
    # A call it put on record and never finished ends with it, as the message does: a
    # run that ended in an error shows no call still pending or running (never run
    # twice: a resume sees it interrupted, docs/semantics.md §1.5).
    now = time.time()
    for part in message.loaded_parts:
        status = (part.state or {}).get("status")
        if part.type == Part.Type.TOOL and status in UNFINISHED:
            interrupt(ctx, part, reason="error", now=now)
    message.error = {"reason": "ProviderError", "message": text, "metadata": {}}
    message.completed_at = timezone.now()
    ctx.writer.touch(message, "error", "completed_at")
    emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))


def stream_text(ctx: RunContext, part: Part) -> None:
    """Where the text streamed into ``part`` since its last write leaves the loop: stored
    with every other run's streamed text, by the host's text writer in one statement a tick
    (``text_writer.py``), unless this run has lost its lease by then."""
    ctx.texts.add(part, ctx.control)
