"""docs/semantics.md §16.5: a host lost mid-step. Its session's run is taken over on another
host, whose claim materialises the worktree from the central store (the tests' https git
server) as of the last replicated step; the calls of the open step that had completed on the
lost host (a write) changed files that no snapshot holds, so recovery makes them errors that
say so; the calls that change no file (a read) stay completed. Simulated in one process: the
rows alpha left, its disk deleted, the run claimed on beta by the in-process executor."""

from __future__ import annotations

import shutil
import threading
from datetime import timedelta

import pytest
from django.utils import timezone

from runs_app import lifecycle
from runs_app.execution import host as run_host
from runs_app.execution import unfinished
from runs_app.execution.control import RunControl
from runs_app.execution.fencing import LeaseLost
from runs_app.execution.host import run_agent
from runs_app.execution.loop import recovery
from runs_app.execution.loop.context import RunContext
from runs_app.models import Run
from runs_app.services.runs import start_run
from runs_app.transcript import model_messages
from sessions_app import rehome
from sessions_app.models import Host, Message, Part, Session
from sessions_app.selectors import active_path
from workspace import replication, snapshots

from .conftest import run_turn
from .support.git_server import GitServer, git_server_fixture, reachable_server_fixture  # noqa: F401
from .test_replication import _worktree_files, central  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "write b.txt B1\nread a.txt\nsay next\nwrite c.txt C1"
LOST = (
    "Lost with host alpha before its change was replicated: the files are as of the last"
    " replicated step; run it again if it is still needed."
)


