"""What a model provider yields while it streams one step."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator, Callable, Iterator
from dataclasses import dataclass, field
from typing import Any, Protocol


class ProviderError(Exception):
    """The model call failed; the run ends ``error`` with this message. ``kind`` says what
    the loop can do about it: ``rate_limit`` (wait ``retry_after`` seconds and try again),
    ``auth`` (nothing: the deployment's key), ``context_overflow`` (compact, try once more),
    ``connection`` (dropped: what streamed is kept, resume continues) or ``other``."""

    def __init__(
        self, message: str, *, kind: str = "other", retry_after: float | None = None
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.retry_after = retry_after


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


OVERFLOW_HINTS = (
    "context_length_exceeded",
    "maximum context length",
    "context window",
    "prompt is too long",
    "too many tokens",
)


def classify(status: int | None, message: str, headers: Any = None) -> tuple[str, float | None]:
    """(kind, retry_after seconds) of an HTTP error of a model endpoint."""
    lowered = message.lower()
    retry_after = None
    if headers is not None:
        raw = headers.get("retry-after")
        try:
            retry_after = max(0.0, float(raw)) if raw is not None else None
        except (TypeError, ValueError):
            retry_after = None
    if status in (429, 529) or "rate limit" in lowered or "overloaded" in lowered:
        return "rate_limit", retry_after
    if status in (401, 403):
        return "auth", None
    if status in (400, 413) and any(h in lowered for h in OVERFLOW_HINTS):
        return "context_overflow", None
    return "other", None


def status_error(exc: Exception) -> ProviderError:
    """A provider SDK's HTTP error as a ProviderError whose sentence a user understands."""
    status = getattr(exc, "status_code", None)
    detail = error_message(exc)
    response = getattr(exc, "response", None)
    kind, retry_after = classify(status, detail, getattr(response, "headers", None))
    if kind == "auth":
        text = (
            f"The model provider refused this deployment's credentials (HTTP {status}: "
            f"{detail}). An operator must check the API key."
        )
    elif kind == "context_overflow":
        text = (
            f"The conversation is longer than the model's context window (HTTP {status}: {detail})."
        )
    elif kind == "rate_limit":
        text = f"The model provider is rate limiting requests (HTTP {status}: {detail})."
    else:
        text = f"The model endpoint answered HTTP {status}: {detail}"
    return ProviderError(text, kind=kind, retry_after=retry_after)


class SdkProvider(SyncStream):
    """A provider that streams through an official SDK's async client."""

    def __init__(self, model: str, client: Any) -> None:
        self.model = model
        self.client = client

    async def aclose(self) -> None:
        await self.client.close()


def sdk_failure(exc: Exception, sdk: Any) -> ProviderError:
    """An SDK's error (``openai`` and ``anthropic`` name theirs alike) as a ProviderError."""
    if isinstance(exc, sdk.APIStatusError):
        return status_error(exc)
    if isinstance(exc, sdk.APIConnectionError):
        cause = exc.__cause__ or exc.__context__
        detail = f" ({cause.__class__.__name__}: {cause})" if cause else ""
        return ProviderError(
            f"The connection to the model endpoint was lost{detail}.", kind="connection"
        )
    return ProviderError(f"The model call failed: {exc.__class__.__name__}: {exc}")


def finished_calls(reason: str | None, slots: dict[int, dict[str, str]]) -> list[ToolCall]:
    """The tool calls assembled from a stream's chunks (``{index: {id, name, args}}``),
    once the stream said why it stopped; a stream that never did was cut."""
    if reason is None:
        raise ProviderError(
            "The model stream ended before the answer was finished.", kind="connection"
        )
    calls = []
    for index in sorted(slots):
        slot = slots[index]
        try:
            args = json.loads(slot["args"]) if slot["args"].strip() else {}
        except json.JSONDecodeError:
            args = {"_invalid_json": slot["args"]}
        calls.append(
            ToolCall(
                call_id=slot["id"] or f"call_{index}",
                name=slot["name"],
                arguments=args,
                raw_arguments=slot["args"],
            )
        )
    return calls
