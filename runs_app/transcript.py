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


def model_messages(history: list[Message], system_prompt: str = "") -> list[dict[str, Any]]:
    out: list[dict[str, Any]] = []
    if system_prompt:
        out.append({"role": "system", "content": system_prompt})
    for message in history:
        parts: list[Part] = getattr(message, "loaded_parts", [])
        text = "".join(p.text for p in parts if p.type == Part.Type.TEXT)
        if message.role == Message.Role.USER:
            out.append({"role": "user", "content": text})
            continue
        calls = [
            p
            for p in parts
            if p.type == Part.Type.TOOL and (p.state or {}).get("status") in FINISHED
        ]
        if not text and not calls:
            continue
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
        out.append(entry)
        for p in calls:
            out.append(
                {"role": "tool", "tool_call_id": p.call_id, "content": tool_result_text(p.state)}
            )
    return out
