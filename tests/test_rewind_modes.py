"""docs/semantics.md §14.5, rewind modes of ``POST /api/sessions/{id}/revert/``: ``both``
(docs/semantics.md §3), ``conversation`` (the boundary moves, the files stay) and ``files`` (the
files go back, the conversation stays, a ``files-revert`` history event that ``unrevert``
undoes)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.utils import timezone

from realtime import events
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.services.revert_plan import plan_revert
from tests.conftest import run_turn

pytestmark = pytest.mark.django_db(transaction=True)


def files(root):
    return {
        p.relative_to(root).as_posix(): p.read_text()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def users(sid):
    return list(Message.objects.filter(session_id=sid, role="user").order_by("id"))


def revert(api, sid, message_id, **body):
    return api.post(
        f"/api/sessions/{sid}/revert/", {"message_id": message_id, **body}, format="json"
    )


def kinds(sid):
    return list(HistoryEvent.objects.filter(session_id=sid).values_list("kind", flat=True))


@pytest.fixture
def published(monkeypatch):
    seen: list[tuple[str, dict]] = []
    original = events.publisher.publish

    def spy(session_id: str, type: str, payload: dict) -> None:
        seen.append((type, payload))
        return original(session_id, type, payload)

    monkeypatch.setattr(events.publisher, "publish", spy)
    return seen


@pytest.fixture
def two_turns(api, sid):
    run_turn(api, sid, "write a.txt A1")
    run_turn(api, sid, "write b.txt B1\nappend a.txt more")
    return Session.objects.get(id=sid).worktree


def test_it_reverts_both_by_default_as_before(api, sid, two_turns):
    second = users(sid)[1]
    body = revert(api, sid, second.id).json()
    assert body["revert"]["mode"] == "both"
    assert files(two_turns) == {"a.txt": "A1"}
    assert {c["file"] for c in body["revert"]["changes"]} == {"a.txt", "b.txt"}
    assert api.post(f"/api/sessions/{sid}/unrevert/").json()["revert"] is None
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}


def test_conversation_mode_moves_the_boundary_and_leaves_the_files(api, sid, two_turns, published):
    before = files(two_turns)
    summary = Session.objects.get(id=sid).summary
    second = users(sid)[1]
    published.clear()
    response = revert(api, sid, second.id, mode="conversation")
    assert response.status_code == 200
    pending = response.json()["revert"]
    assert pending["message_id"] == second.id and pending["mode"] == "conversation"
    assert pending["changes"] == [] and pending["files"] == [] and pending["diff"] == ""
    assert files(two_turns) == before
    assert Session.objects.get(id=sid).summary == summary
    assert [t for t, _ in published] == [events.SESSION_UPDATED]  # no session.diff
    assert Message.objects.filter(session_id=sid).count() == 6, "nothing deleted yet"
    event = HistoryEvent.objects.filter(session_id=sid, kind="revert").get()
    assert event.data["mode"] == "conversation"

    # Unrevert: the boundary goes, the files are still not touched.
    (two_turns / "mine.txt").write_text("the user's")
    assert api.post(f"/api/sessions/{sid}/unrevert/").json()["revert"] is None
    assert files(two_turns) == {**before, "mine.txt": "the user's"}

    # Confirm: what followed the boundary goes, the files stay.
    revert(api, sid, second.id, mode="conversation")
    assert api.post(f"/api/sessions/{sid}/cleanup/").json()["revert"] is None
    assert [m.id for m in users(sid)] == [users(sid)[0].id]
    assert files(two_turns) == {**before, "mine.txt": "the user's"}
    assert kinds(sid)[-4:] == ["revert", "unrevert", "revert", "cleanup"]


def test_conversation_mode_over_a_pending_revert_keeps_its_files_until_unrevert(
    api, sid, two_turns
):
    first, second = users(sid)
    revert(api, sid, second.id)  # both: b.txt gone, a.txt back
    body = revert(api, sid, first.id, mode="conversation").json()
    assert body["revert"]["message_id"] == first.id
    assert files(two_turns) == {"a.txt": "A1"}, "the files stay where the first one put them"
    assert set(body["revert"]["files"]) == {"a.txt", "b.txt"}
    api.post(f"/api/sessions/{sid}/unrevert/")
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}


def test_files_mode_rewinds_the_files_and_leaves_the_conversation(api, sid, two_turns, published):
    path_before = Session.objects.get(id=sid).head_id
    second = users(sid)[1]
    published.clear()
    response = revert(api, sid, second.id, mode="files")
    assert response.status_code == 200
    session = response.json()
    assert session["revert"] is None and session["head_message_id"] == path_before
    assert files(two_turns) == {"a.txt": "A1"}
    assert Message.objects.filter(session_id=sid).count() == 6
    # The summary is what the Changes panel lists: the session's first snapshot → now.
    changes = api.get(f"/api/sessions/{sid}/diff/").json()
    assert session["summary"]["files"] == len(changes) == 1
    assert [t for t, _ in published] == [events.SESSION_UPDATED, events.SESSION_DIFF]
    diff = published[1][1]["diff"]
    assert {d["file"]: d["status"] for d in diff} == {"a.txt": "modified", "b.txt": "deleted"}
    event = HistoryEvent.objects.get(session_id=sid, kind="files-revert")
    assert event.data["message_id"] == second.id and event.data["part_id"] is None
    assert event.data["files_before"] != event.data["files_after"]
    assert sorted(event.data["files"]) == ["a.txt", "b.txt"]

    # Unrevert puts the files back as they were before the rewind.
    restored = api.post(f"/api/sessions/{sid}/unrevert/").json()
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}
    assert restored["summary"]["files"] == 2
    assert kinds(sid)[-2:] == ["files-revert", "unrevert"]
    # A second unrevert has nothing left to undo.
    api.post(f"/api/sessions/{sid}/unrevert/")
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}


def test_files_mode_undo_is_refused_once_the_files_changed(api, sid, two_turns):
    revert(api, sid, users(sid)[1].id, mode="files")
    (two_turns / "a.txt").write_text("edited since")
    response = api.post(f"/api/sessions/{sid}/unrevert/")
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "ConflictError"
    assert (two_turns / "a.txt").read_text() == "edited since"


def test_files_mode_at_a_tool_call_goes_back_to_before_that_call(api, sid):
    run_turn(api, sid, "write a.txt A1")
    run_turn(api, sid, "write b.txt B1\nsay then\nappend a.txt more")  # two steps
    worktree = Session.objects.get(id=sid).worktree
    append = Part.objects.get(session_id=sid, tool="append")
    revert(api, sid, append.message_id, part_id=append.id, mode="files")
    assert files(worktree) == {"a.txt": "A1", "b.txt": "B1"}
    assert Session.objects.get(id=sid).revert is None


def test_files_mode_is_refused_while_a_revert_is_pending(api, sid, two_turns):
    first, second = users(sid)
    revert(api, sid, second.id, mode="conversation")
    response = revert(api, sid, first.id, mode="files")
    assert response.status_code == 409
    assert "pending" in response.json()["error"]["message"]
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}


def test_a_bad_mode_is_a_400_in_one_sentence(api, sid, two_turns):
    for bad in ["all", "", None, 3, ["files"]]:
        response = revert(api, sid, users(sid)[0].id, mode=bad)
        assert response.status_code == 400, bad
        assert response.json()["error"]["message"] == (
            "mode must be 'both', 'conversation' or 'files'."
        )
    assert Session.objects.get(id=sid).revert is None


@pytest.mark.parametrize("mode", ["both", "conversation", "files"])
def test_every_mode_answers_409_while_a_run_works(api, sid, two_turns, mode):
    first = users(sid)[0]
    # A run holds the session's busy lock (its lease not expired).
    Session.objects.filter(id=sid).update(
        busy_run_id="run_x", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    response = revert(api, sid, first.id, mode=mode)
    assert response.status_code == 409
    assert response.json()["error"]["type"] == "SessionBusyError"
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}
    assert Session.objects.get(id=sid).revert is None


def test_outsiders_get_404(outsider_api, api, sid, two_turns):
    response = revert(outsider_api, sid, users(sid)[0].id, mode="files")
    assert response.status_code == 404
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}


def test_the_preview_reflects_the_mode(api, sid, two_turns):
    session = Session.objects.get(id=sid)
    second = users(sid)[1]
    both = plan_revert(session=session, message_id=second.id)
    assert {d["file"] for d in both["diff"]} == {"a.txt", "b.txt"}
    assert plan_revert(session=session, message_id=second.id, mode="conversation")["diff"] == []
    files_only = plan_revert(session=session, message_id=second.id, mode="files")
    assert files_only["diff"] == both["diff"]
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}, "a preview writes nothing"


def test_the_admin_revert_action_offers_the_modes(two_turns, sid):
    staff = User.objects.get(username="alice")
    staff.is_staff = True
    staff.save(update_fields=["is_staff"])
    staff.user_permissions.set(
        Permission.objects.filter(codename__in=["view_session", "change_session"])
    )
    client = Client()
    client.force_login(staff)
    changelist = "/admin/sessions_app/session/"
    second = users(sid)[1]
    base = {"action": "revert_action", "_selected_action": [sid], "boundary": second.id}
    page = client.post(changelist, {"action": "revert_action", "_selected_action": [sid]})
    html = page.content.decode()
    assert 'id="revert-mode"' in html and 'value="files"' in html

    preview = client.post(changelist, {**base, "mode": "conversation", "preview": "1"}).content
    assert b"the conversation only moves" in preview and b'id="revert-plan"' not in preview
    preview = client.post(changelist, {**base, "mode": "files", "preview": "1"}).content
    assert b'id="revert-plan"' in preview and b"b.txt" in preview

    client.post(changelist, {**base, "mode": "files", "apply": "1"})
    assert files(two_turns) == {"a.txt": "A1"}
    assert Session.objects.get(id=sid).revert is None
    client.post(changelist, {"action": "unrevert_action", "_selected_action": [sid]})
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}

    client.post(changelist, {**base, "mode": "conversation", "apply": "1"})
    assert Session.objects.get(id=sid).revert["mode"] == "conversation"
    assert files(two_turns) == {"a.txt": "A1more\n", "b.txt": "B1"}
