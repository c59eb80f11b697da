from __future__ import annotations

import threading

import pytest
from django.contrib.auth.models import User
from django.db import connection

from runs_app.execution.host import run_agent
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.models import Message, Part, Session
from sessions_app.services.sessions import create_session
from tests.conftest import all_queries, client_for, new_session, runs_idle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def prompt(api, sid, text, **extra):
    return api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": text}], **extra},
        format="json",
    )


def wait_idle(sid, timeout=20.0):
    wait_until(lambda: runs_idle(sid), timeout, "the runs to finish")


def test_a_prompt_with_wait_writes_and_reads_a_file(api):
    sid = new_session(api)
    response = prompt(api, sid, "write notes/a.txt first line\nread notes/a.txt", wait=True)
    assert response.status_code == 200
    run = response.json()
    assert run["status"] == "completed" and run["id"].startswith("run_")
    session = Session.objects.get(id=sid)
    assert (session.worktree / "notes/a.txt").read_bytes() == b"first line"
    messages = api.get(f"/api/sessions/{sid}/messages/").json()["results"]
    assert [m["role"] for m in messages] == ["user", "assistant", "assistant"]
    assert messages[1]["parent_id"] == messages[0]["id"]
    assert messages[2]["parent_id"] == messages[1]["id"]
    step1 = messages[1]["parts"]
    assert [p["type"] for p in step1] == ["step-start", "tool", "tool", "step-finish", "patch"]
    write, read = step1[1], step1[2]
    assert write["state"]["status"] == "completed" and write["tool"] == "write"
    assert read["state"]["output"] == "first line"
    assert step1[4]["files"] == ["notes/a.txt"]
    assert step1[0]["snapshot"] != step1[3]["snapshot"]
    text = [p["text"] for p in messages[2]["parts"] if p["type"] == "text"]
    assert text == ["done"]
    assert session.head_id == messages[2]["id"] and session.status == "idle"
    transcript = api.get(f"/api/runs/{run['id']}/messages/").json()
    assert [m["role"] for m in transcript] == ["user", "assistant", "tool", "tool", "assistant"]
    assert transcript[1]["tool_calls"][0]["function"]["name"] == "write"


def test_say_streams_text_into_one_text_part(api):
    sid = new_session(api)
    run = prompt(api, sid, "say hello world", wait=True).json()
    assert run["status"] == "completed"
    parts = Part.objects.filter(message__run_id=run["id"], message__role="assistant", type="text")
    assert [p.text for p in parts] == ["hello world"]


def test_run_input_is_validated(api):
    sid = new_session(api)
    url = f"/api/sessions/{sid}/runs/"
    cases = [
        ({}, "messages is required in prompt mode."),
        (
            {"mode": "resume", "messages": [{"role": "user", "content": "x"}]},
            "messages is not allowed in resume mode.",
        ),
        (
            {"mode": "sideways", "messages": [{"role": "user", "content": "x"}]},
            "mode must be 'prompt' or 'resume'.",
        ),
        (
            {"messages": [{"role": "user", "content": "x"}], "multitask_strategy": "later"},
            "multitask_strategy must be one of reject, enqueue, interrupt, rollback.",
        ),
        ({"messages": "hello"}, "messages must be a list of {role, content} objects."),
        (
            {"messages": [{"role": "user", "content": ""}]},
            "each message needs a non-empty string content.",
        ),
    ]
    for body, message in cases:
        response = api.post(url, body, format="json")
        assert response.status_code == 400, body
        assert response.json()["error"] == {"type": "ValidationError", "message": message}
    assert not Run.objects.exists()


