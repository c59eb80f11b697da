"""The tool gate (docs/semantics.md §8): each call of a batch decided by the session's rules before
any runs — allowed, denied (a tool error), or asked; a batch with an asked call parks the run
(no worker waits) until the owner decides. The approval card's preview is made here."""

from __future__ import annotations

import difflib
import json
import time
from typing import Any

from realtime import events
from sessions_app import permissions
from sessions_app.models import Part
from sessions_app.selectors import part_data

from ... import lifecycle
from ...tools import ToolError, current_text
from . import recorder, usage
from .context import RunContext
from .errors import LockLost

PREVIEW_MAX = 20_000
PREVIEW_DIFF_BYTES = 1_000_000


async def gate(ctx: RunContext, parts: list[Part]) -> bool:
    """docs/semantics.md §8.1: decide each call of the batch by the session's rules before any
    runs. ``deny`` ends it as a tool error; ``ask`` marks it requested (with a preview
    of what it would do). True when some call waits for the owner."""
    rules = permissions.in_force(ctx.session.permissions)
    decisions = [permissions.decide(rules, p.tool, (p.state or {}).get("input")) for p in parts]
    if all(d == "allow" for d in decisions):
        return False
    asking = "ask" in decisions
    shown = await ctx.db(previews, ctx, parts, decisions)
    now = time.time()
    for part, decision in zip(parts, decisions, strict=True):
        state = dict(part.state or {})
        if decision == "deny":
            state.update(
                status="error",
                error=f"Denied by this session's permissions: {part.tool} is not allowed here.",
                metadata={**(state.get("metadata") or {}), "denied": True, "by": "rule"},
                time={"start": None, "end": now},
            )
        elif decision == "ask":
            state["approval"] = {"status": "requested", "preview": shown.get(part.id, "")}
        elif asking:
            state["approval"] = {"status": "allowed", "by": "rule"}
        part.state = state
        ctx.writer.touch(part, "state")
        recorder.emit(ctx, events.PART_UPDATED, part=part_data(part))
    return asking


def previews(ctx: RunContext, parts: list[Part], decisions: list[str]) -> dict[str, str]:
    """What an asked call would do: the command; for file tools, the diff of the write."""
    return {
        part.id: approval_preview(ctx.session.worktree, part.tool, (part.state or {}).get("input"))
        for part, decision in zip(parts, decisions, strict=True)
        if decision == "ask"
    }


async def park(ctx: RunContext) -> None:
    """The run stops before calls that wait for the owner: its rows are written, the
    session stays held (``waiting``) with no lease to renew, and the coroutine ends —
    no worker, thread or process waits with it."""
    close = getattr(ctx.provider, "aclose", None)
    if close is not None:
        await close()
    if ctx.control.lost.is_set():
        raise LockLost()
    ctx.run.usage = ctx.usage
    await ctx.db(_record_park, ctx)


def _record_park(ctx: RunContext) -> None:
    ctx.writer.flush()
    lifecycle.park(ctx.run, epoch=ctx.epoch, usage_added=usage.usage_added(ctx))
    ctx.usage_start = dict(ctx.usage)


def approval_of(part: Part) -> str | None:
    return ((part.state or {}).get("approval") or {}).get("status")


def approval_preview(worktree: Any, tool: str, args: Any) -> str:
    """The approval card's "what will happen": the command, or the unified diff a file
    tool would make (cut at ``PREVIEW_MAX`` characters)."""
    args = args if isinstance(args, dict) else {}
    if tool == "shell":
        return f"$ {args.get('command', '')}"[:PREVIEW_MAX]
    if tool not in ("write", "append", "delete"):
        return json.dumps(args)[:PREVIEW_MAX]
    path = args.get("path")
    content = args.get("content") if isinstance(args.get("content"), str) else ""
    try:
        # Read as the tools read: by descriptor, never through a link (worktree_files).
        size, old = current_text(worktree, path, limit=PREVIEW_DIFF_BYTES)
        if size > PREVIEW_DIFF_BYTES or len(content) > PREVIEW_DIFF_BYTES:
            # A diff of megabytes would take long to make and nobody reads it in a card.
            return (
                f"{tool} {path}: {size:,} bytes now, {len(content):,} bytes given"
                " (too large to show as a diff)"
            )
    except (ToolError, OSError):
        return f"{tool} {path!r}"[:PREVIEW_MAX]
    new = {"write": content, "append": old + content + "\n", "delete": ""}[tool]
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}" if old or tool != "write" else "/dev/null",
        tofile=f"b/{path}" if tool != "delete" else "/dev/null",
    )
    return "".join(diff)[:PREVIEW_MAX] or f"{tool} {path} (no change)"
