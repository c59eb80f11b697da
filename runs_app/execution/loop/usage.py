"""What a run's model calls use: each call's tokens and cost (its message's ``tokens``,
one ledger row written with it), the run's sum, and the owner's budget checked between steps."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from core import metrics, models_catalog
from quotas_app import clock
from quotas_app import services as quotas
from sessions_app.models import Message, Part

from ... import compaction
from ...providers.base import ToolCall
from .context import RunContext
from .errors import BudgetReached


def count(ctx: RunContext, usage: dict[str, Any]) -> dict[str, Any]:
    """One model call's usage with its cost (the model's price in ``AGENT_MODELS``),
    added to the run's: what the call's message records."""
    model = ctx.run.model or ctx.session.model or settings.AGENT_MODEL
    spent = {k: int(v or 0) for k, v in usage.items()}
    spent["cost_usd"] = models_catalog.cost(model, spent)
    ctx.usage = models_catalog.add_usage(ctx.usage, {**spent, "calls": 1})
    metrics.count_tokens(model, spent)
    return spent


def record_usage(ctx: RunContext, message: Message) -> None:
    """The call's usage row (the message's ``tokens``), written with the message by the
    next flush; the owner's day and month counters follow in that transaction."""
    ctx.writer.add_usage(
        quotas.usage_record(
            user_id=ctx.session.owner_id,
            session_id=ctx.session.id,
            run_id=ctx.run.id,
            message_id=message.id,
            model=ctx.run.model or ctx.session.model or settings.AGENT_MODEL,
            usage=message.tokens,
        )
    )


def check_budget(ctx: RunContext) -> None:
    """Between steps: stop (``BudgetReached``) once the owner's tokens per day or cost per
    month is reached, counting this run's calls not written yet."""
    now = clock.now()
    pending = quotas.pending_spent(ctx.writer.pending_usage, now)
    overrun = quotas.overrun(ctx.session.owner_id, ctx.limits, pending=pending)
    if overrun is not None:
        raise BudgetReached(overrun)


def reported(
    usage: dict[str, Any],
    prompt: list[dict[str, Any]],
    parts: dict[str, Part],
    calls: list[ToolCall],
) -> dict[str, Any]:
    """The call's usage as the provider reported it; what it left out (some servers
    send none while streaming) estimated as characters / 4, and marked ``estimated``."""
    usage = dict(usage)
    estimated = False
    if not usage.get("input_tokens"):
        usage["input_tokens"] = compaction.estimate_tokens(prompt)
        estimated = True
    if "output_tokens" not in usage:
        produced = sum(len(p.text) for p in parts.values())
        produced += sum(len(c.raw_arguments or json.dumps(c.arguments)) for c in calls)
        usage["output_tokens"] = produced // 4
        estimated = True
    if estimated:
        usage["estimated"] = 1
    return usage


def usage_added(ctx: RunContext) -> dict[str, Any]:
    """What this execution used (the run's usage minus what it had when it began)."""
    added = {}
    for key, value in ctx.usage.items():
        before = ctx.usage_start.get(key, 0)
        if value != before:
            added[key] = round(value - before, 8) if key == "cost_usd" else value - before
    return added
