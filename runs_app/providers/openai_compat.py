"""Any OpenAI-compatible chat-completions endpoint (OpenAI, Ollama, vLLM, llama.cpp server),
streamed through the official SDK, with tool calls assembled from their chunks."""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Callable
from typing import Any

import openai
from django.conf import settings

from .base import (
    Finish,
    ProviderError,
    ReasoningDelta,
    StreamEvent,
    SyncStream,
    TextDelta,
    ToolCall,
    status_error,
)


class OpenAIProvider(SyncStream):
    name = "openai"

    def __init__(self, model: str, *, base_url: str | None = None, api_key: str | None = None):
        self.model = model
        self.client = openai.AsyncOpenAI(
            base_url=base_url or settings.OPENAI_BASE_URL,
            api_key=api_key or settings.OPENAI_API_KEY,
            max_retries=0,
            timeout=120,
        )

    async def aclose(self) -> None:
        await self.client.close()

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
                        usage = {
                            "input_tokens": chunk.usage.prompt_tokens or 0,
                            "output_tokens": chunk.usage.completion_tokens or 0,
                        }
                        details = getattr(chunk.usage, "prompt_tokens_details", None)
                        cached = getattr(details, "cached_tokens", None) if details else None
                        if cached:
                            usage["cached_input_tokens"] = cached
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
        except openai.APIStatusError as exc:
            raise status_error(exc) from exc
        except openai.APIConnectionError as exc:
            cause = exc.__cause__ or exc.__context__
            detail = f" ({cause.__class__.__name__}: {cause})" if cause else ""
            raise ProviderError(
                f"The connection to the model endpoint was lost{detail}.", kind="connection"
            ) from exc
        except openai.APIError as exc:
            raise ProviderError(f"The model call failed: {exc.__class__.__name__}: {exc}") from exc
        if reason is None:
            raise ProviderError(
                "The model stream ended before the answer was finished.", kind="connection"
            )
        for index in sorted(calls):
            slot = calls[index]
            try:
                args = json.loads(slot["args"]) if slot["args"].strip() else {}
            except json.JSONDecodeError:
                args = {"_invalid_json": slot["args"]}
            yield ToolCall(
                call_id=slot["id"] or f"call_{index}",
                name=slot["name"],
                arguments=args,
                raw_arguments=slot["args"],
            )
        yield Finish(usage=usage, reason=reason or "stop")
