"""docs/semantics.md §4: rollback N user turns; nothing deleted; head can switch back."""

from __future__ import annotations

import pytest

from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path
from tests.conftest import run_turn, runs_idle, wait_until

pytestmark = pytest.mark.django_db(transaction=True)


def users_on_path(sid):
    return [
        "".join(p.text for p in m.loaded_parts if p.type == "text")
        for m in active_path(Session.objects.get(id=sid))
        if m.role == "user"
    ]


def rollback(api, sid, n):
    return api.post(f"/api/sessions/{sid}/rollback/", {"num_turns": n}, format="json")


@pytest.fixture
def sid(api):
    sid = api.post("/api/sessions/", {"title": "kept"}, format="json").json()["id"]
    for text in ("write a.txt 1", "say two", "write b.txt 3"):
        run_turn(api, sid, text)
    return sid


def test_rollbacks_accumulate_and_delete_nothing(api, sid):
    count = Message.objects.filter(session_id=sid).count()
    worktree = Session.objects.get(id=sid).worktree
    assert rollback(api, sid, 1).status_code == 200
    assert users_on_path(sid) == ["write a.txt 1", "say two"]
    body = rollback(api, sid, 1).json()
    assert users_on_path(sid) == ["write a.txt 1"]
    assert body["context_tokens"] > 0
    assert Message.objects.filter(session_id=sid).count() == count, "nothing is deleted"
    assert (worktree / "b.txt").read_text() == "3", "files are not touched"
    markers = HistoryEvent.objects.filter(session_id=sid, kind="rollback")
    assert [e.data["num_turns"] for e in markers] == [1, 1]


def test_more_turns_than_exist_leave_an_empty_conversation(api, sid):
    body = rollback(api, sid, 10).json()
    assert body["head_message_id"] is None and body["title"] == "kept"
    assert users_on_path(sid) == [] and body["context_tokens"] == 0


def test_a_rolled_back_branch_is_reachable_again(api, sid):
    head = Session.objects.get(id=sid).head_id
    rollback(api, sid, 2)
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    switched = api.post(f"/api/sessions/{sid}/head/", {"message_id": second.id}, format="json")
    assert switched.json()["head_message_id"] == head
    assert users_on_path(sid) == ["write a.txt 1", "say two", "write b.txt 3"]


def test_a_prompt_after_a_rollback_starts_a_branch(api, sid):
    rollback(api, sid, 1)
    run_turn(api, sid, "say instead")
    assert users_on_path(sid) == ["write a.txt 1", "say two", "say instead"]
    third = Message.objects.filter(session_id=sid, role="user").order_by("id")[2]
    new = Message.objects.filter(session_id=sid, role="user").order_by("id")[3]
    assert third.parent_id == new.parent_id, "siblings under the same message"


def test_only_user_turns_count(api, sid):
    # A maintenance assistant message at the end belongs to the turn it follows.
    session = Session.objects.get(id=sid)
    extra = Message.objects.create(session=session, role="assistant", parent=session.head)
    Part.objects.create(message=extra, session=session, type="text", text="note")
    Session.objects.filter(id=sid).update(head=extra)
    rollback(api, sid, 1)
    assert users_on_path(sid) == ["write a.txt 1", "say two"]


def test_bad_num_turns_busy_and_pending_revert(api, sid):
    for bad in (0, -1, "two", None, True):
        response = rollback(api, sid, bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["message"] == "num_turns must be an integer of at least 1."
    first_user = Message.objects.filter(session_id=sid, role="user").order_by("id")[0]
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": first_user.id}, format="json")
    conflict = rollback(api, sid, 1)
    assert conflict.status_code == 409 and conflict.json()["error"]["type"] == "ConflictError"
    api.post(f"/api/sessions/{sid}/unrevert/")
    api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "wait 1"}]},
        format="json",
    )
    busy = rollback(api, sid, 1)
    assert busy.status_code == 409 and busy.json()["error"]["type"] == "SessionBusyError"
    wait_until(lambda: runs_idle(sid), what="the run's end")


def test_an_outsider_cannot_roll_back(outsider_api, sid):
    assert rollback(outsider_api, sid, 1).status_code == 404


def test_head_switch_goes_to_the_newest_leaf_under_a_message(api, sid):
    rollback(api, sid, 1)
    run_turn(api, sid, "say instead")
    newest = Session.objects.get(id=sid).head_id
    old_branch = Message.objects.filter(session_id=sid, role="user").order_by("id")[2]
    api.post(f"/api/sessions/{sid}/head/", {"message_id": old_branch.id}, format="json")
    assert users_on_path(sid) == ["write a.txt 1", "say two", "write b.txt 3"]
    first = Message.objects.filter(session_id=sid, role="user").order_by("id")[0]
    switched = api.post(f"/api/sessions/{sid}/head/", {"message_id": first.id}, format="json")
    assert switched.json()["head_message_id"] == newest
