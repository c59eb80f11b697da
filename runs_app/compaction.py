"""Context compaction (docs/semantics.md §10; a run's ``result: "compact"``).

Before a model call whose transcript would pass the model's budget (its context window ×
``AGENT_COMPACT_AT``; tokens estimated as characters / 4), the loop summarises the older part
of the path with a model call of its own (``COMPACT_SYSTEM``, a prompt the project owns) and
writes the summary as a message on the path: an assistant message with one ``compaction`` part
whose ``data.replaced`` is how many of the path's first messages it stands for. From then on
the model sees the summary in their place (``transcript.model_messages``); the messages stay
stored, so revert, fork and ``?original=1`` still see them.

The cut is always at a message boundary before the latest user message, so that message (the
request being worked on) stays verbatim and a tool call is never split from its result (an
assistant message carries both). A path whose latest turn alone passes the budget cannot be
compacted further; it is sent as it is.
"""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings

from core import models_catalog
from sessions_app.models import Message

from .transcript import compacted_from, model_messages

# The scripted model recognises this first line and answers with a deterministic summary.
MARKER = "[compact the conversation]"
COMPACT_SYSTEM = (
    "You compact long conversations between a user and a coding agent. Write a summary that "
    "lets the agent continue the work without the original messages: what the user asked "
    "for, the decisions taken, the files created or changed and their state, the commands run "
    "and their outcome, and what is left to do. Be specific (names, paths, numbers); leave "
    "out pleasantries. Answer with the summary only."
)
RENDER_ENTRY_MAX = 4000  # characters of one transcript entry in the text to summarise


def estimate_tokens(messages: list[dict[str, Any]]) -> int:
    """A provider-independent estimate: characters / 4 of the messages as JSON."""
    return sum(len(json.dumps(m, ensure_ascii=False)) for m in messages) // 4


def context_window(model: str) -> int:
    """The model's window: its ``AGENT_MODELS`` entry, or the default of its kind."""
    return models_catalog.info(model or "scripted").context_window


def budget(model: str) -> int:
    return int(context_window(model) * settings.AGENT_COMPACT_AT)


def cut_point(history: list[Message]) -> int | None:
    """How many of the path's first messages a new summary would replace: everything before
    the latest user message. None when that replaces nothing new."""
    start = (compacted_from(history) or (0, ""))[0]
    last_user = next(
        (i for i in range(len(history) - 1, -1, -1) if history[i].role == Message.Role.USER),
        None,
    )
    if last_user is None or last_user <= start or last_user < 1:
        return None
    return last_user


def _render(entry: dict[str, Any]) -> str:
    role = entry["role"]
    text = entry.get("content") or ""
    if entry.get("tool_calls"):
        calls = "; ".join(
            f"{c['function']['name']}({c['function']['arguments']})" for c in entry["tool_calls"]
        )
        text = f"{text}\n[calls] {calls}".strip()
    if len(text) > RENDER_ENTRY_MAX:
        text = text[: RENDER_ENTRY_MAX // 2] + "\n[…]\n" + text[-RENDER_ENTRY_MAX // 2 :]
    return f"{role}: {text}"


def summary_request(
    history: list[Message], cut: int, system_prompt: str, limit_tokens: int
) -> list[dict[str, Any]]:
    """The summarising call's messages: the older part of the transcript (with the previous
    summary, if any) as text, the newest kept whole and the oldest cut first when it would
    not fit ``limit_tokens``."""
    older = model_messages(history[:cut], "")
    lines = [_render(e) for e in older]
    room = max(1000, limit_tokens * 4 - len(COMPACT_SYSTEM) - 200)
    kept: list[str] = []
    used = 0
    for line in reversed(lines):
        if used + len(line) > room:
            break
        kept.append(line)
        used += len(line) + 1
    text = "\n".join(reversed(kept))
    if system_prompt:
        text = f"(The agent's instructions: {system_prompt[:2000]})\n{text}"
    return [
        {"role": "system", "content": COMPACT_SYSTEM},
        {"role": "user", "content": f"{MARKER}\n{text}"},
    ]
