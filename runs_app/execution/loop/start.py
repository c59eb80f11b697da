"""Before the first step: a new prompt confirms a pending revert and interrupts the path's
unfinished tools, then writes the user message (one transaction with the revert's
confirmation); continue and regenerate move the head and
the files to where the branch hangs from (one transaction, marked applied so a resumed run
skips it); multitask "rollback" takes the interrupted run off the path."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from realtime import events
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path, message_data, session_data
from sessions_app.services.cleanup import cleanup_session

from ...models import Run
from . import recorder
from .context import RunContext
from .errors import UNFINISHED
from .recovery import turn_finished


async def start_up(ctx: RunContext) -> bool:
    """Everything before the first step: False when there is nothing to run. One trip to
    a database thread (a thread hop each was a wait for the interpreter each, while a
    burst of runs starts beside the streaming ones)."""
    return await ctx.db(_start_rows, ctx)


def _start_rows(ctx: RunContext) -> bool:
    """(A database thread.) The path (or the branch), the prompt, the files' snapshot."""
    run = ctx.run
    prompting = run.mode == Run.Mode.PROMPT and run.input_message_id is None
    written: list[Message] = []
    if run.branch and not run.branch.get("applied"):
        start_branch(ctx)
    elif prompting and ctx.session.revert:
        written = confirm_and_prompt(ctx)
    else:
        ctx.history = active_path(ctx.session)
        if prompting:
            written = start_prompt(ctx)
    if not prompting and turn_finished(ctx.history):
        return False
    # Stored (and committed) by now: the new input said after its rows.
    for message in written:
        recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))
    ctx.tree = ctx.snap.track(journal=True)
    return True


def confirm_and_prompt(ctx: RunContext) -> list[Message]:
    """docs/semantics.md §1.3 and §3.6: a new prompt confirms a pending revert first — in the
    prompt's own transaction, so no reader ever sees the path between the two (the reverted turns
    gone, the prompt not there yet: an empty chat and "later branches" for a moment), and the
    cleanup's events go out with the prompt's, after the commit."""
    with transaction.atomic():
        ctx.session = cleanup_session(
            session=ctx.session, holder_run_id=ctx.run.id, fence=ctx.writer.fence
        )
        ctx.head_id = ctx.session.head_id
        ctx.history = active_path(ctx.session)
        return start_prompt(ctx)


def start_prompt(ctx: RunContext) -> list[Message]:
    """docs/semantics.md §1.3: interrupt unfinished tools on the path, then write the user message
    (the messages written, for the caller to say once committed)."""
    if ctx.run.multitask_strategy == "rollback" and ctx.run.interrupted_run_id:
        with transaction.atomic():  # with the checkpoint below: fenced together
            roll_back_interrupted(ctx)
            written = _start_prompt(ctx)
            recorder.fence(ctx)
        return written
    return _start_prompt(ctx)


def _start_prompt(ctx: RunContext) -> list[Message]:
    now = time.time()
    for message in ctx.history:
        for part in message.loaded_parts:
            state = part.state or {}
            if part.type == Part.Type.TOOL and state.get("status") in UNFINISHED:
                recorder.interrupt(ctx, part, reason="prompt", now=now)
    written = []
    for item in ctx.run.input or []:
        message = recorder.new_message(ctx, Message.Role.USER)
        message.completed_at = message.created_at
        recorder.new_part(ctx, message, Part.Type.TEXT, text=str(item.get("content", "")))
        written.append(message)
    if written:
        # Written with the input, in its transaction: a run resumed after a crash in
        # between would else write its input a second time.
        ctx.run.input_message_id = written[0].id
        ctx.writer.touch(ctx.run, "input_message_id")
    ctx.writer.flush()
    return written


