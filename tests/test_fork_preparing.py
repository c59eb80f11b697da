"""A fork whose files are still being made (issue 45's fork job on another host) refuses a run
and an apply as a clone does, and says what is happening: it is being prepared, not cloned."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import Part, Session
from tests.conftest import new_session, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def _fork(api, sid: str) -> str:  # noqa: ANN001
    answer = api.post(f"/api/sessions/{sid}/fork/", {}, format="json")
    assert answer.status_code == 201, answer.json()
    return answer.json()["id"]


def test_a_fork_being_prepared_says_so_to_a_run_and_an_apply(api):
    sid = new_session(api)
    turn = run_turn(api, sid, "write a.txt one")
    fork = _fork(api, sid)
    # As the fork job leaves it while it makes the fork's files on its host.
    Session.objects.filter(id=fork).update(
        status=Session.Status.PREPARING,
        busy_run_id="fork-job",
        lease_expires_at=timezone.now() + timedelta(minutes=5),
    )
    run = api.post(
        f"/api/sessions/{fork}/runs/",
        {"messages": [{"role": "user", "content": "hi"}], "multitask_strategy": "enqueue"},
        format="json",
    )
    assert run.status_code == 409, run.json()
    assert run.json()["error"]["message"] == "The session's repository is still being prepared."

    # The job's lease lapsed while it still works: an apply meets the preparing status.
    Session.objects.filter(id=fork).update(lease_expires_at=timezone.now() - timedelta(seconds=1))
    step = Part.objects.filter(message__run_id=turn["id"], type="tool").first()
    applied = api.post(f"/api/sessions/{fork}/apply/", {"part_id": step.id}, format="json")
    assert applied.status_code == 409, applied.json()
    assert applied.json()["error"]["message"] == (
        "The session's repository is still being prepared."
    )
