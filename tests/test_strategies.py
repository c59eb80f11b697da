"""docs/semantics.md §1.4 and §1.6: multitask strategies, abort then resume, per-run checkpoint
mode."""

from __future__ import annotations

import time

import pytest

from runs_app.models import Run
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path
from tests.conftest import runs_idle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def post(api, sid, text=None, **extra):
    body = {**extra}
    if text is not None:
        body["messages"] = [{"role": "user", "content": text}]
    return api.post(f"/api/sessions/{sid}/runs/", body, format="json")


wait_for = wait_until
idle = runs_idle


def path_texts(sid):
    session = Session.objects.get(id=sid)
    return [
        (m.role, "".join(p.text for p in m.loaded_parts if p.type == "text"))
        for m in active_path(session)
    ]


def test_interrupt_stops_the_current_run_keeps_its_output_and_runs_the_new_one(api, sid):
    first = post(api, sid, "say one\nwait 30").json()
    wait_for(lambda: Part.objects.filter(message__run_id=first["id"], type="tool").exists())
    second = post(api, sid, "say two", multitask_strategy="interrupt")
    assert second.status_code == 202
    wait_for(lambda: idle(sid))
    assert Run.objects.get(id=first["id"]).status == "cancelled"
    assert Run.objects.get(id=second.json()["id"]).status == "completed"
    tool = Part.objects.get(message__run_id=first["id"], type="tool")
    assert tool.state["status"] == "error" and tool.state["metadata"]["reason"] == "prompt"
    assert path_texts(sid) == [
        ("user", "say one\nwait 30"),
        ("assistant", "one"),
        ("user", "say two"),
        ("assistant", "two"),
    ]


def test_rollback_removes_the_current_runs_messages_from_the_path_but_keeps_them(api, sid):
    post(api, sid, "say kept", wait=True)
    first = post(api, sid, "say dropped\nwait 30").json()
    wait_for(lambda: Part.objects.filter(message__run_id=first["id"], type="tool").exists())
    second = post(api, sid, "say instead", multitask_strategy="rollback").json()
    wait_for(lambda: idle(sid))
    assert Run.objects.get(id=second["id"]).status == "completed"
    assert path_texts(sid) == [
        ("user", "say kept"),
        ("assistant", "kept"),
        ("user", "say instead"),
        ("assistant", "instead"),
    ]
    assert Message.objects.filter(run_id=first["id"]).count() == 2, "hidden, not deleted"
    event = HistoryEvent.objects.get(session_id=sid, kind="rollback")
    assert event.data["rolled_back_run_id"] == first["id"]


def test_abort_mid_tool_then_resume_completes_the_turn_then_a_prompt_works(api, sid):
    run = post(api, sid, "wait 3\nsay after").json()
    wait_for(lambda: Part.objects.filter(message__run_id=run["id"], type="tool").exists())
    started = time.monotonic()
    assert api.post(f"/api/sessions/{sid}/abort/").status_code == 200
    wait_for(lambda: Session.objects.get(id=sid).status == "idle", timeout=5)
    assert time.monotonic() - started < 2, "abort stops a slow tool at once"
    assert Run.objects.get(id=run["id"]).status == "cancelled"
    resumed = post(api, sid, mode="resume", wait=True).json()
    assert resumed["status"] == "completed" and resumed["mode"] == "resume"
    tool = Part.objects.get(message__run_id=run["id"], type="tool")
    assert tool.state["status"] == "completed", "a read-only tool is recalled"
    texts = path_texts(sid)
    assert texts[-1] == ("assistant", "after")
    assert not Message.objects.filter(run_id=resumed["id"], role="user").exists()
    assert post(api, sid, "say next", wait=True).json()["status"] == "completed"
    assert path_texts(sid)[-1] == ("assistant", "next")


def test_abort_mid_stream_keeps_the_text_and_resume_goes_on(api, sid):
    words = " ".join(f"w{i}" for i in range(40))
    run = post(api, sid, f"pace 50\nsay {words}").json()
    wait_for(
        lambda: any(
            len(p.text) > 10
            for p in Part.objects.filter(message__run_id=run["id"], type="text")
            if p.message.role == "assistant"
        )
    )
    api.post(f"/api/runs/{run['id']}/cancel/")
    wait_for(lambda: idle(sid))
    partial = Part.objects.get(message__run_id=run["id"], message__role="assistant", type="text")
    assert 0 < len(partial.text) < len(words)
    assert words.startswith(partial.text)
    resumed = post(api, sid, mode="resume", wait=True).json()
    assert resumed["status"] == "completed"
    step = partial.message
    step.refresh_from_db()
    partial.refresh_from_db()
    # It goes on where it stopped, in the same text (docs/semantics.md §1.12).
    assert step.error is None and partial.text == words


def test_the_checkpoint_mode_can_be_chosen_per_run(api, sid):
    run = post(api, sid, "say hi", checkpoint="runs", wait=True).json()
    assert run["checkpoint"] == "runs" and run["status"] == "completed"
    bad = post(api, sid, "say hi", checkpoint="often")
    assert bad.status_code == 400
    assert bad.json()["error"]["message"] == "checkpoint must be one of runs, tool-batch, tool."


def test_resume_in_the_admin_and_abort_in_the_admin(owner, api, sid):
    from django.contrib.auth.models import Permission
    from django.test import Client

    owner.is_staff = True
    owner.save()
    owner.user_permissions.set(
        Permission.objects.filter(codename__in=["view_session", "change_session"])
    )
    client = Client()
    client.force_login(owner)
    run = post(api, sid, "pace 100\nsay " + " ".join(f"w{i}" for i in range(50))).json()
    wait_for(lambda: Part.objects.filter(message__run_id=run["id"], type="text").count() == 2)
    changelist = "/admin/sessions_app/session/"
    client.post(changelist, {"action": "abort_action", "_selected_action": [sid]})
    wait_for(lambda: Run.objects.get(id=run["id"]).status == "cancelled", timeout=5)
    answer = client.post(
        changelist, {"action": "resume_action", "_selected_action": [sid]}, follow=True
    )
    assert "Resumed 1 session(s)." in [str(m) for m in answer.context["messages"]]
    wait_for(lambda: Run.objects.filter(session_id=sid, mode="resume", status="completed").exists())
