"""Issue 16: the OpenAI-compatible provider and the native Anthropic provider against a server
this project did not write — fakellm (PyPI), which speaks both APIs, streamed, driven by the
rules below — in services mode (Daphne, a Celery worker, PostgreSQL, Redis).

For each provider: streamed text reaches the websocket word by word and is stored; a streamed
tool call runs the tool (the file is written) and the model's next turn reads its result; an
HTTP error of the server ends the run ``error`` with a sentence naming it. (fakellm answers a
rule's error status only to unstreamed requests, and the providers always stream: the error
case points a deployment at a path the server does not serve, and it answers 404.)
"""

from __future__ import annotations

import textwrap

import httpx
import pytest

from tests.conftest import wait_until

from .flow import Events
from .stack import BIN, api_stack, free_port, wait_for_port

pytestmark = pytest.mark.timeout(240)

RULES = textwrap.dedent(
    """
    version: 1
    defaults:
      fallback: deterministic_echo
    rules:
      - name: after_tool
        when:
          tool_result_contains: "Wrote"
        respond:
          content: "The file is written."
      - name: make_file
        when:
          messages_contain: "please make the file"
        respond:
          tool_calls:
            - name: write
              arguments: {path: "made.txt", content: "made by a streamed tool call"}
      - name: hello
        when:
          messages_contain: "hello there"
        respond:
          content: "Hello from a server we did not write."
    """
)


def _fakellm(procs, tmp_path) -> str:  # noqa: ANN001
    config = tmp_path / "fakellm.yaml"
    config.write_text(RULES)
    port = free_port()
    env = {"PATH": str(BIN) + ":/usr/bin:/bin", "HOME": str(tmp_path)}
    proc = procs.start(
        "fakellm",
        [str(BIN / "fakellm"), "serve", "--port", str(port), "--config", str(config)],
        env,
        tmp_path,
    )
    wait_for_port(port, proc)
    return f"http://127.0.0.1:{port}"


def _turn(stack, model: str, text: str) -> tuple[dict, list[dict], dict]:  # noqa: ANN001
    http = stack.http
    sid = http.post("/api/sessions/", json={"title": text, "model": model}).json()["id"]
    events = Events(stack.host, sid, stack.token)
    run = http.post(f"/api/sessions/{sid}/runs/", json={"messages": [{"content": text}]}).json()
    ended = events.wait_for_run_end(run["id"], 60)
    events.close()
    messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
    return ended, events.events, {"sid": sid, "messages": messages}


def _texts(messages: list[dict]) -> list[str]:
    return [
        p["text"]
        for m in messages
        if m["role"] == "assistant"
        for p in m["parts"]
        if p["type"] == "text"
    ]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "model", ["openai:gpt-4o-mini", "anthropic:claude-sonnet-4-5"], ids=["openai", "anthropic"]
)
def test_streamed_text_a_streamed_tool_call_and_an_error_through_an_external_server(
    procs, tmp_path, model
):
    server = _fakellm(procs, tmp_path)
    stack = api_stack(
        procs,
        tmp_path,
        f"ext-{model.split(':')[0]}",
        OPENAI_BASE_URL=f"{server}/v1",
        ANTHROPIC_BASE_URL=server,
    )
    procs.worker(stack.env, tmp_path)
    try:
        # Streamed text: several deltas, stored whole.
        run, events, seen = _turn(stack, model, "hello there")
        assert run["status"] == "completed", run
        deltas = [e["text"] for e in events if e["type"] == "text-delta"]
        assert "".join(deltas) == "Hello from a server we did not write."
        assert _texts(seen["messages"]) == ["Hello from a server we did not write."]

        # A streamed tool call: the tool runs, the model reads its result and answers.
        run, events, seen = _turn(stack, model, "please make the file")
        assert run["status"] == "completed", run
        assert (stack.workspace / seen["sid"] / "made.txt").read_text() == (
            "made by a streamed tool call"
        )
        tools = [p for m in seen["messages"] for p in m["parts"] if p["type"] == "tool"]
        assert [t["tool"] for t in tools] == ["write"]
        assert tools[0]["state"]["status"] == "completed"
        assert _texts(seen["messages"])[-1] == "The file is written."
        assert httpx.get(f"{server}/_fakellm/stats").json()["by_rule"]["after_tool"] >= 1

        # An error the server answers: a deployment pointed at a path it does not serve.
        broken = api_stack(
            procs,
            tmp_path,
            f"ext-broken-{model.split(':')[0]}",
            OPENAI_BASE_URL=f"{server}/missing/v1",
            ANTHROPIC_BASE_URL=f"{server}/missing",
        )
        procs.worker(broken.env, tmp_path)
        run, _, seen = _turn(broken, model, "hello there")
        assert run["status"] == "error"
        assert run["error"]["type"] == "ProviderError"
        assert "answered HTTP 404" in run["error"]["message"], run["error"]
        wait_until(
            lambda: broken.http.get(f"/api/sessions/{seen['sid']}/").json()["status"] == "idle"
        )
    except Exception:
        print(procs.logs())
        raise
