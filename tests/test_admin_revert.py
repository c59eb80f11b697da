from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from sessions_app.models import HistoryEvent, Message, Session, Share
from sessions_app.selectors import active_path
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

CHANGELIST = "/admin/sessions_app/session/"


def staff(name: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(
            codename__in=["view_session", "change_session", "view_run", "view_message"]
        )
    )
    return user


@pytest.fixture
def setup():
    alice = staff("alice-staff")
    api = client_for(alice)
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write b.txt two")
    client = Client()
    client.force_login(alice)
    return alice, sid, client


def test_the_admin_revert_previews_then_applies_then_unreverts(setup):
    _, sid, client = setup
    worktree = Session.objects.get(id=sid).worktree
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    base = {"action": "revert_action", "_selected_action": [sid]}
    page = client.post(CHANGELIST, base)
    assert page.status_code == 200 and second.id in page.content.decode()
    preview = client.post(CHANGELIST, {**base, "boundary": second.id, "preview": "1"})
    html = preview.content.decode()
    assert 'id="revert-plan"' in html and "b.txt" in html and "deleted" in html
    assert (worktree / "b.txt").exists(), "a preview changes nothing"
    done = client.post(CHANGELIST, {**base, "boundary": second.id, "apply": "1"}, follow=True)
    assert done.status_code == 200
    assert not (worktree / "b.txt").exists() and (worktree / "a.txt").read_text() == "one"
    assert Session.objects.get(id=sid).revert["message_id"] == second.id
    client.post(CHANGELIST, {"action": "unrevert_action", "_selected_action": [sid]})
    assert (worktree / "b.txt").read_text() == "two"
    client.post(CHANGELIST, {**base, "boundary": second.id, "apply": "1"})
    client.post(CHANGELIST, {"action": "cleanup_action", "_selected_action": [sid]})
    session = Session.objects.get(id=sid)
    assert session.revert is None and Message.objects.filter(session_id=sid).count() == 3


def test_another_staff_user_cannot_revert_through_the_admin(setup):
    _, sid, _ = setup
    worktree = Session.objects.get(id=sid).worktree
    bob = Client()
    bob.force_login(staff("bob-staff"))
    first = Message.objects.filter(session_id=sid, role="user").order_by("id")[0]
    bob.post(
        CHANGELIST,
        {"action": "revert_action", "_selected_action": [sid], "boundary": first.id, "apply": "1"},
    )
    assert Session.objects.get(id=sid).revert is None
    assert (worktree / "a.txt").exists() and (worktree / "b.txt").exists()


def test_the_admin_rolls_back_n_turns(setup):
    _, sid, client = setup
    page = client.post(CHANGELIST, {"action": "rollback_action", "_selected_action": [sid]})
    assert page.status_code == 200 and b'name="num_turns"' in page.content
    client.post(
        CHANGELIST,
        {"action": "rollback_action", "_selected_action": [sid], "num_turns": "1", "apply": "1"},
    )
    session = Session.objects.get(id=sid)
    users = [m for m in active_path(session) if m.role == "user"]
    assert len(users) == 1
    bad = client.post(
        CHANGELIST,
        {"action": "rollback_action", "_selected_action": [sid], "num_turns": "x", "apply": "1"},
        follow=True,
    )
    assert b"num_turns must be an integer" in bad.content


def test_the_admin_fork_lands_in_the_acting_users_account(setup):
    alice, sid, client = setup
    client.post(CHANGELIST, {"action": "fork_action", "_selected_action": [sid]})
    fork = Session.objects.get(forked_from_session_id=sid)
    assert fork.owner == alice
    root = User.objects.create_superuser("root", password="pw")
    admin = Client()
    admin.force_login(root)
    admin.post(CHANGELIST, {"action": "fork_action", "_selected_action": [sid]})
    forks = Session.objects.filter(forked_from_session_id=sid).order_by("id")
    assert [f.owner.username for f in forks] == ["alice-staff", "root"]
    assert (forks[1].worktree / "b.txt").read_text() == "two"


def test_a_staff_user_cannot_fork_or_roll_back_others_sessions(setup):
    _, sid, _ = setup
    bob = staff("bob-staff")
    other = Client()
    other.force_login(bob)
    other.post(CHANGELIST, {"action": "fork_action", "_selected_action": [sid]})
    other.post(
        CHANGELIST,
        {"action": "rollback_action", "_selected_action": [sid], "num_turns": "2", "apply": "1"},
    )
    assert not Session.objects.filter(owner=bob).exists()
    users = [m for m in active_path(Session.objects.get(id=sid)) if m.role == "user"]
    assert len(users) == 2


def test_the_run_admin_shows_lineage_links(setup):
    alice, sid, client = setup
    api = client_for(alice)
    run = Message.objects.filter(session_id=sid, role="user").order_by("id").first().run_id
    fork = api.post(f"/api/runs/{run}/continue/", {"input": "say x", "wait": True}, format="json")
    page = client.get("/admin/runs_app/run/")
    assert page.status_code == 200
    assert f'href="/admin/runs_app/run/{run}/change/"'.encode() in page.content
    assert b"forked from" in page.content
    detail = client.get(f"/admin/runs_app/run/{fork.json()['id']}/change/")
    assert b"forked from" in detail.content


def test_the_session_list_shows_counts_share_state_and_filters(setup):
    alice, sid, client = setup
    api = client_for(alice)
    api.post(f"/api/sessions/{sid}/share/")
    page = client.get(CHANGELIST).content.decode()
    assert "column-message_count" in page and "column-shared" in page
    assert client.get(CHANGELIST + "?shared=yes").content.decode().count(sid) >= 1
    assert sid not in client.get(CHANGELIST + "?shared=no").content.decode()
    assert sid not in client.get(CHANGELIST + "?revert=pending").content.decode()
    messages = client.get("/admin/sessions_app/message/")
    assert messages.status_code == 200 and b"/admin/runs_app/run/" in messages.content


def test_the_admin_revokes_share_links_of_own_sessions_only(setup):
    alice, sid, client = setup
    token = client_for(alice).post(f"/api/sessions/{sid}/share/").json()["token"]
    bob = staff("bob-staff")
    other = Client()
    other.force_login(bob)
    other.post(CHANGELIST, {"action": "revoke_share_action", "_selected_action": [sid]})
    assert Share.objects.get(token=token).revoked_at is None, "not bob's session"
    for action in ("resume_action", "abort_action", "unrevert_action", "cleanup_action"):
        other.post(CHANGELIST, {"action": action, "_selected_action": [sid]})
    assert not HistoryEvent.objects.filter(session_id=sid, created_by=bob).exists()
    client.post(CHANGELIST, {"action": "revoke_share_action", "_selected_action": [sid]})
    assert Share.objects.get(token=token).revoked_at is not None
    assert client_for(bob).get(f"/api/shared/{token}/").status_code == 404
