"""A session's ``updated_at`` is its version: the chat sets aside a ``session.updated`` older
than the session it holds (a late event, overtaken by a reply to its own request). So every
``session.updated`` carries the ``updated_at`` stored with what it says, and each one a run
publishes is newer than the one before.

On the code before this, a run's start published a time stamped in memory after the row's
(newer than stored), and its end (usage, idle) did not move ``updated_at`` at all: the chat
took the end of a one-step run for a late event and kept showing it busy, without its cost."""

from __future__ import annotations

import concurrent.futures
from datetime import datetime

import pytest
from django.db import connection

from realtime import events
from sessions_app.models import Session
from sessions_app.services.sessions import create_session, update_session
from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def versions(monkeypatch):
    """Each ``session.updated`` as published: its ``updated_at``, and the stored one."""
    seen: list[tuple[str, str]] = []
    reader = concurrent.futures.ThreadPoolExecutor(1)
    original = events.publisher.publish

    def stored(session_id: str) -> str:
        try:
            value = Session.objects.values_list("updated_at", flat=True).get(id=session_id)
            return value.isoformat()
        finally:
            connection.close()

    def spy(session_id: str, type: str, payload: dict) -> None:
        if type == events.SESSION_UPDATED:
            at = payload["session"]["updated_at"]
            seen.append((at, reader.submit(stored, session_id).result()))
        original(session_id, type, payload)

    monkeypatch.setattr(events.publisher, "publish", spy)
    yield seen
    reader.shutdown()


def _at(iso: str) -> datetime:
    return datetime.fromisoformat(iso.replace("Z", "+00:00"))


def test_each_session_a_run_publishes_is_the_stored_one_and_newer(api, versions):
    """A plain turn, then a regenerate (whose start moves the head and publishes it)."""
    sid = new_session(api)
    first = run_turn(api, sid, "write a.txt x\nsay done")
    response = api.post(f"/api/runs/{first['id']}/regenerate/", {"wait": True}, format="json")
    assert response.status_code == 200 and response.json()["status"] == "completed"
    assert len(versions) >= 3, versions  # each end (usage, idle); the regenerate's start
    for published, stored in versions[:-1]:
        # Written again since (by the run that went on): never newer than stored.
        assert _at(published) <= _at(stored), (published, stored)
    published, stored = versions[-1]
    assert _at(published) == _at(stored)
    stamps = [_at(published) for published, _ in versions]
    assert stamps == sorted(stamps) and len(set(stamps)) == len(stamps), stamps


def test_a_rename_is_a_new_version(owner, versions):
    session = create_session(owner=owner)
    before = Session.objects.get(id=session.id).updated_at
    update_session(session=session, title="Renamed")
    assert len(versions) == 1
    published, stored = versions[0]
    assert _at(published) == _at(stored) > before
