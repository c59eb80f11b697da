"""The steps of a run: before each, recovery and a compaction when due; a step snapshots
the files, streams the model into an assistant message, records and gates the tool batch, runs
it, and closes with the snapshot after (``step_end.close_step``: the step-finish and patch
parts)."""

from __future__ import annotations

import logging

from django.conf import settings

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data

from ...providers import ProviderError
from . import gate, model, recorder, recovery, step_end, tool_calls, usage
from .context import RunContext
from .errors import AwaitingApproval, ContextOverflow, LockLost

log = logging.getLogger(__name__)


async def run_steps(ctx: RunContext) -> None:
    """Step after step until the model calls no tool (or ``max_steps``)."""
    max_steps = ctx.run.max_steps or settings.AGENT_MAX_STEPS
    for index in range(max_steps):
        ctx.check()
        if ctx.limits.limits_spending():
            await ctx.db(usage.check_budget, ctx)  # a step that crossed it has finished
        # docs/semantics.md §1.5: before every step (a no-op after a step that finished normally).
        await recovery.recover(ctx, mode="resume")
        if ctx.continuing is None:  # a stopped answer goes on at the head, not after a summary
            await model.compact(ctx)  # docs/semantics.md §10: when the next call passes the budget
        try:
            called_tools = await step(ctx, index)
        except ContextOverflow as exc:
            # The model's own count passed its window: compact, then try once more.
            ctx.overflow_retried = True
            if not await model.compact(ctx, force=True):
                raise ProviderError(
                    f"{exc.__cause__} There is nothing older to compact.",
                    kind="context_overflow",
                ) from exc
            called_tools = await step(ctx, index)
        if not called_tools:
            return
    ctx.run.result = "max_steps"


async def step(ctx: RunContext, index: int) -> bool:
    before = ctx.tree or await ctx.db(ctx.snap.track)
    # A stopped answer goes on in its own message (docs/semantics.md §1.12), a step more.
    message = ctx.continuing or recorder.new_message(ctx, Message.Role.ASSISTANT)
    ctx.continuing = None
    recorder.new_part(ctx, message, Part.Type.STEP_START, data={"snapshot": before, "step": index})
    recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))
    tool_parts: list[Part] = []
    try:
        for call in await model.stream(ctx, message):
            tool_parts.append(tool_calls.pending_tool(ctx, message, call))
        waiting = await gate.gate(ctx, tool_parts) if tool_parts else False
        if (ctx.mode != Session.Checkpoint.RUNS and tool_parts) or waiting:
            # The batch is on record before any of it runs: after a crash, recovery sees
            # these calls and never runs a side-effect tool twice (docs/semantics.md §1.7).
            await ctx.db(ctx.writer.flush)
        if waiting:
            raise AwaitingApproval()
        for part in tool_parts:
            ctx.check()
            if (part.state or {}).get("status") != "pending":
                continue  # denied by a rule: ended without running
            await tool_calls.run_tool(ctx, part)
            if ctx.mode == Session.Checkpoint.TOOL:
                await ctx.db(ctx.writer.flush)
    except (LockLost, AwaitingApproval):
        raise  # not a line more / the step goes on once the owner has decided
    except BaseException as exc:
        overflow = isinstance(exc, ProviderError) and exc.kind == "context_overflow"
        if overflow and not ctx.overflow_retried and drop_step(ctx, message):
            raise ContextOverflow() from exc
        # A step that ends in an error or an abort still records what it did to the files.
        await ctx.db(
            step_end.close_step,
            ctx,
            message,
            index,
            before,
            ran_tools=bool(tool_parts),
            finished=False,
        )
        raise
    await ctx.db(
        step_end.close_step, ctx, message, index, before, ran_tools=bool(tool_parts), finished=True
    )
    return bool(tool_parts)


def drop_step(ctx: RunContext, message: Message) -> bool:
    """Give up a step that got nothing from the model (not a token, not written yet):
    its message leaves the path. False when it cannot (something streamed)."""
    produced = any(p.type != Part.Type.STEP_START for p in message.loaded_parts)
    if produced or not ctx.writer.is_new(message) or ctx.history[-1:] != [message]:
        return False
    ctx.history.pop()
    ctx.head_id = message.parent_id
    ctx.writer.discard(message, message.parent_id)
    recorder.emit(ctx, events.MESSAGE_REMOVED, message_id=message.id)
    return True
