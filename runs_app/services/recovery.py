"""Recovery of the last unfinished turn (SEMANTICS 1.5), before a resumed run's first step."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django.utils import timezone

from sessions_app import events
from sessions_app.models import Message, Part
from sessions_app.selectors import message_data

from ..tools import TOOLS

if TYPE_CHECKING:
    from ..engine import AgentLoop

UNFINISHED = {"pending", "running"}


def recover_path(loop: AgentLoop, *, mode: str) -> None:
    last = next((m for m in reversed(loop.history) if m.role == Message.Role.ASSISTANT), None)
    if last is None:
        return
    blocked = False
    for part in last.loaded_parts:
        if part.type != Part.Type.TOOL:
            continue
        status = (part.state or {}).get("status")
        tool = TOOLS.get(part.tool)
        if status == "completed":
            continue
        if status == "error":
            if tool is not None and tool.blocks_on_error:
                blocked = True
            continue
        if status not in UNFINISHED:
            continue
        if blocked:
            loop.interrupt(part, reason="blocked", now=time.time())
        elif tool is not None and not tool.side_effects:
            loop.run_tool(part)  # recall: no side effects, so running it again is safe
        else:
            loop.interrupt(part, reason=mode, now=time.time())  # never run twice
            blocked = True
    if last.completed_at is None:
        last.completed_at = timezone.now()
        if not last.error:
            last.error = {
                "reason": "UnfinishedAssistantMessage",
                "message": "Assistant message was not completed before recovery.",
                "metadata": {"recovered": True, "mode": mode},
            }
        loop.writer.touch(last, "completed_at", "error")
        loop.emit(events.MESSAGE_UPDATED, message=message_data(last))
    loop.writer.flush()
