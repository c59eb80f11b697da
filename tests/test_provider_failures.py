"""Issue 16: provider failures become clear run errors, and the loop does what can be done:
a rate limit is waited out (Retry-After honoured) and tried again, then reported; refused
credentials say so; a context overflow compacts and tries once more; a connection dropped
mid-stream keeps what streamed, and resume continues."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from typing import Any

import httpx
import openai
import pytest

from runs_app.execution.loop import context as loop_context
from runs_app.models import Run
from runs_app.providers.base import Finish, ProviderError, TextDelta, classify, status_error
from runs_app.providers.scripted import ScriptedProvider
from sessions_app.models import Message, Part
from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


class Flaky(ScriptedProvider):
    """The scripted model, but the first calls whose user message holds ``trigger`` fail as
    ``failures`` says (an exception, or "drop": some text, then the connection goes)."""

    calls: list[str] = []

    def __init__(self, trigger: str, failures: list[Any]) -> None:
        super().__init__()
        self.trigger, self.failures = trigger, failures

    async def astream(self, messages, tools, *, should_abort) -> AsyncIterator[Any]:  # noqa: ANN001
        last = next((m for m in reversed(messages) if m["role"] == "user"), {})
        Flaky.calls.append(str(last.get("content", ""))[:40])
        if self.trigger in str(last.get("content", "")) and self.failures:
            failure = self.failures.pop(0)
            if failure == "drop":
                yield TextDelta("partial answer")
                raise ProviderError(
                    "The connection to the model endpoint was lost.", kind="connection"
                )
            raise failure
        async for event in super().astream(messages, tools, should_abort=should_abort):
            yield event


@pytest.fixture
def flaky(monkeypatch, settings):
    settings.SCRIPTED_DEFAULT_PACE_MS = 0
    Flaky.calls = []
    made: dict[str, Flaky] = {}

    def install(trigger: str, failures: list[Any]) -> None:
        provider = Flaky(trigger, failures)
        made["p"] = provider
        monkeypatch.setattr(loop_context, "get_provider", lambda model: provider)

    return install


def rate_limited(retry_after: float | None) -> ProviderError:
    return ProviderError(
        "The model provider is rate limiting requests (HTTP 429: slow down).",
        kind="rate_limit",
        retry_after=retry_after,
    )


def test_a_rate_limit_is_waited_out_honouring_retry_after(api, flaky):
    flaky("say hello", [rate_limited(0.3), rate_limited(0.3)])
    sid = new_session(api)
    started = time.monotonic()
    run = run_turn(api, sid, "say hello")
    assert time.monotonic() - started >= 0.6, "waited what Retry-After asked, twice"
    assert run["status"] == "completed"
    assert Flaky.calls.count("say hello") == 3


def test_a_rate_limit_that_lasts_ends_the_run_saying_so(api, flaky, settings):
    settings.AGENT_RATE_LIMIT_RETRIES = 2
    flaky("say hello", [rate_limited(0.1)] * 5)
    run = run_turn(api, new_session(api), "say hello", status="error")
    assert "rate limiting" in run["error"]["message"]
    assert (
        "Tried 3 times" in run["error"]["message"] and "try again later" in run["error"]["message"]
    )
    flaky("say again", [rate_limited(3600)])
    run = run_turn(api, new_session(api), "say again", status="error")
    assert "asks to wait 3600 s" in run["error"]["message"]


def test_refused_credentials_say_so(api, flaky):
    response = httpx.Response(
        401,
        json={"error": {"message": "Incorrect API key provided"}},
        request=httpx.Request("POST", "http://model/v1/chat/completions"),
    )
    refused = status_error(
        openai.AuthenticationError("401", response=response, body=response.json())
    )
    flaky("say hello", [refused])
    run = run_turn(api, new_session(api), "say hello", status="error")
    assert "refused this deployment's credentials" in run["error"]["message"]
    assert "Incorrect API key provided" in run["error"]["message"]


def test_a_context_overflow_compacts_and_tries_once_more(api, flaky):
    sid = new_session(api)
    for turn in range(3):
        run_turn(api, sid, f"say turn {turn}")
    overflow = ProviderError("too long", kind="context_overflow")
    flaky("say after", [overflow])
    run = run_turn(api, sid, "say after")
    assert run["status"] == "completed"
    assert Part.objects.filter(session_id=sid, type="compaction").count() == 1
    texts = [
        p.text for p in Part.objects.filter(session_id=sid, type="text", message__role="assistant")
    ]
    assert texts[-1] == "after"
    # The step given up left no trace: one answer to "say after", after the summary.
    answers = Message.objects.filter(session_id=sid, run_id=run["id"], role="assistant")
    assert answers.count() == 2  # the summary and the answer


def test_an_overflow_that_compaction_cannot_help_is_an_error(api, flaky):
    flaky("say first", [ProviderError("too long", kind="context_overflow")])
    run = run_turn(api, new_session(api), "say first", status="error")
    assert "nothing older to compact" in run["error"]["message"]


def test_a_dropped_stream_keeps_what_came_and_resume_continues(api, flaky):
    flaky("say the whole answer", ["drop"])
    sid = new_session(api)
    run = run_turn(api, sid, "say the whole answer", status="error")
    assert "was lost" in run["error"]["message"]
    kept = Part.objects.get(session_id=sid, type="text", message__role="assistant")
    assert kept.text == "partial answer"
    resumed = api.post(
        f"/api/sessions/{sid}/runs/", {"mode": "resume", "wait": True}, format="json"
    ).json()
    assert resumed["status"] == "completed"
    texts = list(
        Part.objects.filter(session_id=sid, type="text", message__role="assistant")
        .order_by("message_id")
        .values_list("text", flat=True)
    )
    assert texts == ["partial answer", "the whole answer"]
    assert Run.objects.filter(session_id=sid).count() == 2


def test_http_errors_are_classified():
    assert classify(429, "slow down", {"retry-after": "7"}) == ("rate_limit", 7.0)
    assert classify(529, "Overloaded", {}) == ("rate_limit", None)
    assert classify(401, "bad key") == ("auth", None)
    assert classify(400, "This model's maximum context length is 8192 tokens") == (
        "context_overflow",
        None,
    )
    assert classify(400, "prompt is too long: 210000 tokens > 200000 maximum")[0] == (
        "context_overflow"
    )
    assert classify(500, "boom") == ("other", None)
    response = httpx.Response(
        429,
        headers={"retry-after": "2"},
        json={"error": {"message": "Rate limit reached"}},
        request=httpx.Request("POST", "http://model/v1/messages"),
    )
    error = status_error(openai.RateLimitError("429", response=response, body=response.json()))
    assert error.kind == "rate_limit" and error.retry_after == 2.0
    assert "rate limiting" in str(error) and "Rate limit reached" in str(error)
    assert isinstance(Finish(), Finish)
