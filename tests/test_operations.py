"""Operations (issue 7): the health endpoint, structured logs with run and session ids, the
stale-lease recovery command."""

from __future__ import annotations

import io
import json
import logging
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from core.logs import ContextFilter, JsonFormatter, log_context
from runs_app.execution.loop import run as agent_loop
from runs_app.models import Run
from runs_app.services.runs import start_run, wait_for_run
from sessions_app.models import Session
from sessions_app.services.sessions import create_session
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def test_health_checks_the_database_redis_and_a_worker(settings, monkeypatch):
    from config.celery import app

    anonymous = client_for(None)
    body = anonymous.get("/api/health/").json()
    assert body["ok"] and body["checks"]["database"]["ok"] and body["checks"]["redis"]["ok"]
    settings.RUN_EXECUTOR = "celery"
    monkeypatch.setattr(app.control, "ping", lambda timeout: [])
    down = anonymous.get("/api/health/")
    assert down.status_code == 503 and not down.json()["checks"]["worker"]["ok"]
    monkeypatch.setattr(app.control, "ping", lambda timeout: [{"w1@host": {"ok": "pong"}}])
    assert anonymous.get("/api/health/").status_code == 200
    settings.REDIS_URL = "redis://127.0.0.1:1/0"  # nothing listens there
    broken = anonymous.get("/api/health/")
    assert broken.status_code == 503 and not broken.json()["checks"]["redis"]["ok"]


def test_log_records_carry_the_run_and_session(api, monkeypatch, caplog):
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    original = agent_loop.execute

    def execute(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        logging.getLogger("runs_app.execution.loop.run").warning("inside the loop")
        return original(*args, **kwargs)

    monkeypatch.setattr(agent_loop, "execute", execute)
    caplog.set_level(logging.WARNING, logger="runs_app.execution.loop.run")
    caplog.handler.addFilter(ContextFilter())
    run = run_turn(api, sid, "say hi")
    record = next(r for r in caplog.records if r.getMessage() == "inside the loop")
    assert (record.run_id, record.session_id) == (run["id"], sid)
    line = json.loads(JsonFormatter().format(record))
    assert line["run_id"] == run["id"] and line["session_id"] == sid
    assert line["message"] == "inside the loop" and line["level"] == "WARNING"
    outside = logging.LogRecord("x", logging.INFO, "f", 1, "plain", None, None)
    ContextFilter().filter(outside)
    assert outside.run_id is None
    with log_context(run_id="run_x", session_id="ses_x"):
        inside = logging.LogRecord("x", logging.INFO, "f", 1, "in", None, None)
        ContextFilter().filter(inside)
    assert inside.run_id == "run_x"


def test_recover_sessions_resumes_or_releases_expired_leases(owner, settings):
    expired = timezone.now() - timedelta(seconds=60)
    # A session held by a run that had finished: released.
    done = create_session(owner=owner, title="done")
    finished = Run.objects.create(session=done, status=Run.Status.COMPLETED)
    Session.objects.filter(id=done.id).update(
        busy_run_id=finished.id, status="busy", lease_expires_at=expired
    )
    # A session whose worker died mid-run: resumed.
    dead = create_session(owner=owner, title="dead")
    run = start_run(
        session=dead,
        user=owner,
        messages=[{"role": "user", "content": "say back"}],
        defer_enqueue=True,
    )
    Run.objects.filter(id=run.id).update(status=Run.Status.RUNNING)
    Session.objects.filter(id=dead.id).update(lease_expires_at=expired)
    out = io.StringIO()
    call_command("recover_sessions", "--dry-run", stdout=out)
    assert f"{done.id} {finished.id} release" in out.getvalue()
    assert f"{dead.id} {run.id} resume" in out.getvalue()
    assert Session.objects.get(id=done.id).status == "busy", "dry run changes nothing"
    call_command("recover_sessions", stdout=(out := io.StringIO()))
    assert "1 run(s) resumed, 1 lock(s) released" in out.getvalue()
    assert Session.objects.get(id=done.id).status == "idle"
    assert wait_for_run(Run.objects.get(id=run.id), timeout=30).status == "completed"
    assert Session.objects.get(id=dead.id).status == "idle"
