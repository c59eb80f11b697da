"""What a model provider yields while it streams one step."""

from __future__ import annotations

from collections.abc import Callable, Iterator
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

    def stream(
        self,
        messages: list[dict[str, Any]],
        tools: list[dict[str, Any]],
        *,
        should_abort: Callable[[], bool],
    ) -> Iterator[StreamEvent]: ...
