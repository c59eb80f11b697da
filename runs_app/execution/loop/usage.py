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
from .errors import BudgetReached
from .state import LoopState


class UsageMeter(LoopState):
    """Counting the model calls, and stopping at the owner's budget."""

    def count(self, usage: dict[str, Any]) -> dict[str, Any]:
        """One model call's usage with its cost (the model's price in ``AGENT_MODELS``),
        added to the run's: what the call's message records."""
        model = self.run.model or self.session.model or settings.AGENT_MODEL
        spent = {k: int(v or 0) for k, v in usage.items()}
        spent["cost_usd"] = models_catalog.cost(model, spent)
        self.usage = models_catalog.add_usage(self.usage, {**spent, "calls": 1})
        metrics.count_tokens(model, spent)
        return spent

    def record_usage(self, message: Message) -> None:
        """The call's usage row (the message's ``tokens``), written with the message by the
        next flush; the owner's day and month counters follow in that transaction."""
        self.writer.add_usage(
            quotas.usage_record(
                user_id=self.session.owner_id,
                session_id=self.session.id,
                run_id=self.run.id,
                message_id=message.id,
                model=self.run.model or self.session.model or settings.AGENT_MODEL,
                usage=message.tokens,
            )
        )

    def check_budget(self) -> None:
        """Between steps: stop (``BudgetReached``) once the owner's tokens per day or cost per
        month is reached, counting this run's calls not written yet."""
        now = clock.now()
        pending = quotas.pending_spent(self.writer.pending_usage, now)
        overrun = quotas.overrun(self.session.owner_id, self.limits, pending=pending)
        if overrun is not None:
            raise BudgetReached(overrun)

    @staticmethod
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

    def usage_added(self) -> dict[str, Any]:
        """What this execution used (the run's usage minus what it had when it began)."""
        added = {}
        for key, value in self.usage.items():
            before = self.usage_start.get(key, 0)
            if value != before:
                added[key] = round(value - before, 8) if key == "cost_usd" else value - before
        return added
