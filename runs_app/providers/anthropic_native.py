"""Anthropic's Messages API, natively, through the official SDK (``anthropic``): streamed
text, extended thinking (``ANTHROPIC_THINKING_TOKENS``) and tool use.

The loop keeps one transcript shape (the OpenAI chat shape of ``runs_app.transcript``); this
module turns it into Anthropic's: the system prompt apart, tool calls as ``tool_use`` blocks of
the assistant turn, their results as ``tool_result`` blocks of the next user turn, and turns of
one role merged (the API wants them alternating).
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import anthropic
from django.conf import settings

from .base import (
    Finish,
    ReasoningDelta,
    SdkProvider,
    StreamEvent,
    TextDelta,
    finished_calls,
    sdk_failure,
)


def to_anthropic(messages: list[dict[str, Any]]) -> tuple[str, list[dict[str, Any]]]:
    """(system, messages) in the Messages API's shape."""
    system: list[str] = []
    out: list[dict[str, Any]] = []

    def add(role: str, blocks: list[dict[str, Any]]) -> None:
        if not blocks:
            return
        if out and out[-1]["role"] == role:
            out[-1]["content"].extend(blocks)
        else:
            out.append({"role": role, "content": blocks})

    for m in messages:
        role, content = m["role"], m.get("content")
        if role == "system":
            system.append(str(content or ""))
        elif role == "user":
            add("user", [{"type": "text", "text": str(content or "") or "(empty)"}])
        elif role == "assistant":
            blocks: list[dict[str, Any]] = []
            if content:
                blocks.append({"type": "text", "text": str(content)})
            for call in m.get("tool_calls") or []:
                try:
                    arguments = json.loads(call["function"]["arguments"] or "{}")
                except json.JSONDecodeError:
                    arguments = {}
                blocks.append(
                    {
                        "type": "tool_use",
                        "id": call["id"],
                        "name": call["function"]["name"],
                        "input": arguments if isinstance(arguments, dict) else {},
                    }
                )
            add("assistant", blocks)
        elif role == "tool":
            text = str(content or "")
            add(
                "user",
                [
                    {
                        "type": "tool_result",
                        "tool_use_id": m["tool_call_id"],
                        "content": text,
                        "is_error": text.startswith("Error:"),
                    }
                ],
            )
    if out and out[-1]["role"] == "assistant" and out[-1]["content"][-1]["type"] == "text":
        # A last assistant turn is a prefill — a stopped answer to go on with
        # (docs/semantics.md §1.12) — and the API refuses one that ends in whitespace.
        last = out[-1]["content"][-1]
        last["text"] = last["text"].rstrip() or "…"
    return "\n\n".join(s for s in system if s), out


def to_anthropic_tools(tools: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [
        {
            "name": t["function"]["name"],
            "description": t["function"].get("description", ""),
            "input_schema": t["function"].get("parameters") or {"type": "object"},
        }
        for t in tools
    ]


class AnthropicProvider(SdkProvider):
    name = "anthropic"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None):
        super().__init__(
            model,
            anthropic.AsyncAnthropic(
                base_url=base_url or settings.ANTHROPIC_BASE_URL,
                api_key=api_key or settings.ANTHROPIC_API_KEY,
                max_retries=0,
                timeout=120,
            ),
        )

    async def astream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]:
        system, turns = to_anthropic(messages)
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": turns,
            "max_tokens": settings.ANTHROPIC_MAX_TOKENS,
            "stream": True,
        }
        if system:
            kwargs["system"] = system
        if tools:
            kwargs["tools"] = to_anthropic_tools(tools)
        if settings.ANTHROPIC_THINKING_TOKENS:
            kwargs["thinking"] = {
                "type": "enabled",
                "budget_tokens": settings.ANTHROPIC_THINKING_TOKENS,
            }
        blocks: dict[int, dict[str, str]] = {}
        usage: dict[str, int] = {}
        reason: str | None = None
        try:
            stream = await self.client.messages.create(**kwargs)
            async for event in stream:
                if should_abort():
                    await stream.close()
                    return
                kind = event.type
                if kind == "message_start":
                    u = event.message.usage
                    usage["input_tokens"] = u.input_tokens or 0
                    cached = getattr(u, "cache_read_input_tokens", None)
                    if cached:
                        usage["cached_input_tokens"] = cached
                elif kind == "content_block_start":
                    block = event.content_block
                    if block.type == "tool_use":
                        blocks[event.index] = {"id": block.id, "name": block.name, "args": ""}
                elif kind == "content_block_delta":
                    delta = event.delta
                    if delta.type == "text_delta":
                        yield TextDelta(delta.text)
                    elif delta.type == "thinking_delta":
                        yield ReasoningDelta(delta.thinking)
                    elif delta.type == "input_json_delta" and event.index in blocks:
                        blocks[event.index]["args"] += delta.partial_json
                elif kind == "message_delta":
                    reason = event.delta.stop_reason or reason
                    if event.usage is not None and event.usage.output_tokens is not None:
                        usage["output_tokens"] = event.usage.output_tokens
        except anthropic.APIError as exc:
            raise sdk_failure(exc, anthropic) from exc
        for call in finished_calls(reason, blocks):
            yield call
        yield Finish(usage=usage, reason=reason)
