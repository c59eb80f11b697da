"""docs/semantics.md §1.5: each row of the recovery table, through resume runs of the real
engine."""

from __future__ import annotations

import pytest

from runs_app.execution.host import run_agent
from runs_app.models import Run
from runs_app.services.runs import start_run
from runs_app.transcript import model_messages
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import active_path
from sessions_app.services.sessions import create_session

pytestmark = pytest.mark.django_db(transaction=True)


def unfinished_turn(owner, script: str, tools: list[tuple[str, dict, str]]):
    """A session whose last turn stopped mid-step: ``tools`` = (name, input, status)."""
    session = create_session(owner=owner)
    user = Message.objects.create(session=session, role="user", completed_at=None)
    Part.objects.create(message=user, session=session, type="text", text=script)
    step = Message.objects.create(session=session, role="assistant", parent=user)
    Part.objects.create(
        message=step, session=session, order=0, type="step-start", data={"snapshot": ""}
    )
    for i, (name, args, status) in enumerate(tools):
        state = {"status": status, "input": args, "output": None, "error": None, "metadata": {}}
        if status == "completed":
            state["output"] = "earlier output"
        if status == "error":
            state["error"] = "earlier failure"
        Part.objects.create(
            message=step,
            session=session,
            order=i + 1,
            type="tool",
            call_id=f"call_0_{i}",
            tool=name,
            state=state,
        )
    Session.objects.filter(id=session.id).update(head=step)
    return session, step


def resume(session, owner) -> Run:
    run = start_run(session=session, user=owner, mode="resume", defer_enqueue=True)
    run_agent(run.id)
    run.refresh_from_db()
    return run


def states(step):
    return [
        (p.tool, p.state["status"], p.state.get("metadata", {}).get("reason"))
        for p in Part.objects.filter(message=step, type="tool").order_by("order")
    ]


def test_completed_and_error_tools_are_kept(owner):
    script = "read a.txt\nwrite b.txt x"
    session, step = unfinished_turn(
        owner, script, [("read", {"path": "a.txt"}, "completed"), ("write", {}, "error")]
    )
    run = resume(session, owner)
    assert run.status == "completed"
    assert states(step) == [("read", "completed", None), ("write", "error", None)]
    step.refresh_from_db()
    assert step.completed_at is not None
    assert step.error == {
        "reason": "UnfinishedAssistantMessage",
        "message": "Assistant message was not completed before recovery.",
        "metadata": {"recovered": True, "mode": "resume"},
    }
    texts = [
        "".join(p.text for p in m.loaded_parts if p.type == "text")
        for m in active_path(Session.objects.get(id=session.id))
    ]
    assert texts[-1] == "done", "the model saw the results and continued"


def test_a_pending_read_only_tool_is_recalled(owner):
    session, step = unfinished_turn(
        owner,
        "list\nread a.txt",
        [("list", {"path": ""}, "completed"), ("read", {"path": "a.txt"}, "running")],
    )
    (session.worktree / "a.txt").write_text("fresh")
    resume(session, owner)
    assert states(step) == [("list", "completed", None), ("read", "completed", None)]
    read = Part.objects.get(message=step, tool="read")
    assert read.state["output"] == "fresh"


def test_a_side_effect_tool_is_interrupted_and_never_run_twice(owner):
    session, step = unfinished_turn(
        owner,
        "append log.txt x\nread log.txt",
        [
            ("append", {"path": "log.txt", "content": "x"}, "running"),
            ("read", {"path": "log.txt"}, "pending"),
        ],
    )
    (session.worktree / "log.txt").write_text("x\n")  # the first execution had happened
    run = resume(session, owner)
    assert run.status == "completed"
    assert states(step) == [("append", "error", "resume"), ("read", "error", "blocked")]
    assert (session.worktree / "log.txt").read_text() == "x\n", "one line, not two"
    append = Part.objects.get(message=step, tool="append")
    assert append.state["metadata"]["interrupted"] is True


def test_a_blocking_error_interrupts_the_later_unfinished_tools(owner, settings):
    settings.AGENT_ALLOW_SHELL = True
    session, step = unfinished_turn(
        owner,
        "shell false\nread a.txt\nlist",
        [
            ("shell", {"command": "false"}, "error"),
            ("read", {"path": "a.txt"}, "pending"),
            ("list", {}, "pending"),
        ],
    )
    resume(session, owner)
    assert states(step) == [
        ("shell", "error", None),
        ("read", "error", "blocked"),
        ("list", "error", "blocked"),
    ]


def test_interrupted_calls_get_a_result_in_the_transcript(owner):
    session, step = unfinished_turn(
        owner, "write a.txt x", [("write", {"path": "a.txt", "content": "x"}, "running")]
    )
    resume(session, owner)
    messages = model_messages(active_path(Session.objects.get(id=session.id)))
    calls = [c["id"] for m in messages if m["role"] == "assistant" for c in m.get("tool_calls", [])]
    results = [m["tool_call_id"] for m in messages if m["role"] == "tool"]
    assert calls == results == ["call_0_0"]
    assert "interrupted" in messages[2]["content"]


def test_resume_with_nothing_unfinished_calls_no_tool(owner):
    session = create_session(owner=owner)
    first = start_run(
        session=session, user=owner, messages=[{"content": "write a.txt x"}], defer_enqueue=True
    )
    run_agent(first.id)
    count = Part.objects.filter(session=session).count()
    run = resume(Session.objects.get(id=session.id), owner)
    assert run.status == "completed"
    assert Part.objects.filter(session=session).count() == count
    assert Message.objects.filter(session=session).count() == 3


def test_a_prompt_after_an_unfinished_turn_interrupts_with_reason_prompt(owner):
    session, step = unfinished_turn(owner, "wait 5", [("wait", {"seconds": 5}, "running")])
    run = start_run(
        session=session, user=owner, messages=[{"content": "say next"}], defer_enqueue=True
    )
    run_agent(run.id)
    assert states(step) == [("wait", "error", "prompt")]


def test_structured_output_is_validated(owner):
    session = create_session(owner=owner)
    schema = {"type": "object", "properties": {"n": {"type": "integer"}}, "required": ["n"]}
    ok = start_run(
        session=session,
        user=owner,
        messages=[{"content": 'json {"n": 3}'}],
        output_schema=schema,
        defer_enqueue=True,
    )
    run_agent(ok.id)
    ok.refresh_from_db()
    assert (ok.status, ok.output) == ("completed", {"n": 3})
    bad = start_run(
        session=Session.objects.get(id=session.id),
        user=owner,
        messages=[{"content": 'json {"n": "three"}'}],
        output_schema=schema,
        defer_enqueue=True,
    )
    run_agent(bad.id)
    bad.refresh_from_db()
    assert bad.status == "error"
    assert bad.error["message"].startswith("The structured output does not match output_schema")
