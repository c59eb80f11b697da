"""Issue 25, point 3: a ``wait: true`` request (and a stream) waits for its run on the
server's loop, holding no thread and no database connection; at most
``RUN_WAITS_PER_USER_MAX`` waits per user (429 ``TooManyWaits``, the slot always given
back). Through the real stack with 200 waits: tests/e2e/test_waits.py."""

from __future__ import annotations

import threading
import time

import pytest
from asgiref.sync import async_to_sync, iscoroutinefunction
from django.conf import settings as django_settings
from django.db.backends.signals import connection_created
from django.urls import resolve
from django.utils.module_loading import import_string

from runs_app import waits
from runs_app.models import Run
from tests.conftest import client_for, new_session, runs_idle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)

# Threads of the in-process run host (its own connections, kept on purpose) and the test's.
HOST_THREADS = ("run-db", "run-tool", "run-host", "lease-renewer", "MainThread")


def prompt(api, sid, script, **extra):
    body = {"messages": [{"role": "user", "content": script}], **extra}
    return api.post(f"/api/sessions/{sid}/runs/", body, format="json")


def test_the_run_routes_are_coroutines_and_no_middleware_puts_them_on_a_thread(api, sid):
    for path in (
        f"/api/sessions/{sid}/runs/",
        f"/api/sessions/{sid}/runs/stream/",
        "/api/runs/run_x/continue/",
        "/api/runs/run_x/regenerate/",
    ):
        view = resolve(path).func
        assert iscoroutinefunction(view), path
        assert view.csrf_exempt and view.cls  # DRF's attributes, for CSRF and the schema
    # One middleware that is only synchronous makes Django run the whole request on a thread.
    sync_only = [
        m
        for m in django_settings.MIDDLEWARE
        if not getattr(import_string(m), "async_capable", False)
    ]
    assert sync_only == []


def test_a_wait_answers_the_finished_run_and_gives_its_slot_back(api, owner, sid):
    response = prompt(api, sid, "say hello", wait=True)
    assert response.status_code == 200
    run = response.json()
    assert run["status"] == "completed" and run["finished_at"]
    assert waits.held(owner.pk) == 0


def test_a_wait_answers_a_run_that_stops_for_an_approval(api, owner):
    sid = new_session(api, permissions={"write": "ask"})
    run = prompt(api, sid, "write a.txt x", wait=True).json()
    assert run["status"] == "requires_action"
    assert run["required_action"]["tool_calls"][0]["tool"] == "write"
    assert waits.held(owner.pk) == 0
    api.post(f"/api/runs/{run['id']}/cancel/")


def test_past_the_limit_a_wait_is_refused_with_429_and_starts_nothing(
    api, owner, outsider_api, sid, settings
):
    settings.RUN_WAITS_PER_USER_MAX = 2
    first = prompt(api, sid, "say first").json()  # no wait: not counted
    wait_until(lambda: runs_idle(sid), 20, "the first run")
    elsewhere = [waits.take_slot(owner.pk), waits.take_slot(owner.pk)]  # e.g. another process
    refused = {
        "error": {
            "type": "TooManyWaits",
            "message": (
                "You have 2 requests waiting for runs to end already, the most at once "
                "(RUN_WAITS_PER_USER_MAX). Wait for one to end, or start the run without "
                "wait and follow it (GET /api/runs/{id}/ or the session's events)."
            ),
        }
    }
    for url, body in (
        (f"/api/sessions/{sid}/runs/", {"messages": [{"role": "user", "content": "x"}]}),
        (f"/api/runs/{first['id']}/continue/", {"input": "say again"}),
        (f"/api/runs/{first['id']}/regenerate/", {}),
    ):
        response = api.post(url, {**body, "wait": True}, format="json")
        assert response.status_code == 429, url
        assert response.json() == refused
    assert Run.objects.filter(session_id=sid).count() == 1, "nothing admitted"
    assert prompt(api, sid, "say no wait").status_code == 202  # without wait: not limited
    wait_until(lambda: runs_idle(sid), 20, "that run")
    # Another user's waits are theirs.
    other = new_session(outsider_api)
    assert prompt(outsider_api, other, "say hi", wait=True).status_code == 200
    for slot in elsewhere:
        waits.give_back(slot)
    assert prompt(api, sid, "say now", wait=True).json()["status"] == "completed"
    assert waits.held(owner.pk) == 0