def test_two_runs_at_once_give_one_202_and_one_409(owner):
    api = client_for(owner)
    sid = new_session(api)
    codes = []
    barrier = threading.Barrier(2)

    def go():
        client = client_for(owner)
        barrier.wait()
        codes.append(prompt(client, sid, "wait 1").status_code)
        connection.close()

    threads = [threading.Thread(target=go) for _ in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert sorted(codes) == [202, 409]
    busy = prompt(api, sid, "say again")
    assert busy.status_code == 409
    assert busy.json()["error"]["type"] == "SessionBusyError"
    assert api.delete(f"/api/sessions/{sid}/").status_code == 409
    wait_idle(sid)
    assert Run.objects.filter(session_id=sid).count() == 1


def test_enqueued_runs_complete_one_after_the_other(api):
    sid = new_session(api)
    first = prompt(api, sid, "wait 0.5\nsay one")
    second = prompt(api, sid, "say two", multitask_strategy="enqueue")
    assert (first.status_code, second.status_code) == (202, 202)
    wait_idle(sid)
    a = Run.objects.get(id=first.json()["id"])
    b = Run.objects.get(id=second.json()["id"])
    assert a.status == b.status == "completed"
    assert a.finished_at <= b.started_at
    texts = [
        "".join(p.text for p in m.parts.filter(type="text"))
        for m in Message.objects.filter(session_id=sid).order_by("id")
    ]
    assert texts == ["wait 0.5\nsay one", "", "one", "say two", "two"]
    assert Session.objects.get(id=sid).status == "idle"


def test_a_path_escape_ends_as_a_tool_error(api, tmp_path):
    sid = new_session(api)
    session = Session.objects.get(id=sid)
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "keep.txt").write_text("keep")
    (session.worktree / "out").symlink_to(outside)
    run = prompt(api, sid, "write ../../etc/x y\nwrite out/keep.txt changed", wait=True).json()
    assert run["status"] == "completed"
    tools = Part.objects.filter(message__run_id=run["id"], type="tool").order_by("order")
    assert [t.state["status"] for t in tools] == ["error", "error"]
    assert "escapes the worktree" in tools[0].state["error"]
    assert "symlink" in tools[1].state["error"]
    assert (outside / "keep.txt").read_text() == "keep"
    assert [p.name for p in outside.iterdir()] == ["keep.txt"]
    assert not (tmp_path / "etc").exists() and not (session.worktree.parent.parent / "etc").exists()


def test_cancel_stops_the_run_and_keeps_its_output(api):
    sid = new_session(api)
    run = prompt(api, sid, "say started\nwait 30").json()
    wait_until(
        lambda: Part.objects.filter(message__run_id=run["id"], type="tool").exists(),
        timeout=10,
        what="the wait on record",
    )
    response = api.post(f"/api/runs/{run['id']}/cancel/", {}, format="json")
    assert response.status_code == 202
    wait_idle(sid)
    done = Run.objects.get(id=run["id"])
    assert done.status == "cancelled"
    tool = Part.objects.get(message__run_id=run["id"], type="tool")
    assert tool.state["status"] in ("pending", "running")  # unfinished, for resume
    text = Part.objects.get(message__run_id=run["id"], message__role="assistant", type="text")
    assert text.text == "started"
    assert Session.objects.get(id=sid).status == "idle"
    again = api.post(f"/api/runs/{run['id']}/cancel/", {}, format="json")
    assert again.status_code == 409


def test_a_failing_model_ends_the_run_in_error(api):
    sid = new_session(api)
    run = prompt(api, sid, "say partial\nfail the model broke", wait=True).json()
    assert run["status"] == "error"
    assert run["error"]["message"] == "the model broke"
    assert Session.objects.get(id=sid).status == "idle"


def test_max_steps_bounds_the_loop(owner, settings):
    settings.AGENT_MAX_STEPS = 2
    session = create_session(owner=owner)
    run = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "write a 1\nsay x\nwrite b 2\nsay y\nwrite c 3"}],
        defer_enqueue=True,
    )
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "completed" and run.result == "max_steps"
    assert Message.objects.filter(run_id=run.id, role="assistant").count() == 2


