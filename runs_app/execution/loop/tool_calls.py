"""Running a tool call: its part goes pending → running → completed or error, its output
streams as ``tool-output-delta`` and is stored as it comes; an interrupted tool keeps what it
printed and is never run again (docs/semantics.md §1.5)."""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable

from django.conf import settings

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import part_data
from workspace import sandbox

from ...providers.base import ToolCall
from ...tools import TOOLS, ToolContext, ToolError, ToolInterrupted
from . import recorder
from .context import RunContext
from .errors import Aborted, LockLost

log = logging.getLogger(__name__)


def pending_tool(ctx: RunContext, message: Message, call: ToolCall) -> Part:
    part = recorder.new_part(
        ctx,
        message,
        Part.Type.TOOL,
        call_id=call.call_id,
        tool=call.name,
        state={
            "status": "pending",
            "input": call.arguments,
            "output": None,
            "error": None,
            "metadata": {},
            "time": {"start": None, "end": None},
        },
    )
    recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))
    return part


async def run_tool(ctx: RunContext, part: Part) -> None:
    state = dict(part.state or {})
    state["status"] = "running"
    state["time"] = {"start": time.time(), "end": None}
    part.state = state
    ctx.writer.touch(part, "state")
    # Live progress, like the output deltas that follow it: shown before it is stored
    # (the call itself is on record, pending, before any tool of the batch runs).
    if not ctx.control.lost.is_set():
        events.publish(ctx.session.id, events.PART_UPDATED, part=part_data(part))
    tool = ctx.tools.get(part.tool)
    if "approval" in state and ctx.mode != Session.Checkpoint.RUNS:
        # A call run after a decision: "running" is on record before it runs, so a crash
        # now never runs it twice (pending + allowed means "not started yet").
        await ctx.db(ctx.writer.flush)
    if tool is None and part.tool != "shell":
        tool = TOOLS.get(part.tool)
    try:
        if tool is None:
            reason = sandbox.unavailable_reason() if part.tool == "shell" else ""
            raise ToolError(reason or f"Unknown or disabled tool: {part.tool}.")
        tool_ctx = ToolContext(
            worktree=ctx.session.worktree,
            tree_limit=ctx.limits.worktree_bytes or 0,
            should_abort=ctx.aborted,
            output=tool_output(ctx, part),
            # The loop holds the session's lock: a shell command over the worktree's
            # limits is undone from a snapshot taken just before it (docs/semantics.md §11.7).
            snapshots=ctx.snap,
            holds_lease=ctx.holds_lease,
        )
        args = state.get("input") or {}
        if tool.afn is not None:
            state["output"] = await tool.arun(tool_ctx, args)
        else:
            state["output"] = await ctx.host.in_tool_thread(tool.run, tool_ctx, args)
        state["status"] = "completed"
    except ToolInterrupted as exc:
        # Stopped part-way (its process tree is gone): the part keeps what it printed and
        # ends interrupted, so a resume never runs it again (docs/semantics.md §1.5).
        if ctx.control.lost.is_set():
            raise LockLost() from exc  # not a line more: another worker may own it
        state["output"] = exc.output
        part.state = state
        recorder.interrupt(ctx, part, reason="cancelled")
        raise Aborted() from exc
    except ToolError as exc:
        if ctx.control.lost.is_set():
            raise LockLost() from exc  # stopped because it lost the run: not a line more
        if ctx.aborted():
            # Left unfinished on purpose: resume recalls or interrupts it (docs/semantics.md §1.5).
            raise Aborted() from exc
        state.update(status="error", error=str(exc))
    except Exception as exc:  # a tool bug must not kill the run; the model sees the error
        log.exception("tool %s failed", part.tool)
        state.update(status="error", error=f"{exc.__class__.__name__}: {exc}")
    state["time"] = {**state["time"], "end": time.time()}
    part.state = state
    ctx.writer.touch(part, "state")
    recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))


def tool_output(ctx: RunContext, part: Part) -> Callable[[str], Awaitable[None]]:
    """What a running tool prints: into its part's ``state.output``, out to the browsers
    as ``tool-output-delta`` (framed like text deltas), and written at its first output
    and then every ``STREAM_FLUSH_SECONDS``, so that a reload mid-command shows the call
    running (said live when it started, stored from then on) and the output so far."""
    last_write: float | None = None

    async def output(text: str) -> None:
        nonlocal last_write
        state = part.state
        so_far = state.get("output") or ""
        state["output"] = so_far + text
        events.publish_tool_output(
            ctx.session.id,
            message_id=part.message_id,
            part_id=part.id,
            offset=len(so_far),
            text=text,
        )
        now = time.monotonic()
        due = last_write is None or now - last_write >= settings.STREAM_FLUSH_SECONDS
        if due and ctx.mode != Session.Checkpoint.RUNS and not ctx.control.stopped():
            last_write = now
            ctx.writer.touch(part, "state")
            await ctx.db(ctx.writer.flush, durable=False)

    return output
