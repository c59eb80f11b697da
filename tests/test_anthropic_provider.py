"""The native Anthropic provider's translation of the loop's transcript (OpenAI chat shape)
into the Messages API's shape. Its streaming is tested against an external server in
tests/e2e/test_providers_external.py."""

from __future__ import annotations

from runs_app.providers import get_provider
from runs_app.providers.anthropic_native import (
    AnthropicProvider,
    to_anthropic,
    to_anthropic_tools,
)


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