def _prior_history(session, owner, count):
    """``count`` messages of finished history, written in bulk."""
    parent = None
    messages, parts = [], []
    for i in range(count):
        m = Message(session=session, role="user" if i % 2 == 0 else "assistant", parent=parent)
        messages.append(m)
        parts.append(Part(message=m, session=session, type="text", text=f"message {i}"))
        parent = m
    Message.objects.bulk_create(messages)
    Part.objects.bulk_create(parts)
    Session.objects.filter(id=session.id).update(head=messages[-1])


def _counted_run(session: Session, owner: User, script: str) -> tuple[Run, list[str]]:
    """Run ``script`` in ``session`` on this process's host: the run, and every statement it
    took (from any thread). Set the keeper apart first (long lease and abort poll)."""
    run = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": script}],
        defer_enqueue=True,
    )
    with all_queries() as queries:
        run_agent(run.id)
    run.refresh_from_db()
    return run, queries


@pytest.mark.parametrize("mode", ["tool-batch"])
def test_history_load_and_checkpoints_do_not_grow_with_history(owner, mode, settings):
    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300  # keeper apart
    counts = []
    for size in (10, 400):
        session = create_session(owner=owner, checkpoint=mode)
        _prior_history(session, owner, size)
        run, queries = _counted_run(session, owner, "write a.txt x\nappend a.txt y")
        assert run.status == "completed"
        counts.append(len(queries))
    assert counts[0] == counts[1]


def test_a_run_starts_and_ends_in_few_statements(owner, settings):
    """Starting and ending a run is what a burst of new runs costs the live ones: the worker
    reads the run and its session once after claiming them (two refreshes read the session
    three times), walks the path with one query (not a server-side cursor), writes the input
    with the run's mark of it, and publishes the session it locked at the end (not a fresh
    read of it). 22 statements before (and the cursor's fetches and close), 19 then; 21 since
    each of the run's two checkpoints is fenced by its lease epoch (one ``SELECT … FOR SHARE``
    in its transaction, runs_app/execution/fencing.py; the end fences itself in its UPDATE).
    ``begin`` decides under the session row lock (its first statement locks the row; the run is read
    after it), and keeps what it wrote instead of reading both rows again: as many
    statements as before, the session's row read twice, each time locked. 20 since the
    end writes the session's new head with its hand-over, in one UPDATE (two before)."""
    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300  # keeper apart
    session = create_session(owner=owner)
    run, queries = _counted_run(session, owner, "say hi")
    assert run.status == "completed" and run.input_message_id is not None
    session_reads = [q for q in queries if q.startswith('SELECT "sessions_app_session"."id"')]
    assert len(session_reads) == 2, "the session row: locked at the start and at the end"
    session_writes = [q for q in queries if q.startswith('UPDATE "sessions_app_session"')]
    assert len(session_writes) == 3, "claimed, its head at the input, head and idle at the end"
    assert not [q for q in queries if "DECLARE" in q or "FETCH" in q]
    assert len(queries) <= 20, "\n".join(queries)
    session.refresh_from_db()
    answer = Message.objects.get(run_id=run.id, role="assistant")
    assert session.head_id == answer.id and session.busy_run_id is None
    assert session.status == "idle" and session.usage, "the head, the release and the usage"


def test_a_second_run_compiles_no_update_of_its_run(owner, settings):
    """A run's writes of its own row (begin, its input mark at the start, the end) are
    compiled once per process: the input mark went through the ORM, compiled at every start
    (about a third of a millisecond of the worker each time)."""
    from django.db.models.sql.compiler import SQLUpdateCompiler

    from .test_compiled import compiled_models

    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300  # keeper apart
    session = create_session(owner=owner)
    _counted_run(session, owner, "say hi")
    wait_idle(session.id)
    with compiled_models(SQLUpdateCompiler) as seen:
        run, _ = _counted_run(session, owner, "say again")
    assert run.status == "completed"
    assert run.input_message_id == Message.objects.get(run_id=run.id, role="user").id
    assert Run not in seen, seen


