"""Issue 46, point 5 (docs/semantics.md §1.12): a resume after Stop continues the stopped
answer — the model is sent it as the assistant's message so far, and what it says goes on in
the same message and text part — rather than starting the answer again under it."""

from __future__ import annotations

import pytest

from runs_app.execution.loop import context as loop_context
from runs_app.models import Run
from runs_app.providers.anthropic_native import to_anthropic
from runs_app.providers.openai_compat import OpenAIProvider
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import active_path
from tests.conftest import runs_idle, wait_until
from tests.support.fake_openai import FakeOpenAI, Stream, text_chunks

pytestmark = pytest.mark.django_db(transaction=True)


def post(api, sid, text=None, **extra):
    body = {**extra}
    if text is not None:
        body["messages"] = [{"role": "user", "content": text}]
    return api.post(f"/api/sessions/{sid}/runs/", body, format="json").json()


def stop_when_text(api, sid, run_id, chars=10) -> str:
    """Stop the run once its answer holds ``chars`` characters; the text kept."""
    wait_until(
        lambda: any(
            len(p.text) > chars
            for p in Part.objects.filter(message__run_id=run_id, type="text")
            if p.message.role == "assistant"
        ),
        what="some streamed text",
    )
    assert api.post(f"/api/sessions/{sid}/abort/").status_code == 200
    wait_until(lambda: runs_idle(sid), what="the stop")
    assert Run.objects.get(id=run_id).status == "cancelled"
    return Part.objects.get(message__run_id=run_id, message__role="assistant", type="text").text


def answers(sid) -> list[Message]:
    return [m for m in active_path(Session.objects.get(id=sid)) if m.role == "assistant"]


def test_a_stopped_answer_goes_on_where_it_stopped(api, sid):
    words = " ".join(f"w{i}" for i in range(40))
    run = post(api, sid, f"pace 40\nsay {words}")
    partial = stop_when_text(api, sid, run["id"])
    assert 0 < len(partial) < len(words) and words.startswith(partial)
    resumed = post(api, sid, mode="resume", wait=True)
    assert resumed["status"] == "completed"
    (answer,) = answers(sid)  # not the stopped text and a second answer under it
    texts = [p for p in answer.loaded_parts if p.type == "text"]
    assert [p.text for p in texts] == [words], "the whole text, exactly once"
    assert answer.completed_at is not None and answer.error is None
    kinds = [p.type for p in answer.loaded_parts]
    assert kinds.count("step-start") == 2, "a step per model call, in the one message"
    finishes = [p.data for p in answer.loaded_parts if p.type == "step-finish"]
    assert [bool(d.get("interrupted")) for d in finishes] == [True, False]
    assert kinds.index("text") < kinds.index("step-finish"), "one text, continued"


def test_the_rest_of_the_script_is_played_after_the_stopped_line(api, sid):
    # The stop falls in the second say line: the first is not said again, the tools follow.
    first = "one two "
    second = " ".join(f"x{i}" for i in range(40))
    run = post(api, sid, f"pace 40\nsay {first}\nsay {second}\nwrite a.txt hi\nsay end")
    partial = stop_when_text(api, sid, run["id"], chars=len(first) + 6)
    assert partial.startswith(first + "x")
    assert post(api, sid, mode="resume", wait=True)["status"] == "completed"
    texts = ["".join(p.text for p in m.loaded_parts if p.type == "text") for m in answers(sid)]
    assert texts == [first + second, "end"]
    assert (Session.objects.get(id=sid).worktree / "a.txt").read_text() == "hi"


def test_the_model_is_sent_the_answer_so_far_and_its_rest_is_appended(api, sid, monkeypatch):
    pieces = ["Once", " upon", " a", " time"] + [f" {i}" for i in range(200)]

    def respond(body, index):
        if index == 0:
            return Stream(text_chunks(*pieces), delay=0.05)
        return Stream(text_chunks(" and", " the", " end."))

    with FakeOpenAI(respond) as server:
        monkeypatch.setattr(
            loop_context,
            "get_provider",
            lambda model: OpenAIProvider("test-model", base_url=server.base_url, api_key="x"),
        )
        run = post(api, sid, "tell a story")
        partial = stop_when_text(api, sid, run["id"], chars=12)
        assert post(api, sid, mode="resume", wait=True)["status"] == "completed"
        requests = list(server.requests)
    resumed = requests[-1]["messages"]
    assert resumed[-2:] == [
        {"role": "user", "content": "tell a story"},
        {"role": "assistant", "content": partial},
    ], "the stopped answer is the assistant's message so far"
    (answer,) = answers(sid)
    assert [p.text for p in answer.loaded_parts if p.type == "text"] == [partial + " and the end."]


def test_anthropic_is_sent_the_answer_so_far_as_a_prefill_it_accepts():
    # Its Messages API takes a last assistant turn as the start of the answer, and refuses
    # one that ends in whitespace.
    _, turns = to_anthropic(
        [{"role": "user", "content": "tell"}, {"role": "assistant", "content": "Once upon \n"}]
    )
    assert turns[-1] == {"role": "assistant", "content": [{"type": "text", "text": "Once upon"}]}
