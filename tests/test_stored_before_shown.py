"""Stored before shown (issue 25): an event that describes a row — a message, a part, a tool
call's result — is published only once that row is stored, so no browser is ever shown what
a reload (or a worker crash) would take back. Text and tool-output deltas, and a tool's
``running`` state, may go first; with ``checkpoint=runs`` (rows stored at the end only) the
events go at once marked ``"stored": false``.

On the code before this, every event left when the loop made it, rows still buffered."""

from __future__ import annotations

import concurrent.futures

import pytest
from django.db import connection

from realtime import events
from runs_app.execution.host import run_agent
from runs_app.services.runs import start_run
from sessions_app.models import Message, Part
from sessions_app.services.sessions import create_session

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def published(monkeypatch):
    """Each event as it is published, with what the database held at that moment (read on a
    thread of its own: the loop's thread may not run the ORM)."""
    seen: list[dict] = []
    reader = concurrent.futures.ThreadPoolExecutor(1)
    original = events.publisher.publish

    def stored(type: str, payload: dict) -> object:
        try:
            if type == events.MESSAGE_UPDATED:
                message = payload["message"]
                row = Message.objects.filter(id=message["id"]).first()
                # Stored, and finished if the event says so (the row may be newer: an
                # event held for a checkpoint goes out after it, with what it said then).
                return row is not None and not (
                    message.get("completed_at") and row.completed_at is None
                )
            if type == events.PART_UPDATED:
                part = payload["part"]
                row = Part.objects.filter(id=part["id"]).first()
                if row is None:
                    return False
                if part.get("type") == "tool":
                    return (row.state or {}).get("status") == (part.get("state") or {}).get(
                        "status"
                    )
                return True
            return None
        finally:
            connection.close()

    def spy(session_id: str, type: str, payload: dict) -> None:
        seen.append(
            {
                "type": type,
                "payload": payload,
                "stored": reader.submit(stored, type, payload).result(),
            }
        )
        original(session_id, type, payload)

    monkeypatch.setattr(events.publisher, "publish", spy)
    yield seen
    reader.shutdown()


def _run(owner, checkpoint: str = "") -> None:
    run = start_run(
        session=create_session(owner=owner),
        user=owner,
        messages=[{"role": "user", "content": "say first\nwrite a.txt one\nappend a.txt two"}],
        checkpoint=checkpoint,
        defer_enqueue=True,
    )
    run_agent(run.id)
    run.refresh_from_db()
    assert run.status == "completed"


def test_an_event_about_a_row_leaves_once_the_row_is_stored(owner, published):
    _run(owner)
    described = [e for e in published if e["stored"] is not None]
    assert len(described) >= 6
    early = []
    for event in described:
        part = event["payload"].get("part") or {}
        running = part.get("type") == "tool" and part["state"]["status"] == "running"
        if not event["stored"] and not running:
            early.append((event["type"], part.get("type"), (part.get("state") or {}).get("status")))
    assert not early, f"shown before stored: {early}"
    results = [
        e
        for e in described
        if (e["payload"].get("part") or {}).get("type") == "tool"
        and e["payload"]["part"]["state"]["status"] == "completed"
    ]
    assert len(results) == 2 and all(e["stored"] for e in results)


def test_with_checkpoint_runs_the_events_say_they_are_not_stored_yet(owner, published):
    _run(owner, checkpoint="runs")
    unstored = [e for e in published if e["stored"] is False]
    assert unstored, "checkpoint=runs stores at the end: events go before their rows"
    for event in unstored:
        part = event["payload"].get("part") or {}
        if part.get("type") == "tool" and part["state"]["status"] == "running":
            continue
        assert event["payload"].get("stored") is False, event["type"]