@pytest.mark.parametrize(
    ("mode", "written_mid_batch", "recorded_mid_batch"),
    [("runs", 0, 0), ("tool-batch", 0, 2), ("tool", 1, 2)],
)
def test_checkpoint_modes_decide_when_tool_rows_are_written(
    api, mode, written_mid_batch, recorded_mid_batch, waiting
):
    sid = api.post("/api/sessions/", {"checkpoint": mode}, format="json").json()["id"]
    run = prompt(api, sid, "write a.txt x\nwait 1").json()
    assert waiting.wait(10), "the write is done, the wait is running: mid-batch"
    completed = Part.objects.filter(
        message__run_id=run["id"], type="tool", state__status="completed"
    ).count()
    assert completed == written_mid_batch
    recorded = Part.objects.filter(message__run_id=run["id"], type="tool").count()
    assert recorded == recorded_mid_batch, "a batch is on record before it runs"
    wait_idle(sid)
    parts = Part.objects.filter(message__run_id=run["id"], type="tool")
    assert sorted(p.state["status"] for p in parts) == ["completed", "completed"]
    assert Run.objects.get(id=run["id"]).checkpoint == mode


def test_mode_runs_writes_the_run_once_at_its_end(owner, settings):
    settings.RUN_LEASE_SECONDS = settings.RUN_ABORT_POLL_SECONDS = 300  # keeper apart
    counts = {}
    for mode in ("runs", "tool-batch"):
        session = create_session(owner=owner, checkpoint=mode)
        _, queries = _counted_run(session, owner, "write a.txt x\nsay between\nappend a.txt y")
        inserts = [sql for sql in queries if sql.startswith('INSERT INTO "sessions_app_part"')]
        counts[mode] = len(inserts)
        assert Part.objects.filter(session=session, type="tool").count() == 2
    # The user's message at start-up, then one write of everything at the end.
    assert counts["runs"] == 2
    assert counts["tool-batch"] > counts["runs"]


def test_the_stream_endpoint_refuses_an_output_schema(api):
    sid = new_session(api)
    response = api.post(
        f"/api/sessions/{sid}/runs/stream/",
        {"messages": [{"role": "user", "content": "json {}"}], "output_schema": {"type": "object"}},
        format="json",
    )
    assert response.status_code == 400
    assert response.json()["error"] == {
        "type": "ValidationError",
        "message": "output_schema is not supported on the streaming endpoint.",
    }
    assert not Run.objects.filter(session_id=sid).exists()


def test_a_run_ended_by_a_lost_connection_leaves_no_call_pending(api, monkeypatch):
    """Found by the database-fault test under load: the connection went as the batch's calls
    were put on record (pending), the run ended in an error, and its end stored the call
    pending — in a finished run, inside a message completed with the error. It ends with
    that message now, interrupted (never run: a resume does not run it either)."""
    from django.db import OperationalError

    from runs_app.checkpoint import Checkpointer
    from tests.conftest import run_turn

    sid = new_session(api)
    original = Checkpointer.flush
    failed: list[bool] = []

    def flush(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        if not failed and any(p.type == Part.Type.TOOL for p in self._new_parts):  # noqa: SLF001
            failed.append(True)
            raise OperationalError("terminating connection due to administrator command")
        return original(self, *args, **kwargs)

    monkeypatch.setattr(Checkpointer, "flush", flush)
    run = run_turn(api, sid, "say hi\nappend log.txt y", status="error")
    assert failed and run["error"]["type"] == "DatabaseError"
    call = Part.objects.get(session_id=sid, type=Part.Type.TOOL)
    assert call.state["status"] == "error", call.state
    assert call.state["metadata"] == {"interrupted": True, "reason": "error"}
    assert not (Session.objects.get(id=sid).worktree / "log.txt").exists()
