"""The model-API view of a conversation: what a provider is sent, and what
``GET /api/runs/{id}/messages/`` answers (``continue_from`` K counts these entries)."""

from __future__ import annotations

import json
from typing import Any

from sessions_app.models import Message, Part

FINISHED = {"completed", "error"}


def tool_result_text(state: dict[str, Any]) -> str:
    if state.get("status") == "completed":
        return str(state.get("output") or "")
    return f"Error: {state.get('error') or 'the tool failed.'}"


def finished_calls(message: Message) -> list[Part]:
    return [
        p
        for p in getattr(message, "loaded_parts", [])
        if p.type == Part.Type.TOOL and (p.state or {}).get("status") in FINISHED
    ]


def entries(message: Message) -> list[dict[str, Any]]:
    """The transcript entries one message contributes: a user message one; an assistant
    message its text and finished tool calls, then one ``tool`` entry per call; nothing
    when it has neither (an empty or still unfinished step)."""
    parts: list[Part] = getattr(message, "loaded_parts", [])
    text = "".join(p.text for p in parts if p.type == Part.Type.TEXT)
    if message.role == Message.Role.USER:
        return [{"role": "user", "content": text}]
    calls = finished_calls(message)
    if not text and not calls:
        return []
    entry: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        entry["tool_calls"] = [
            {
                "id": p.call_id,
                "type": "function",
                "function": {
                    "name": p.tool,
                    "arguments": json.dumps((p.state or {}).get("input") or {}),
                },
            }
            for p in calls
        ]
    out = [entry]
    for p in calls:
        out.append(
            {"role": "tool", "tool_call_id": p.call_id, "content": tool_result_text(p.state)}
        )
    return out


SUMMARY_PREFIX = "Summary of the conversation so far (older messages were compacted):\n"


def compacted_from(history: list[Message]) -> tuple[int, str] | None:
    """The newest compaction on ``history`` (docs/semantics.md §10): ``(n, summary)``, the first
    ``n`` messages of the path being replaced by ``summary``; None when there is none."""
    for index in range(len(history) - 1, -1, -1):
        for part in getattr(history[index], "loaded_parts", []):
            if part.type == Part.Type.COMPACTION:
                replaced = int((part.data or {}).get("replaced") or 0)
                if 0 < replaced <= index:
                    return replaced, part.text
    return None


def model_messages(
    history: list[Message], system_prompt: str = "", *, original: bool = False
) -> list[dict[str, Any]]:
    """What the model is sent: the system prompt, then each message's entries — from the
    newest compaction on, its summary in place of the messages it replaced (``original``:
    every message, as stored)."""
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    compacted = None if original else compacted_from(history)
    if compacted is not None:
        replaced, summary = compacted
        out.append({"role": "user", "content": SUMMARY_PREFIX + summary})
        history = history[replaced:]
    for message in history:
        out.extend(entries(message))
    return out


def entry_ends(history: list[Message], system_prompt: str = "") -> list[int]:
    """For each message of ``history``, the length of the transcript up to and including it.
    These (and the system prompt's end) are the tool-safe places to cut: a message's
    entries are an assistant turn with its tool results, never split."""
    count = 1 if system_prompt else 0
    ends = []
    for message in history:
        count += len(entries(message))
        ends.append(count)
    return ends
