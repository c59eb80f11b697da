"""The native Anthropic provider's translation of the loop's transcript (OpenAI chat shape)
into the Messages API's shape. Its streaming is tested against an external server in
tests/e2e/test_providers_external.py."""

from __future__ import annotations

from anthropic.types import (
    InputJSONDelta,
    Message,
    MessageDeltaUsage,
    RawContentBlockDeltaEvent,
    RawContentBlockStartEvent,
    RawMessageDeltaEvent,
    RawMessageStartEvent,
    TextDelta,
    ThinkingDelta,
    ToolUseBlock,
    Usage,
)
from anthropic.types.raw_message_delta_event import Delta

from runs_app.providers import get_provider
from runs_app.providers.anthropic_native import (
    AnthropicProvider,
    to_anthropic,
    to_anthropic_tools,
)
from runs_app.providers.base import Finish, ReasoningDelta, ToolCall
from runs_app.providers.base import TextDelta as Text


def test_the_transcript_becomes_alternating_turns_with_tool_blocks():
    system, turns = to_anthropic(
        [
            {"role": "system", "content": "be brief"},
            {"role": "user", "content": "Summary of the conversation so far: x"},
            {"role": "user", "content": "write two files"},
            {
                "role": "assistant",
                "content": "on it",
                "tool_calls": [
                    {"id": "c1", "function": {"name": "write", "arguments": '{"path": "a"}'}},
                    {"id": "c2", "function": {"name": "read", "arguments": "not json"}},
                ],
            },
            {"role": "tool", "tool_call_id": "c1", "content": "Wrote 1 bytes to a."},
            {"role": "tool", "tool_call_id": "c2", "content": "Error: No such file: b"},
            {"role": "assistant", "content": "done"},
        ]
    )
    assert system == "be brief"
    assert [t["role"] for t in turns] == ["user", "assistant", "user", "assistant"]
    assert [b["text"] for b in turns[0]["content"]] == [
        "Summary of the conversation so far: x",
        "write two files",
    ]
    text, call1, call2 = turns[1]["content"]
    assert text == {"type": "text", "text": "on it"}
    assert call1 == {"type": "tool_use", "id": "c1", "name": "write", "input": {"path": "a"}}
    assert call2["input"] == {}
    result1, result2 = turns[2]["content"]
    assert result1["tool_use_id"] == "c1" and result1["is_error"] is False
    assert result2["tool_use_id"] == "c2" and result2["is_error"] is True


def test_tools_and_the_model_prefix():
    (tool,) = to_anthropic_tools(
        [{"type": "function", "function": {"name": "read", "description": "d", "parameters": {}}}]
    )
    assert tool == {"name": "read", "description": "d", "input_schema": {"type": "object"}}
    provider = get_provider("anthropic:claude-sonnet-4-5")
    assert isinstance(provider, AnthropicProvider) and provider.model == "claude-sonnet-4-5"


def test_a_stream_of_thinking_text_and_tool_use_becomes_events(settings):
    """The SDK's own event objects, as the Messages API streams them, in: reasoning, text, a
    tool call and the usage out (and the thinking budget asked for)."""

    settings.ANTHROPIC_THINKING_TOKENS = 2048
    start = Message(
        id="msg_1",
        type="message",
        role="assistant",
        content=[],
        model="claude-x",
        stop_reason=None,
        stop_sequence=None,
        usage=Usage(input_tokens=42, output_tokens=1, cache_read_input_tokens=30),
    )
    stream = [
        RawMessageStartEvent(type="message_start", message=start),
        RawContentBlockDeltaEvent(
            type="content_block_delta",
            index=0,
            delta=ThinkingDelta(type="thinking_delta", thinking="Let me think."),
        ),
        RawContentBlockDeltaEvent(
            type="content_block_delta", index=1, delta=TextDelta(type="text_delta", text="On it.")
        ),
        RawContentBlockStartEvent(
            type="content_block_start",
            index=2,
            content_block=ToolUseBlock(type="tool_use", id="toolu_1", name="write", input={}),
        ),
        RawContentBlockDeltaEvent(
            type="content_block_delta",
            index=2,
            delta=InputJSONDelta(type="input_json_delta", partial_json='{"path": "a", '),
        ),
        RawContentBlockDeltaEvent(
            type="content_block_delta",
            index=2,
            delta=InputJSONDelta(type="input_json_delta", partial_json='"content": "x"}'),
        ),
        RawMessageDeltaEvent(
            type="message_delta",
            delta=Delta(stop_reason="tool_use", stop_sequence=None),
            usage=MessageDeltaUsage(output_tokens=17),
        ),
    ]
    asked: dict = {}

    class Events:
        def __init__(self) -> None:
            self.items = iter(stream)

        def __aiter__(self):  # noqa: ANN204
            return self

        async def __anext__(self):  # noqa: ANN204
            try:
                return next(self.items)
            except StopIteration:
                raise StopAsyncIteration from None

        async def close(self) -> None:
            return None

    async def create(**kwargs):  # noqa: ANN003, ANN202
        asked.update(kwargs)
        return Events()

    provider = AnthropicProvider("claude-x")
    provider.client.messages.create = create
    events = list(
        provider.stream([{"role": "user", "content": "go"}], [], should_abort=lambda: False)
    )
    assert asked["thinking"] == {"type": "enabled", "budget_tokens": 2048}
    assert events[0] == ReasoningDelta("Let me think.")
    assert events[1] == Text("On it.")
    assert events[2] == ToolCall(
        call_id="toolu_1",
        name="write",
        arguments={"path": "a", "content": "x"},
        raw_arguments='{"path": "a", "content": "x"}',
    )
    assert events[3] == Finish(
        usage={"input_tokens": 42, "cached_input_tokens": 30, "output_tokens": 17},
        reason="tool_use",
    )
