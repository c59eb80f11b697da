"""The model's side of a step: its stream into text and reasoning parts (deltas out at
once, the text stored every ``STREAM_FLUSH_SECONDS``), rate-limit retries before the first
token, and compaction (docs/semantics.md §10): a summary of the older path by a call of its own."""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from typing import Any

from django.conf import settings
from django.utils import timezone

from core import models_catalog
from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data, part_data

from ... import compaction
from ...providers import ProviderError
from ...providers.base import Finish, ReasoningDelta, StructuredOutput, TextDelta, ToolCall
from ...transcript import model_messages
from . import recorder, usage
from .context import RunContext

log = logging.getLogger(__name__)


async def model_events(
    ctx: RunContext, prompt: list[dict[str, Any]], specs: list[dict[str, Any]]
) -> AsyncIterator[Any]:
    """The model's stream; a call refused for its rate before any token is tried again
    after the provider's ``Retry-After`` (else 1, 2, 4… s), ``AGENT_RATE_LIMIT_RETRIES``
    times, then the run ends with an error saying so."""
    attempt, waited = 0, 0.0
    while True:
        started = False
        try:
            async for event in ctx.provider.astream(prompt, specs, should_abort=ctx.aborted):
                started = True
                yield event
            return
        except ProviderError as exc:
            if started or exc.kind != "rate_limit":
                raise
            delay = exc.retry_after if exc.retry_after is not None else 2.0**attempt
            if attempt >= settings.AGENT_RATE_LIMIT_RETRIES:
                raise ProviderError(
                    f"{exc} Tried {attempt + 1} times over {waited:.0f} s; try again later.",
                    kind="rate_limit",
                ) from exc
            if delay > settings.AGENT_RATE_LIMIT_MAX_WAIT:
                raise ProviderError(
                    f"{exc} It asks to wait {delay:.0f} s; try again later.",
                    kind="rate_limit",
                ) from exc
            attempt += 1
            waited += delay
            log.warning("run %s: rate limited, trying again in %.1f s", ctx.run.id, delay)
            await pause(ctx, delay)


async def pause(ctx: RunContext, seconds: float) -> None:
    """Wait, stopping at once for an abort or a lost lease."""
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        ctx.check()
        await asyncio.sleep(min(0.05, max(0.0, end - time.monotonic())))
    ctx.check()


async def stream(ctx: RunContext, message: Message) -> list[ToolCall]:
    specs = [t.spec() for t in ctx.tools.values()]
    # A stopped answer (docs/semantics.md §1.12): the model is sent it as the assistant's
    # message so far, and what it says goes on in the same text part.
    parts: dict[str, Part] = {
        p.type: p for p in message.loaded_parts if p.type == Part.Type.TEXT and p.text
    }
    so_far = ctx.history if parts else ctx.history[:-1]
    prompt = model_messages(so_far, ctx.session.system_prompt)
    calls: list[ToolCall] = []
    last_flush = time.monotonic()
    async for event in model_events(ctx, prompt, specs):
        if isinstance(event, TextDelta | ReasoningDelta):
            kind = Part.Type.TEXT if isinstance(event, TextDelta) else Part.Type.REASONING
            part = parts.get(kind)
            if part is None:
                part = parts[kind] = recorder.new_part(ctx, message, kind, text="")
                recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))
            offset = len(part.text)
            part.text += event.text
            ctx.writer.touch(part, "text")
            events.publish_delta(
                ctx.session.id,
                message_id=message.id,
                part_id=part.id,
                offset=offset,
                text=event.text,
                reasoning=kind == Part.Type.REASONING,
            )
            if (
                ctx.mode != Session.Checkpoint.RUNS
                and time.monotonic() - last_flush >= settings.STREAM_FLUSH_SECONDS
            ):
                if ctx.writer.is_new(part):
                    await ctx.db(ctx.writer.flush, durable=False)  # the row, first
                else:
                    # Written with every other run's streamed text, one statement per tick.
                    recorder.stream_text(ctx, part)
                last_flush = time.monotonic()
        elif isinstance(event, ToolCall):
            calls.append(event)
        elif isinstance(event, StructuredOutput):
            message.structured = event.value
            ctx.run.output = event.value
        elif isinstance(event, Finish):
            before = message.tokens or {}
            message.tokens = usage.count(ctx, usage.reported(event.usage, prompt, parts, calls))
            usage.record_usage(ctx, message)
            if before:  # a continued answer's message records both its calls
                message.tokens = models_catalog.add_usage(before, message.tokens)
        ctx.check()
    ctx.check()  # a provider that saw the abort ends its stream quietly: the step is stopped
    for part in parts.values():
        recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))
    return calls


async def compact(ctx: RunContext, *, force: bool = False) -> bool:
    """docs/semantics.md §10: when the transcript the next model call would be sent passes the
    model's budget (or ``force``), summarise the path before the latest user message
    with a model call of its own and write the summary as a message on the path. True
    when it did."""
    model = ctx.run.model or ctx.session.model or settings.AGENT_MODEL
    limit = compaction.budget(model)
    before = compaction.estimate_tokens(model_messages(ctx.history, ctx.session.system_prompt))
    if not force and before <= limit:
        return False
    cut = compaction.cut_point(ctx.history)
    if cut is None:
        return False  # the latest turn alone: nothing older to summarise
    request = compaction.summary_request(ctx.history, cut, ctx.session.system_prompt, limit)
    summary: list[str] = []
    spent: dict[str, Any] = {}
    async for event in model_events(ctx, request, []):
        if isinstance(event, TextDelta):
            summary.append(event.text)
        elif isinstance(event, Finish):
            spent = usage.count(ctx, event.usage)
        ctx.check()
    message = recorder.new_message(ctx, Message.Role.ASSISTANT)
    message.completed_at = timezone.now()
    message.tokens = spent
    usage.record_usage(ctx, message)
    part = recorder.new_part(
        ctx,
        message,
        Part.Type.COMPACTION,
        text="".join(summary).strip(),
        data={"replaced": cut, "tokens_before": before},
    )
    part.data["tokens_after"] = compaction.estimate_tokens(
        model_messages(ctx.history, ctx.session.system_prompt)
    )
    await ctx.db(ctx.writer.flush)
    recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))
    log.info(
        "run %s compacted %d messages (%d → %d tokens)",
        ctx.run.id,
        cut,
        before,
        part.data["tokens_after"],
    )
    return True
