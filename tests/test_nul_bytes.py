"""Bytes the database cannot hold (NUL, lone surrogates) in what a tool or a model returns are
stored escaped and never crash a run; a run that crashes at every attempt ends in error
instead of being re-enqueued forever; a run whose worker is gone can always be cancelled
(docs/semantics.md §11.5; issue 14, finding 8). Runs on PostgreSQL, which refuses ``\\u0000`` in
jsonb.
"""

from __future__ import annotations

import shutil

import pytest
from django.db import DataError

from runs_app.checkpoint import Checkpointer, storable
from runs_app.execution.host import run_agent
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.models import Part, Session
from sessions_app.services.sessions import create_session
from tests.conftest import run_turn
from workspace import sandbox

pytestmark = pytest.mark.django_db(transaction=True)


def tool_parts(session_id: str) -> list[Part]:
    return list(Part.objects.filter(session_id=session_id, type="tool").order_by("id"))


def expire_lease(session_id: str) -> None:
    """What the clock does to the lease of a worker that died."""
    Session.objects.filter(id=session_id).update(lease_expires_at=None)


def test_storable_escapes_nul_and_lone_surrogates_at_any_depth():
    deep: list = ["a\x00b"]
    for _ in range(5000):
        deep = [deep]
    value = {"out\x00": "x\ud800y", "deep": deep, "clean": "ok"}
    assert storable(value) is value  # in place: what the run holds is what it stored
    assert value == {"out\\u0000": "x\\ud800y", "deep": deep, "clean": "ok"}
    inner = deep
    while isinstance(inner[0], list):
        inner = inner[0]
    assert inner == ["a\\u0000b"]
    assert storable("plain") == "plain"
    assert storable("\udcff") == "\\udcff"


def test_a_file_with_a_nul_byte_is_read_and_shown_escaped(api, sid):
    session = Session.objects.get(id=sid)
    session.worktree.mkdir(parents=True, exist_ok=True)
    (session.worktree / "f.txt").write_bytes(b"a\x00b")
    run = run_turn(api, sid, "read f.txt")
    [part] = tool_parts(sid)
    assert part.state["status"] == "completed"
    assert part.state["output"] == "a\\u0000b"
    assert api.get(f"/api/runs/{run['id']}/").json()["status"] == "completed"
    assert api.get(f"/api/sessions/{sid}/").json()["status"] == "idle"


@pytest.mark.skipif(shutil.which("bwrap") is None, reason="no sandbox (bubblewrap) here")
def test_shell_output_with_a_nul_byte_is_kept_escaped(api, sid, settings):
    settings.AGENT_ALLOW_SHELL = True
    settings.AGENT_SHELL_SANDBOX = "bwrap"
    if sandbox.unavailable_reason():
        pytest.skip(sandbox.unavailable_reason())
    run_turn(api, sid, 'shell printf "a\\000b"')
    [part] = tool_parts(sid)
    assert part.state["status"] == "completed", part.state
    assert "a\\u0000b" in part.state["output"]


def crash_every_write(monkeypatch) -> None:  # noqa: ANN001
    """Every checkpoint of the step fails as PostgreSQL failed on a NUL: the run's own end
    cannot be written either, so each execution dies with the run still ``running``."""

    def refused(self, *, durable: bool = True) -> None:
        raise DataError("unsupported Unicode escape sequence")

    monkeypatch.setattr(Checkpointer, "flush", refused)


def started_run(owner) -> Run:  # noqa: ANN001
    session = create_session(owner=owner)
    return start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "say hello"}],
        defer_enqueue=True,
    )


def test_a_run_that_crashes_at_every_attempt_ends_in_error_after_the_limit(
    owner, settings, monkeypatch
):
    settings.RUN_MAX_ATTEMPTS = 3
    crash_every_write(monkeypatch)
    run = started_run(owner)
    for attempt in range(1, 4):
        run_agent(run.id)
        run.refresh_from_db()
        assert run.status == Run.Status.RUNNING, "the execution died mid-run"
        assert run.attempts == attempt
        expire_lease(run.session_id)  # the sweeper would deliver it again now
    run_agent(run.id)  # the fourth delivery does not start it again
    run.refresh_from_db()
    assert run.status == Run.Status.ERROR
    assert run.error["type"] == "RunCrashed"
    assert "3 times in a row" in run.error["message"]
    session = Session.objects.get(id=run.session_id)
    assert session.busy_run_id is None and session.status == "idle"


def test_a_run_that_crashed_once_is_taken_over_as_before(owner, settings, monkeypatch):
    settings.RUN_MAX_ATTEMPTS = 3
    crash_every_write(monkeypatch)
    run = started_run(owner)
    run_agent(run.id)
    monkeypatch.undo()
    expire_lease(run.session_id)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error


def test_cancel_ends_a_run_whose_worker_is_gone_and_the_session_can_be_deleted(
    owner, api, monkeypatch
):
    crash_every_write(monkeypatch)
    run = started_run(owner)
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING
    expire_lease(run.session_id)
    assert api.post(f"/api/runs/{run.id}/cancel/").status_code == 202
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert api.get(f"/api/sessions/{run.session_id}/").json()["status"] == "idle"
    assert api.delete(f"/api/sessions/{run.session_id}/").status_code == 204


def test_abort_of_a_run_being_delivered_again_ends_it_at_the_next_delivery(owner, api, monkeypatch):
    crash_every_write(monkeypatch)
    run = started_run(owner)
    run_agent(run.id)
    # The dead execution's lease is still live: the abort is recorded, nothing runs to see it.
    response = api.post(f"/api/sessions/{run.session_id}/abort/")
    assert response.status_code in (200, 202), response.content
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING and run.abort_requested
    expire_lease(run.session_id)
    run_agent(run.id)  # the sweeper's re-delivery: it ends the run instead of running it
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
    assert api.delete(f"/api/sessions/{run.session_id}/").status_code == 204
