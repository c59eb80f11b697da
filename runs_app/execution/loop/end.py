"""The run's end: output_schema checked (docs/semantics.md §1.9), the buffered rows written, the end
recorded by ``lifecycle.finish`` under this execution's epoch (a stale worker's end is
refused), and a step an earlier execution left open closed with it."""

from __future__ import annotations

import asyncio
import json

from django.utils import timezone

from realtime import events
from sessions_app.models import Message, Part
from sessions_app.selectors import part_data

from ... import lifecycle, output_schema
from ...checkpoint import storable
from ...models import Run
from .. import unfinished
from . import recorder, usage
from .context import RunContext
from .errors import LockLost


async def finish(ctx: RunContext, status: str, error: dict | None) -> None:
    run = ctx.run
    if ctx.control.lost.is_set():
        # Stopped by its keeper (an abort seen on the way out is not the owner's): the
        # execution that takes the run over decides how it ends.
        raise LockLost()
    if status == Run.Status.COMPLETED and run.output_schema:
        # Up to output_schema.MAX_SECONDS of Python: off the loop the other runs share.
        error = await asyncio.to_thread(structured_error, ctx)
        if error:
            status = Run.Status.ERROR
    run.error = error
    run.finished_at = timezone.now()
    run.usage = ctx.usage
    if status == Run.Status.COMPLETED and not run.result:
        run.result = "stop"
    await ctx.db(record_end, ctx, status)


def record_end(ctx: RunContext, status: str) -> None:
    if not ctx.recovered and status != Run.Status.COMPLETED:
        # Ended (an error, a cancel) before ``recover`` closed the step an earlier
        # execution of the run left open: it is closed with this end, as
        # ``lifecycle.end_abandoned`` would close it — unless this execution's closing of
        # it only waits for this flush (its own flush failed).
        made = unfinished.open_step_parts(ctx.run, ctx.session)
        for part in made if made and not ctx.writer.closes(made[0].message_id) else []:
            ctx.writer.add(part)
            recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))
    # The model's structured output and an error's sentence are data too (docs/semantics.md §11.5).
    ctx.run.output, ctx.run.error = storable(ctx.run.output), storable(ctx.run.error)
    # The last rows and the end in one transaction (one commit), fenced together:
    # refused, neither is kept.
    lifecycle.finish(
        ctx.run,
        status,
        epoch=ctx.epoch,
        usage_added=usage.usage_added(ctx),
        rows=lambda: ctx.writer.flush(ending=True),
    )


def structured_error(ctx: RunContext) -> dict | None:
    """docs/semantics.md §1.9: the run's output must validate against its output_schema."""
    run = ctx.run
    if not run.output_schema:
        return None
    if run.output is None:
        text = next(
            (
                "".join(p.text for p in m.loaded_parts if p.type == Part.Type.TEXT)
                for m in reversed(ctx.history)
                if m.role == Message.Role.ASSISTANT and m.run_id == run.id
            ),
            "",
        )
        try:
            run.output = json.loads(text) if text.strip() else None
        except (ValueError, RecursionError):  # not JSON, too many digits, too deep
            run.output = None
    if run.output is None:
        return {
            "type": "StructuredOutputError",
            "message": "The model returned no structured output for output_schema.",
        }
    # Bounded in time, RE2 patterns, never raises (output_schema.py): user input both.
    message = output_schema.mismatch(run.output, run.output_schema)
    return {"type": "StructuredOutputError", "message": message} if message else None
