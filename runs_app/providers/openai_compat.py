"""Any OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp server),
streamed through the official SDK, with tool calls assembled from their chunks."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
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


class OpenAIProvider(SdkProvider):
    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None):
        super().__init__(
            model,
            openai.AsyncOpenAI(
                base_url=base_url or settings.OPENAI_BASE_URL,
                api_key=api_key or settings.OPENAI_API_KEY,
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
        kwargs: dict[str, Any] = {
            "model": self.model,
            "messages": messages,
            "stream": True,
            # The last chunk then carries the call's usage (OpenAI, vLLM, llama.cpp, Ollama).
            "stream_options": {"include_usage": True},
        }
        if tools:
            kwargs["tools"] = tools
        calls: dict[int, dict[str, str]] = {}
        usage: dict[str, int] = {}
        reason: str | None = None
        try:
            stream = await self.client.chat.completions.create(**kwargs)
            async with stream:
                async for chunk in stream:
                    if should_abort():
                        return
                    if getattr(chunk, "usage", None):
                        usage = usage_of(chunk.usage)
                    for choice in chunk.choices or []:
                        delta = choice.delta
                        if delta is None:
                            continue
                        reasoning = getattr(delta, "reasoning_content", None)
                        if reasoning:
                            yield ReasoningDelta(reasoning)
                        if delta.content:
                            yield TextDelta(delta.content)
                        for tc in delta.tool_calls or []:
                            slot = calls.setdefault(tc.index, {"id": "", "name": "", "args": ""})
                            if tc.id:
                                slot["id"] = tc.id
                            if tc.function is not None:
                                name = tc.function.name
                                # Some servers repeat the whole name in every chunk.
                                if name and name != slot["name"]:
                                    slot["name"] += name
                                if tc.function.arguments:
                                    slot["args"] += tc.function.arguments
                        if choice.finish_reason:
                            reason = choice.finish_reason
        except openai.APIError as exc:
            raise sdk_failure(exc, openai) from exc
        for call in finished_calls(reason, calls):
            yield call
        yield Finish(usage=usage, reason=reason or "stop")


def usage_of(reported: Any) -> dict[str, int]:
    """The call's usage as the last chunk reports it (prompt caching where the server says)."""
    usage = {
        "input_tokens": reported.prompt_tokens or 0,
        "output_tokens": reported.completion_tokens or 0,
    }
    details = getattr(reported, "prompt_tokens_details", None)
    cached = getattr(details, "cached_tokens", None) if details else None
    if cached:
        usage["cached_input_tokens"] = cached
    return usage