def _alpha_dies_mid_step(
    api,  # noqa: ANN001
    owner,  # noqa: ANN001
    sid: str,
    settings,  # noqa: ANN001
    *,
    replicated: bool = True,
) -> tuple[Run, str]:
    """On host alpha: a first turn (a.txt; replicated unless not ``replicated``: its push
    fails), then a run whose first step's write completed (b.txt written, its part stored
    completed) and its read too, when alpha is lost before the step's snapshot: what its
    checkpoints left. The run, and the snapshot its open step began at."""
    settings.WORKER_HOST = "alpha"
    Host.objects.create(name="alpha", last_heartbeat=timezone.now(), started_at=timezone.now())
    remote = settings.SNAPSHOT_REMOTE
    if not replicated:
        settings.SNAPSHOT_REMOTE = remote.replace("/central", "/nowhere")
    run_turn(api, sid, "write a.txt A1")
    settings.SNAPSHOT_REMOTE = remote
    session = Session.objects.get(id=sid)
    assert session.host == "alpha"
    before = Part.objects.filter(session_id=sid, type="step-finish").order_by("-id")[0]
    before = before.data["snapshot"]
    assert (session.replicated_snapshot == before) is replicated
    assert _worktree_files(sid) == {"a.txt": b"A1"}
    run = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": SCRIPT}],
        defer_enqueue=True,
    )
    assert lifecycle.begin(run.id).run is not None  # alpha runs it, under epoch 1
    user = Message.objects.create(
        session=session,
        run_id=run.id,
        role="user",
        parent_id=session.head_id,
        completed_at=timezone.now(),
    )
    Part.objects.create(message=user, session=session, order=0, type="text", text=SCRIPT)
    Run.objects.filter(id=run.id).update(input_message_id=user.id)
    step = Message.objects.create(session=session, run_id=run.id, role="assistant", parent=user)
    Part.objects.create(
        message=step,
        session=session,
        order=0,
        type="step-start",
        data={"snapshot": before, "step": 0},
    )
    calls = [
        ("write", {"path": "b.txt", "content": "B1"}, "Wrote b.txt"),
        ("read", {"path": "a.txt"}, "A1"),
    ]
    for i, (tool, args, output) in enumerate(calls):
        state = {"status": "completed", "input": args, "output": output, "metadata": {}}
        Part.objects.create(
            message=step,
            session=session,
            order=i + 1,
            type="tool",
            call_id=f"call_0_{i}",
            tool=tool,
            state=state,
        )
    (session.worktree / "b.txt").write_text("B1")  # on alpha's disk only
    Session.objects.filter(id=sid).update(
        head=step, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return Run.objects.get(id=run.id), before


def _alpha_is_lost(sid: str, settings) -> None:  # noqa: ANN001
    """Alpha's processes are gone (its beat stale) and so is its disk; beta claims."""
    Host.objects.filter(name="alpha").update(
        last_heartbeat=timezone.now() - timedelta(seconds=settings.RUN_LEASE_SECONDS * 3)
    )
    session = Session.objects.get(id=sid)
    shutil.rmtree(session.worktree)
    shutil.rmtree(session.snapshot_dir)
    shutil.rmtree(snapshots.store_path())
    settings.WORKER_HOST = "beta"


def _tools(run: Run) -> list[tuple[str, str, str | None]]:
    parts = Part.objects.filter(message__run_id=run.id, type="tool").order_by("message_id", "order")
    return [(p.tool, p.state["status"], p.state.get("error")) for p in parts]


def test_a_call_completed_on_a_lost_host_is_an_error_and_the_run_goes_on(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    run, replicated = _alpha_dies_mid_step(api, owner, sid, settings)
    _alpha_is_lost(sid, settings)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    session = Session.objects.get(id=sid)
    assert session.host == "beta"
    # The write's change was on alpha's disk only: it says so; the read stays as it was.
    assert _tools(run) == [
        ("write", "error", LOST),
        ("read", "completed", None),
        ("write", "completed", None),  # the script's next step, run on beta
    ]
    lost = Part.objects.get(message__run_id=run.id, tool="write", call_id="call_0_0")
    assert lost.state["metadata"]["lost_with_host"] == "alpha"
    assert lost.state["output"] == "Wrote b.txt"  # what it said then, kept beside the error
    assert _worktree_files(sid) == {"a.txt": b"A1", "c.txt": b"C1"}
    # The open step closed, interrupted, on the materialised files: no change of its own.
    step = lost.message
    finish = Part.objects.get(message=step, type="step-finish")
    assert finish.data["snapshot"] == replicated and finish.data.get("interrupted")
    assert not Part.objects.filter(message=step, type="patch").exists()
    # The model read it on its next step.
    results = [m["content"] for m in model_messages(active_path(session)) if m["role"] == "tool"]
    assert any(LOST in r for r in results)
    assert central.read_tree("central", replication.ref(sid)) == _worktree_files(sid)


def test_a_claim_whose_worker_died_leaves_the_loss_to_the_next_one(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    """A worker of beta materialised the files and died before the recovery said what was
    lost: the next worker of beta finds the files here (no materialisation), and still says
    it, from beta's note; once said, the note is gone."""
    run, _ = _alpha_dies_mid_step(api, owner, sid, settings)
    _alpha_is_lost(sid, settings)
    session = Session.objects.get(id=sid)
    assert run_host._claim(session) is not None  # its worker dies here
    assert not rehome.lacks_files(Session.objects.get(id=sid))
    run_agent(run.id)
    assert _tools(run)[0] == ("write", "error", LOST)
    assert rehome.lost_mark(session) is None


def test_a_run_ended_as_crashed_on_the_new_host_says_what_was_lost(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    """The run had crashed at every attempt it was allowed: the host that takes it over ends
    it (``lifecycle.end_abandoned``) instead of running it, on files it first makes from the
    store, and the write whose change was on the lost host's disk says so (found by the
    two-host chaos test: it stayed "completed" there, its file absent)."""
    run, replicated = _alpha_dies_mid_step(api, owner, sid, settings)
    Run.objects.filter(id=run.id).update(attempts=settings.RUN_MAX_ATTEMPTS)
    _alpha_is_lost(sid, settings)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "error" and run.error["type"] == "RunCrashed", run.error
    assert _tools(run) == [("write", "error", LOST), ("read", "completed", None)]
    step = Part.objects.get(message__run_id=run.id, call_id="call_0_0").message
    finish = Part.objects.get(message=step, type="step-finish")
    assert finish.data["snapshot"] == replicated and finish.data.get("interrupted")
    assert not Part.objects.filter(message=step, type="patch").exists()
    session = Session.objects.get(id=sid)
    assert session.host == "beta" and _worktree_files(sid) == {"a.txt": b"A1"}
    assert rehome.lost_mark(session) is None


@pytest.mark.parametrize("store", [True, False], ids=["central-store", "shared-volume"])
def test_an_idle_session_moved_off_a_dead_host_says_what_was_lost_at_once(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
    store,
):
    """Its run had ended (in error) before its step's snapshot reached the store, then its
    host died: the sweep that moves the session says which calls were lost, without waiting
    for a next run that may never come (found by the two-host chaos test). On a shared
    volume nothing was lost and nothing is said."""
    run, _ = _alpha_dies_mid_step(api, owner, sid, settings)
    Run.objects.filter(id=run.id).update(status="error")
    Session.objects.filter(id=sid).update(busy_run_id=None, lease_expires_at=None)
    _alpha_is_lost(sid, settings)
    Host.objects.create(name="beta", last_heartbeat=timezone.now(), started_at=timezone.now())
    if not store:
        settings.SNAPSHOT_REMOTE = ""
    moved = rehome.sweep_dead()
    assert moved == [(sid, "alpha", "beta")]
    assert unfinished.lose_moved(moved) == (1 if store else 0)
    expected = ("write", "error", LOST) if store else ("write", "completed", None)
    assert _tools(run) == [expected, ("read", "completed", None)]


def test_a_pending_revert_is_not_a_loss(api, owner, sid, central, settings):  # noqa: F811
    """The calls after a pending revert's boundary are out of the files by the revert (which
    replicated them), not lost: the sweep that moves the session says nothing of them."""
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write b.txt two")
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    assert (
        api.post(
            f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json"
        ).status_code
        == 200
    )
    Host.objects.create(
        name="dead", last_heartbeat=timezone.now() - timedelta(hours=1), started_at=timezone.now()
    )
    Host.objects.create(name="beta", last_heartbeat=timezone.now(), started_at=timezone.now())
    Session.objects.filter(id=sid).update(host="dead")
    moved = rehome.sweep_dead()
    assert moved == [(sid, "dead", "beta")]
    assert unfinished.lose_moved(moved) == 0
    statuses = [p.state["status"] for p in Part.objects.filter(session_id=sid, type="tool")]
    assert statuses == ["completed", "completed"]


def test_a_session_never_replicated_loses_every_change_with_its_host(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    """No push reached the store: the claim finds nothing to materialise and the files on
    beta are none; every completed change of the path is said lost, its reads are kept."""
    run, _ = _alpha_dies_mid_step(api, owner, sid, settings, replicated=False)
    first = Message.objects.filter(session_id=sid, role="assistant").order_by("id")[0]
    _alpha_is_lost(sid, settings)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    assert _tools(run) == [
        ("write", "error", LOST),
        ("read", "completed", None),
        ("write", "completed", None),
    ]
    assert [p.state["status"] for p in Part.objects.filter(message=first, type="tool")] == ["error"]
    assert _worktree_files(sid) == {"c.txt": b"C1"}


def test_a_stale_workers_rewrite_is_refused(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    """The rewrite is a write of the run like any other: an execution whose epoch another
    has passed (the sweep took the run over) writes nothing."""
    run, replicated = _alpha_dies_mid_step(api, owner, sid, settings)
    _alpha_is_lost(sid, settings)
    taken = lifecycle.begin(run.id).run  # another execution, under a new epoch
    assert taken is not None and taken.lease_epoch == run.lease_epoch + 1
    stale = RunContext.of(
        run,
        host=None,  # type: ignore[arg-type]
        control=RunControl(run.id, sid, threading.Event(), epoch=run.lease_epoch),
        texts=None,  # type: ignore[arg-type]
        materialized=(replicated, "alpha"),
    )
    stale.history = active_path(Session.objects.get(id=sid))
    recovery.lose_unreplicated(stale)
    with pytest.raises(LeaseLost):
        stale.writer.flush()
    assert _tools(run) == [("write", "completed", None), ("read", "completed", None)]


def test_nothing_is_rewritten_when_the_files_are_this_hosts_own(
    api,
    owner,
    sid,
    central,  # noqa: F811
    settings,
):
    """Alpha's worker died, alpha did not (its disk is there): the run resumes on alpha with
    the files its tools left, and the write stays completed."""
    run, _ = _alpha_dies_mid_step(api, owner, sid, settings)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "completed", run.error
    assert _tools(run) == [
        ("write", "completed", None),
        ("read", "completed", None),
        ("write", "completed", None),
    ]
    assert _worktree_files(sid) == {"a.txt": b"A1", "b.txt": b"B1", "c.txt": b"C1"}


def test_lost_calls_are_those_after_the_materialised_snapshot():
    """A step closed with a snapshot that never reached the store (its push failed) is lost
    too; the calls before the boundary with the materialised snapshot are kept; without that
    boundary on the path, only a step left open."""

    def message(*parts: Part) -> Message:
        m = Message(role="assistant")
        m.loaded_parts = list(parts)
        return m

    def boundary(kind: str, tree: str) -> Part:
        return Part(type=kind, data={"snapshot": tree})

    def call(tool: str, status: str = "completed") -> Part:
        return Part(type="tool", tool=tool, state={"status": status})

    kept, closed, open_ = call("write"), call("append"), call("delete")
    history = [
        message(boundary("step-start", "t0"), kept, boundary("step-finish", "t1")),
        message(boundary("step-start", "t1"), closed, call("read"), boundary("step-finish", "t2")),
        message(boundary("step-start", "t2"), call("list"), open_, call("shell", "error")),
    ]
    assert unfinished.lost_calls(history, "t1") == [open_, closed]
    assert unfinished.lost_calls(history, "t2") == [open_]
    assert unfinished.lost_calls(history, "elsewhere") == [open_]
    assert unfinished.lost_calls(history[:2], "elsewhere") == []
