"""What a model provider yields while it streams one step."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


class ProviderError(Exception):
    """The model call failed; the run ends ``error`` with this message."""


@dataclass
class TextDelta:
    text: str


@dataclass
class ReasoningDelta:
    text: str


@dataclass
class ToolCall:
    call_id: str
    name: str
    arguments: dict[str, Any]
    raw_arguments: str = ""


@dataclass
class StructuredOutput:
    value: Any


@dataclass
class Finish:
    usage: dict[str, int] = field(default_factory=dict)
    reason: str = "stop"


StreamEvent = TextDelta | ReasoningDelta | ToolCall | StructuredOutput | Finish


class Provider(Protocol):
    name: str

    def astream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        should_abort: Callable[[], bool],
    ) -> AsyncIterator[StreamEvent]: ...


class SyncStream:
    """``stream()``: the provider's ``astream`` driven to the end from blocking code (tests,
    scripts), on an event loop of its own."""

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        should_abort: Callable[[], bool],
    ) -> Iterator[StreamEvent]:
        events = self.astream(messages, tools, should_abort=should_abort)  # type: ignore[attr-defined]
        loop = asyncio.new_event_loop()
        try:
            while True:
                try:
                    yield loop.run_until_complete(events.__anext__())
                except StopAsyncIteration:
                    return
        finally:
            loop.run_until_complete(events.aclose())
            loop.close()


def error_message(exc: Exception) -> str:
    """The message an API error carries in its body (OpenAI's and Anthropic's shape)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict):
        err = body.get("error", body)
        if isinstance(err, dict) and err.get("message"):
            return str(err["message"])
    return str(exc)
