"""Recovery (docs/semantics.md §1.5, §1.7): before every step, the last assistant message of the
path is made whole — safe tools run again, side-effect tools interrupted (never twice), a step an
execution left open closed with what its tools did to the files, an unfinished message
completed with the error sentence of docs/semantics.md §1.5. When the claim materialised the
worktree from the central store (its host was lost), the calls whose change that snapshot
lacks are first said lost (docs/semantics.md §16.5)."""

from __future__ import annotations

import time

from django.utils import timezone

from realtime import events
from sessions_app import rehome
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data, part_data

from ...tools import TOOLS
from .. import unfinished
from ..unfinished import open_step
from . import recorder, step_end, tool_calls
from .context import RunContext
from .errors import UNFINISHED, AwaitingApproval
from .gate import approval_of


async def recover(ctx: RunContext, *, mode: str) -> None:
    """docs/semantics.md §1.5, on the last assistant message of the path: completed and error tools
    are kept; unfinished tools without side effects run again; with side effects they
    are interrupted (never run twice), and so is every unfinished tool after an
    interrupt or a blocking error; an unfinished message is completed with an error. First,
    when this host's files are not the lost host's, the calls they lack
    (docs/semantics.md §16.5)."""
    if not ctx.materialized_tree:
        await _recover(ctx, mode)
        return
    lose_unreplicated(ctx)  # docs/semantics.md §16.5: before the open step is closed
    await _recover(ctx, mode)
    if ctx.mode != Session.Checkpoint.RUNS:
        await ctx.db(ctx.writer.flush)  # written before the host's note of it goes
    await ctx.db(rehome.clear_lost_mark, ctx.session)


async def _recover(ctx: RunContext, mode: str) -> None:
    last = next((m for m in reversed(ctx.history) if m.role == Message.Role.ASSISTANT), None)
    if last is None:
        ctx.recovered = True
        return
    parked = parked_step(last)
    left_open = open_step(last) if parked is None else None
    if parked is not None and any(
        approval_of(p) == "requested" and (p.state or {}).get("status") == "pending"
        for p in last.loaded_parts
    ):
        raise AwaitingApproval()  # still undecided: ask again (docs/semantics.md §8.4)
    await settle_tools(ctx, last, mode)
    if parked is not None:
        # The step that stopped for approvals ends now, as it would have then.
        index, before = parked
        try:
            await ctx.db(
                step_end.close_step, ctx, last, index, before, ran_tools=True, finished=True
            )
        finally:
            ctx.recovered = open_step(last) is None  # as below
        return
    if left_open is not None:
        # A step an execution left open (its worker died, or lost the run, between a
        # tool and the step's snapshot) ends interrupted, with what its tools did to the
        # files: else that would be in the worktree and in no snapshot (docs/semantics.md §1.7).
        index, before = left_open
        try:
            await ctx.db(
                step_end.close_step, ctx, last, index, before, ran_tools=True, finished=False
            )
        finally:
            # Closed once its parts are made (they wait for the next flush), even when
            # what follows them failed (a diff event): the end must not close it again.
            ctx.recovered = open_step(last) is None
    else:
        ctx.recovered = True
    if stopped_answer(ctx, last):
        ctx.continuing = last  # the next step goes on with it (docs/semantics.md §1.12)
    else:
        complete_unfinished(ctx, last, mode)
    if ctx.mode != Session.Checkpoint.RUNS:  # "runs" writes at terminal states only
        await ctx.db(ctx.writer.flush)


async def settle_tools(ctx: RunContext, last: Message, mode: str) -> None:
    """Each unfinished tool call of ``last``: run (again) when that is safe, else
    interrupted; after an interrupt or a blocking error, every later one interrupted."""
    blocked = False
    for part in last.loaded_parts:
        if part.type != Part.Type.TOOL:
            continue
        state = part.state or {}
        status = state.get("status")
        tool = TOOLS.get(part.tool)
        if status == "completed":
            continue
        if status == "error":
            denied = (state.get("metadata") or {}).get("denied")
            if tool is not None and tool.blocks_on_error and not denied:
                blocked = True
            continue
        if status not in UNFINISHED:
            continue
        if blocked:
            recorder.interrupt(ctx, part, reason="blocked", now=time.time())
        elif status == "pending" and approval_of(part) == "allowed":
            await tool_calls.run_tool(ctx, part)  # decided, never started: its first execution
        elif tool is not None and not tool.side_effects:
            await tool_calls.run_tool(
                ctx, part
            )  # recall: no side effects, so running it again is safe
        else:
            recorder.interrupt(ctx, part, reason=mode, now=time.time())  # never run twice
            blocked = True


def lose_unreplicated(ctx: RunContext) -> None:
    """docs/semantics.md §16.5: this claim materialised the worktree from the central store
    (``ctx.materialized_tree``): each completed call that may change files and ran after that
    snapshot (``lost_calls``) had its change on the lost host's disk only. It becomes an
    error that says so, written like every row of the run (buffered, fenced by its epoch at
    the next checkpoint), so the model reads it on its next step and the chat shows it.
    Once per execution."""
    tree, host = ctx.materialized_tree, ctx.lost_host
    ctx.materialized_tree = ""
    now = time.time()
    for part in unfinished.lost_calls(ctx.history, tree):
        part.state = unfinished.lost_state(part, host, now)
        ctx.writer.touch(part, "state")
        recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))


def complete_unfinished(ctx: RunContext, last: Message, mode: str) -> None:
    """An assistant message an execution left open is completed, with the error sentence of
    docs/semantics.md §1.5 (the chat shows it as a quiet "stopped" note)."""
    if last.completed_at is not None:
        return
    last.completed_at = timezone.now()
    if not last.error:
        last.error = {
            "reason": "UnfinishedAssistantMessage",
            "message": "Assistant message was not completed before recovery.",
            "metadata": {"recovered": True, "mode": mode},
        }
    ctx.writer.touch(last, "completed_at", "error")
    recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(last))


def stopped_answer(ctx: RunContext, last: Message) -> bool:
    """docs/semantics.md §1.12: the path ends with an answer a stop (or a crash) left
    unfinished — text and no tool call, no error — which the next step continues."""
    return (
        ctx.history[-1:] == [last]
        and last.completed_at is None
        and not last.error
        and not any(p.type == Part.Type.TOOL for p in last.loaded_parts)
        and any(p.type == Part.Type.TEXT and p.text for p in last.loaded_parts)
    )


def turn_finished(history: list[Message]) -> bool:
    """The last turn ended: its last message is a completed assistant message that called
    no tools (the model stopped)."""
    if not history:
        return True
    last = history[-1]
    return (
        last.role == Message.Role.ASSISTANT
        and last.completed_at is not None
        and not last.error  # cut short (a dropped stream, a failed call): resume goes on
        and not any(p.type == Part.Type.TOOL for p in last.loaded_parts)
    )


def parked_step(message: Message) -> tuple[int, str] | None:
    """(step index, snapshot before it) of an assistant message whose step stopped for
    approvals and has not ended yet (no ``step-finish``); else None."""
    if not any(
        p.type == Part.Type.TOOL and "approval" in (p.state or {}) for p in message.loaded_parts
    ):
        return None
    return open_step(message)
