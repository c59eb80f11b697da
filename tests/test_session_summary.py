"""A session's ``summary`` is the totals of its Changes (``GET …/diff/``) after every move that
changes its files or its active path; the admin shows the same numbers (issue 17, item 4b).

It used to count from elsewhere: a run's from that run's start, a revert's from the revert,
zeros after unrevert, cleanup and fork — so the admin said 0 files where the panel listed 2."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client

from sessions_app.models import Message
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

TWO_FILES = "say writing\nwrite a.txt one\nwrite b.txt two"


def agrees(api, sid: str) -> dict[str, int]:
    """The session's summary, asserted equal to the totals of its Changes listing."""
    diff = api.get(f"/api/sessions/{sid}/diff/").json()
    summary = api.get(f"/api/sessions/{sid}/").json()["summary"]
    assert summary == {
        "files": len(diff),
        "additions": sum(d["additions"] for d in diff),
        "deletions": sum(d["deletions"] for d in diff),
    }, diff
    return summary


def user_messages(sid: str) -> list[Message]:
    return list(Message.objects.filter(session_id=sid, role="user").order_by("id"))


def test_it_counts_every_turn_not_only_the_last(api, sid):
    run_turn(api, sid, TWO_FILES)
    assert agrees(api, sid)["files"] == 2
    run_turn(api, sid, "append a.txt more")
    assert agrees(api, sid) == {"files": 2, "additions": 2, "deletions": 0}
    run_turn(api, sid, "say nothing written")
    assert agrees(api, sid)["files"] == 2


def test_revert_unrevert_and_cleanup_keep_it_equal_to_the_changes(api, sid):
    run_turn(api, sid, TWO_FILES)
    run_turn(api, sid, "write c.txt three")
    second = user_messages(sid)[1]
    reverted = api.post(f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json")
    assert reverted.json()["revert"]["changes"][0]["file"] == "c.txt"
    assert agrees(api, sid)["files"] == 2
    api.post(f"/api/sessions/{sid}/unrevert/")
    assert agrees(api, sid)["files"] == 3
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json")
    api.post(f"/api/sessions/{sid}/cleanup/")
    assert agrees(api, sid)["files"] == 2


def test_rollback_head_switch_and_continue_keep_it_equal_to_the_changes(api, sid):
    first = run_turn(api, sid, TWO_FILES)
    run_turn(api, sid, "write c.txt three")
    api.post(f"/api/sessions/{sid}/rollback/", {"num_turns": 2}, format="json")
    assert agrees(api, sid)["files"] == 0
    api.post(f"/api/sessions/{sid}/head/", {"message_id": user_messages(sid)[1].id}, format="json")
    assert agrees(api, sid)["files"] == 3
    branch = api.post(
        f"/api/runs/{first['id']}/continue/", {"input": "say again", "wait": True}, format="json"
    )
    assert branch.json()["status"] == "completed"
    assert agrees(api, sid)["files"] == 2


def test_a_fork_and_a_share_fork_start_with_the_changes_they_copied(api, sid, outsider):
    run_turn(api, sid, TWO_FILES)
    fork_id = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()["id"]
    assert agrees(api, fork_id)["files"] == 2
    token = api.post(f"/api/sessions/{sid}/share/").json()["token"]
    theirs = client_for(outsider)
    shared_fork = theirs.post(f"/api/shared/{token}/fork/").json()["id"]
    assert agrees(theirs, shared_fork)["files"] == 2


def test_the_admin_shows_the_numbers_of_the_changes_panel(api, sid, owner):
    run_turn(api, sid, TWO_FILES)
    run_turn(api, sid, "append a.txt more")
    agrees(api, sid)
    admin = Client()
    admin.force_login(User.objects.create_superuser("root", password="pw"))
    page = admin.get(f"/admin/sessions_app/session/{sid}/change/").content.decode()
    assert "2 files, +2 −0" in page
