"""The OpenAI-compatible provider against a local streaming chat-completions server: text and
tool calls assembled from chunks, HTTP errors and dropped streams as ProviderError, and one
whole run through the engine (tool call, tool result sent back, final text)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from runs_app.execution.host import run_agent
from runs_app.models import Run
from runs_app.providers.base import Finish, ProviderError, TextDelta, ToolCall
from runs_app.providers.openai_compat import OpenAIProvider
from runs_app.services.runs import start_run
from sessions_app.models import Message, Part
from sessions_app.services.sessions import create_session
from tests.support.fake_openai import Fail, FakeOpenAI, Stream, chunk, text_chunks, tool_delta

USER = [{"role": "user", "content": "hi"}]


def collect(server: FakeOpenAI, tools=None, messages=None):
    provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="x")
    events = []
    try:
        for event in provider.stream(messages or USER, tools or [], should_abort=lambda: False):
            events.append(event)
    except ProviderError as exc:
        return events, exc
    return events, None


def test_text_arrives_as_deltas_in_order():
    pieces = ["Hel", "lo", ", ", "wor", "ld", "!"]
    with FakeOpenAI(lambda body, i: Stream(text_chunks(*pieces))) as server:
        events, error = collect(server)
    assert error is None
    deltas = [e.text for e in events if isinstance(e, TextDelta)]
    assert deltas == pieces
    assert "".join(deltas) == "Hello, world!"
    assert isinstance(events[-1], Finish) and events[-1].reason == "stop"
    assert not any(isinstance(e, ToolCall) for e in events)
    (request,) = server.requests
    assert server.paths == ["/v1/chat/completions"]
    assert request["model"] == "test-model" and request["stream"] is True
    assert request["messages"] == USER
    assert "tools" not in request  # no tools: the key is left out, not sent empty


def test_usage_chunk_is_reported_in_finish():
    chunks = text_chunks("ok")
    chunks.append(
        {
            "id": "chatcmpl-test",
            "object": "chat.completion.chunk",
            "created": 0,
            "model": "test-model",
            "choices": [],
            "usage": {"prompt_tokens": 12, "completion_tokens": 3, "total_tokens": 15},
        }
    )
    with FakeOpenAI(lambda body, i: Stream(chunks)) as server:
        events, error = collect(server)
    assert error is None
    assert events[-1] == Finish(usage={"input_tokens": 12, "output_tokens": 3}, reason="stop")


def test_parallel_tool_calls_are_assembled_from_split_chunks():
    args0 = json.dumps({"path": "notes/a.txt", "content": 'hello "quoted" wörld'})
    args1 = json.dumps({"path": "b.txt"})
    cut0, cut1 = args0.index("quoted") + 3, args1.index("b.") + 1  # mid-string cuts
    chunks = [
        chunk(role="assistant", content=None),
        chunk(tool_calls=[tool_delta(0, id="call_", name="wr")]),
        chunk(tool_calls=[tool_delta(0, name="ite", arguments="")]),
        chunk(tool_calls=[tool_delta(0, arguments=args0[:5])]),
        chunk(tool_calls=[tool_delta(1, id="call_B", name="read", arguments=args1[:cut1])]),
        chunk(tool_calls=[tool_delta(0, arguments=args0[5:cut0])]),
        chunk(tool_calls=[tool_delta(1, arguments=args1[cut1:])]),
        chunk(tool_calls=[tool_delta(0, id="call_A", arguments=args0[cut0:])]),
        chunk(finish_reason="tool_calls"),
    ]
    tools = [
        {
            "type": "function",
            "function": {
                "name": "write",
                "description": "Replace a file's content.",
                "parameters": {"type": "object", "properties": {}},
            },
        }
    ]
    with FakeOpenAI(lambda body, i: Stream(chunks)) as server:
        events, error = collect(server, tools=tools)
    assert error is None
    calls = [e for e in events if isinstance(e, ToolCall)]
    assert [(c.call_id, c.name) for c in calls] == [("call_A", "write"), ("call_B", "read")]
    assert calls[0].arguments == {"path": "notes/a.txt", "content": 'hello "quoted" wörld'}
    assert calls[0].raw_arguments == args0
    assert calls[1].arguments == {"path": "b.txt"}
    assert not any(isinstance(e, TextDelta) for e in events)
    assert isinstance(events[-1], Finish) and events[-1].reason == "tool_calls"
    assert server.requests[0]["tools"] == tools


def test_tool_call_with_invalid_json_arguments_is_kept_raw():
    chunks = [
        chunk(tool_calls=[tool_delta(0, id="call_x", name="write", arguments='{"path": "a')]),
        chunk(finish_reason="tool_calls"),
    ]
    with FakeOpenAI(lambda body, i: Stream(chunks)) as server:
        events, error = collect(server)
    assert error is None
    (call,) = [e for e in events if isinstance(e, ToolCall)]
    assert call.arguments == {"_invalid_json": '{"path": "a'}


@pytest.mark.parametrize(
    ("status", "message"),
    [(500, "The server had an error while processing your request."), (429, "Rate limit hit.")],
)
def test_http_error_with_json_body_raises_provider_error(status, message):
    body = {"error": {"message": message, "type": "server_error", "code": None}}
    with FakeOpenAI(lambda b, i: Fail(status, body)) as server:
        events, error = collect(server)
    assert events == []
    assert isinstance(error, ProviderError)
    text = str(error)
    assert f"HTTP {status}" in text and message in text
    assert len(server.requests) == 1  # max_retries=0: the run does not stall retrying


def test_http_error_without_json_body_still_names_the_status():
    with FakeOpenAI(lambda b, i: Fail(503, {})) as server:
        events, error = collect(server)
    assert isinstance(error, ProviderError) and "HTTP 503" in str(error)


def test_connection_dropped_mid_stream_raises_after_the_partial_text():
    """The server sends two words, then closes the socket mid-body (no [DONE], no final HTTP
    chunk). What streamed is kept; then the call fails, so the run ends in error instead of
    looking like a complete, shorter answer."""
    chunks = text_chunks("first ", "second ", "third")[:3]
    with FakeOpenAI(lambda b, i: Stream(chunks, drop=True)) as server:
        events, error = collect(server)
    assert [e.text for e in events if isinstance(e, TextDelta)] == ["first ", "second "]
    assert not any(isinstance(e, Finish) for e in events)
    assert isinstance(error, ProviderError)
    assert "fail" in str(error).lower() or "connection" in str(error).lower()


def test_unreachable_endpoint_raises_provider_error():
    with FakeOpenAI(lambda b, i: Fail(500)) as server:
        base_url = server.base_url
    provider = OpenAIProvider("test-model", base_url=base_url, api_key="x")
    with pytest.raises(ProviderError, match="connection to the model endpoint was lost"):
        list(provider.stream(USER, [], should_abort=lambda: False))


def test_stream_ending_without_finish_reason_or_done_is_an_error():
    chunks = text_chunks("first ", "second ", "third")[:3]
    with FakeOpenAI(lambda b, i: Stream(chunks, done=False)) as server:
        events, error = collect(server)
    assert isinstance(error, ProviderError)
    assert "ended before the answer was finished" in str(error)


def test_abort_stops_the_stream():
    seen = []

    def should_abort():
        return len(seen) >= 2

    chunks = text_chunks(*[f"w{i} " for i in range(20)])
    with FakeOpenAI(lambda b, i: Stream(chunks)) as server:
        provider = OpenAIProvider("test-model", base_url=server.base_url, api_key="x")
        for event in provider.stream(USER, [], should_abort=should_abort):
            seen.append(event)
    assert len(seen) == 2 and not any(isinstance(e, Finish) for e in seen)


# -- through the engine ---------------------------------------------------------------------


def _write_then_ok(body, index):
    if any(m.get("role") == "tool" for m in body["messages"]):
        return Stream(text_chunks("o", "k"))
    args = json.dumps({"path": "a.txt", "content": "hi"})
    return Stream(
        [
            chunk(role="assistant", content=None),
            chunk(tool_calls=[tool_delta(0, id="call_w1", name="write", arguments=args[:9])]),
            chunk(tool_calls=[tool_delta(0, arguments=args[9:])]),
            chunk(finish_reason="tool_calls"),
        ]
    )


@pytest.mark.django_db(transaction=True)
def test_a_run_with_an_openai_model_calls_a_tool_and_answers(settings):
    owner = User.objects.create_user(username="olga", password="pw")
    with FakeOpenAI(_write_then_ok) as server:
        settings.OPENAI_BASE_URL = server.base_url
        session = create_session(owner=owner, model="openai:test-model")
        run = start_run(
            session=session,
            user=owner,
            messages=[{"role": "user", "content": "write hi to a.txt"}],
            defer_enqueue=True,
        )
        assert run_agent(run.id) is True
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error
    assert (session.worktree / "a.txt").read_text() == "hi"

    assert len(server.requests) == 2
    first, second = server.requests
    assert first["model"] == "test-model" and first["stream"] is True
    assert first["messages"] == [{"role": "user", "content": "write hi to a.txt"}]
    assert "write" in {t["function"]["name"] for t in first["tools"]}
    user, assistant, tool = second["messages"]
    assert user == first["messages"][0]
    assert assistant["role"] == "assistant" and not assistant.get("content")
    (call,) = assistant["tool_calls"]
    assert call["id"] == "call_w1" and call["type"] == "function"
    assert call["function"]["name"] == "write"
    assert json.loads(call["function"]["arguments"]) == {"path": "a.txt", "content": "hi"}
    assert tool["role"] == "tool" and tool["tool_call_id"] == "call_w1"
    assert isinstance(tool["content"], str)

    messages = list(Message.objects.filter(run_id=run.id).order_by("id"))
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    tool_part = Part.objects.get(message=messages[1], type="tool")
    assert tool_part.tool == "write" and tool_part.state["status"] == "completed"
    texts = [p.text for p in Part.objects.filter(message=messages[2], type="text")]
    assert texts == ["ok"]


@pytest.mark.django_db(transaction=True)
def test_a_run_against_a_failing_endpoint_ends_in_error(settings):
    owner = User.objects.create_user(username="olga", password="pw")
    body = {"error": {"message": "model overloaded"}}
    with FakeOpenAI(lambda b, i: Fail(500, body)) as server:
        settings.OPENAI_BASE_URL = server.base_url
        session = create_session(owner=owner, model="openai:test-model")
        run = start_run(
            session=session,
            user=owner,
            messages=[{"role": "user", "content": "hi"}],
            defer_enqueue=True,
        )
        run_agent(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.error["type"] == "ProviderError"
    assert "HTTP 500" in run.error["message"] and "model overloaded" in run.error["message"]
    assistant = Message.objects.filter(run_id=run.id, role="assistant").get()
    assert assistant.error and "model overloaded" in assistant.error["message"]
    session.refresh_from_db()
    assert session.status == "idle"


@pytest.mark.django_db(transaction=True)
def test_a_dropped_stream_ends_the_run_in_error_keeping_the_partial_text(settings):
    owner = User.objects.create_user(username="olga", password="pw")
    chunks = text_chunks("partial ", "answer ", "never")[:3]
    with FakeOpenAI(lambda b, i: Stream(chunks, drop=True)) as server:
        settings.OPENAI_BASE_URL = server.base_url
        session = create_session(owner=owner, model="openai:test-model")
        run = start_run(
            session=session,
            user=owner,
            messages=[{"role": "user", "content": "hi"}],
            defer_enqueue=True,
        )
        run_agent(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR and run.error["type"] == "ProviderError"
    assistant = Message.objects.filter(run_id=run.id, role="assistant").get()
    assert assistant.error is not None
    texts = [p.text for p in Part.objects.filter(message=assistant, type="text")]
    assert texts == ["partial answer "]