def start_branch(ctx: RunContext) -> None:
    """Continue/regenerate (docs/semantics.md §5): the head moves to the message the branch hangs
    from, the files go back to what they were there when the branch leaves the current
    head (recorded first, so nothing is lost), the new input is written, the replaced
    messages are hidden: one transaction, marked applied so a resumed run skips it."""
    branch = dict(ctx.run.branch)
    parent = branch.get("parent_message_id")
    files, before = branch.get("files"), None
    if files and parent != ctx.session.head_id:
        before = ctx.snap.track(journal=True)
        if before != files:
            ctx.snap.checkout(files, ctx.snap.patch(before, files))
    ctx.head_id = parent
    ctx.history = active_path(ctx.session, leaf_id=parent) if parent else []
    try:
        written = apply_branch(ctx, branch, parent, files, before)
    except BaseException:
        if before and before != files:
            # The branch is not on record: the files go back to what the head had (this
            # run holds the session, so nobody else moved them meanwhile).
            ctx.snap.checkout(before, ctx.snap.patch(files, before))
        raise
    ctx.session.head_id = ctx.head_id
    # The path is another one now, and the files maybe too: the summary follows both.
    summary = recorder.store_summary(ctx, files if before else ctx.snap.track(journal=True))
    for message in written:
        recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))
    recorder.emit(ctx, events.SESSION_UPDATED, session=session_data(ctx.session))
    if before and before != files:
        diff = ctx.snap.diff_stat(before, files)
        recorder.emit(ctx, events.SESSION_DIFF, diff=diff, summary=summary)


def apply_branch(
    ctx: RunContext,
    branch: dict[str, Any],
    parent: str | None,
    files: str | None,
    before: str | None,
) -> list[Message]:
    """The branch's rows, in one transaction: its input, the head, the hidden messages,
    the history event."""
    written: list[Message] = []
    with transaction.atomic():
        for item in branch.get("input") or []:
            message = recorder.new_message(ctx, Message.Role.USER)
            message.completed_at = message.created_at
            recorder.new_part(ctx, message, Part.Type.TEXT, text=str(item.get("content", "")))
            written.append(message)
        stamp = timezone.now()
        if not written:
            Session.objects.filter(id=ctx.session.id).update(head_id=parent, updated_at=stamp)
        ctx.writer.flush()
        # The session published next carries the ``updated_at`` stored with this head:
        # the chat sets aside a session older than the one it holds (a late event), so
        # it must look neither older nor newer than it is.
        ctx.session.updated_at = (ctx.writer.head_stamped if written else None) or stamp
        branch["applied"] = True
        fields: dict[str, Any] = {"branch": branch}
        if written and ctx.run.input_message_id is None:
            fields["input_message_id"] = ctx.run.input_message_id = written[0].id
        Run.objects.filter(id=ctx.run.id).update(**fields)
        ctx.run.branch = branch
        if branch.get("hide"):
            Message.objects.filter(id__in=branch["hide"], session_id=ctx.session.id).update(
                hidden=True
            )
        if branch.get("replaces"):
            Run.objects.filter(id=branch["replaces"]).update(replaced_by=ctx.run.id)
        HistoryEvent.objects.create(
            session_id=ctx.session.id,
            kind="regenerate" if ctx.run.mode == Run.Mode.REGENERATE else "continue",
            run_id=ctx.run.id,
            data={
                "source_run_id": branch.get("source_run_id"),
                "index": branch.get("index"),
                "parent_message_id": parent,
                "files_before": before,
                "files": files if before else None,
                "hidden": branch.get("hide") or [],
            },
        )
    return written


def roll_back_interrupted(ctx: RunContext) -> None:
    """multitask_strategy "rollback": the interrupted run's messages leave the active path
    (they stay stored, as a branch); the new run starts where that run started."""
    stopped = Run.objects.filter(id=ctx.run.interrupted_run_id).first()
    if stopped is None or stopped.input_message_id is None:
        return
    start = Message.objects.filter(id=stopped.input_message_id).first()
    if start is None or start.id not in {m.id for m in ctx.history}:
        return
    ctx.head_id = start.parent_id
    ctx.history = ctx.history[: [m.id for m in ctx.history].index(start.id)]
    ctx.writer.set_head(ctx.head_id) if ctx.head_id else None
    if ctx.head_id is None:
        Session.objects.filter(id=ctx.session.id).update(head=None)
    HistoryEvent.objects.create(
        session_id=ctx.session.id,
        kind="rollback",
        run_id=ctx.run.id,
        data={"reason": "multitask_strategy", "rolled_back_run_id": stopped.id},
    )