def test_a_wait_whose_run_is_refused_gives_its_slot_back(api, owner, sid):
    slow = prompt(api, sid, "wait 5\nsay done").json()
    response = prompt(api, sid, "say hi", wait=True)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "SessionBusyError"
    assert waits.held(owner.pk) == 0
    api.post(f"/api/runs/{slow['id']}/cancel/")


def test_a_wait_that_times_out_answers_the_run_as_it_is(api, sid, monkeypatch):
    monkeypatch.setattr(waits, "WAIT_SECONDS", 0.5)
    started = time.monotonic()
    response = prompt(api, sid, "wait 5\nsay done", wait=True)
    assert response.status_code == 200
    run = response.json()
    assert run["status"] in ("pending", "running")
    assert time.monotonic() - started < 4
    api.post(f"/api/runs/{run['id']}/cancel/")


def test_a_wait_whose_events_are_lost_ends_at_its_periodic_check(api, sid, settings, monkeypatch):
    settings.RUN_WAIT_RECHECK_SECONDS = 0.3
    monkeypatch.setattr(waits, "_about", lambda message, run_id: False)  # no event arrives
    started = time.monotonic()
    run = prompt(api, sid, "wait 1\nsay done", wait=True).json()
    assert run["status"] == "completed"
    assert time.monotonic() - started < 5


def test_a_run_that_ended_before_the_wait_subscribed_is_answered_at_once(api, sid):
    run = prompt(api, sid, "say quick", wait=True).json()
    started = time.monotonic()
    data = async_to_sync(waits.wait_for_run)(run["id"], sid)
    assert data["status"] == "completed" and data["id"] == run["id"]
    assert time.monotonic() - started < 2, "found by the read after subscribing, not at 5 s"


def test_waiting_requests_and_streams_hold_no_database_connection(owner):
    api = client_for(owner)
    sids = [new_session(api) for _ in range(6)]
    opened: dict[int, tuple[str, object, float]] = {}
    guard = threading.Lock()

    def record(sender, connection, **kwargs):  # noqa: ANN001, ANN202
        with guard:
            opened[id(connection)] = (threading.current_thread().name, connection, time.monotonic())

    answers: dict[str, object] = {}

    def wait(sid: str) -> None:
        answers[sid] = prompt(client_for(owner), sid, "wait 2\nsay done", wait=True).json()

    def stream(sid: str) -> None:
        response = client_for(owner).post(
            f"/api/sessions/{sid}/runs/stream/",
            {"messages": [{"role": "user", "content": "wait 2\nsay done"}]},
            format="json",
        )
        answers[sid] = b"".join(response)

    connection_created.connect(record)
    try:
        threads = [
            threading.Thread(target=wait if i < 4 else stream, args=(sid,), name=f"client-{i}")
            for i, sid in enumerate(sids)
        ]
        for t in threads:
            t.start()
        wait_until(
            lambda: Run.objects.filter(session_id__in=sids, status="running").count() == len(sids),
            20,
            "every run to be running",
        )
        for _ in range(6):  # over a second of the waits
            now = time.monotonic()
            with guard:
                held = sorted(
                    name
                    for name, conn, at in opened.values()
                    if conn.connection is not None
                    and now - at > 0.3  # a read of the moment takes milliseconds
                    and not name.startswith(HOST_THREADS)
                )
            assert held == [], f"connections held while waiting, by: {held}"
            time.sleep(0.2)  # scenario: samples spread over the waits (held throughout)
        for t in threads:
            t.join(30)
    finally:
        connection_created.disconnect(record)
    for sid in sids[:4]:
        assert answers[sid]["status"] == "completed"
    for sid in sids[4:]:
        assert b"event: run" in answers[sid] and b'"status": "completed"' in answers[sid]
