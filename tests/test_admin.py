from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.test import Client

from sessions_app.models import Session
from sessions_app.services.sessions import create_session
from tests.conftest import client_for

pytestmark = pytest.mark.django_db


def staff(name: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    user.user_permissions.set(
        Permission.objects.filter(codename__in=["view_session", "view_run", "view_message"])
    )
    return user


def test_a_staff_user_sees_only_their_own_sessions(owner):
    alice, bob = staff("alice-staff"), staff("bob-staff")
    mine = create_session(owner=alice, title="alice's")
    theirs = create_session(owner=bob, title="bob's")
    client = Client()
    client.force_login(alice)
    listing = client.get("/admin/sessions_app/session/")
    assert listing.status_code == 200
    assert mine.id in listing.content.decode() and theirs.id not in listing.content.decode()
    assert client.get(f"/admin/sessions_app/session/{theirs.id}/change/").status_code == 302
    assert client.get(f"/admin/sessions_app/session/{mine.id}/change/").status_code == 200


def test_a_superuser_sees_every_session(owner):
    root = User.objects.create_superuser("root", password="pw")
    a = create_session(owner=owner, title="a")
    client = Client()
    client.force_login(root)
    assert a.id in client.get("/admin/sessions_app/session/").content.decode()
    assert client.get("/admin/runs_app/run/").status_code == 200
    assert client.get("/admin/sessions_app/part/").status_code == 200


def test_pages_need_a_login_and_show_my_sessions(owner, outsider):
    mine = create_session(owner=owner, title="my work")
    client = Client()
    assert client.get("/").status_code == 302
    client.force_login(owner)
    page = client.get("/")
    assert "my work" in page.content.decode()
    assert client.get(f"/sessions/{mine.id}/").status_code == 200
    client.force_login(outsider)
    assert client.get(f"/sessions/{mine.id}/").status_code == 404
    assert "my work" not in client.get("/").content.decode()


def test_the_browser_api_keeps_csrf_on(owner):
    client = Client(enforce_csrf_checks=True)
    client.force_login(owner)
    response = client.post("/api/sessions/", {}, content_type="application/json")
    assert response.status_code == 403


def test_the_session_list_searches_renames_deletes_and_shows_forks(owner, outsider):
    from runs_app.services.fork import fork_session

    browser = Client()
    browser.force_login(owner)
    trip = create_session(owner=owner, title="Trip to Kyoto")
    create_session(owner=owner, title="Groceries")
    fork_session(source=trip, user=owner, title="Kyoto, take two")
    page = browser.get("/?q=kyoto").content.decode()
    assert "Trip to Kyoto" in page and "Kyoto, take two" in page and "Groceries" not in page
    assert "fork of" in page
    browser.post(f"/sessions/{trip.id}/rename/", {"title": "Trip to Osaka"})
    assert Session.objects.get(id=trip.id).title == "Trip to Osaka"
    assert browser.post(f"/sessions/{trip.id}/rename/", {"title": " "}).status_code == 400
    assert (
        client_for(owner)
        .patch(f"/api/sessions/{trip.id}/", {"title": "Trip to Nara"}, format="json")
        .json()["title"]
        == "Trip to Nara"
    )
    assert (
        client_for(owner)
        .patch(f"/api/sessions/{trip.id}/", {"owner": 9}, format="json")
        .status_code
        == 400
    )
    other = Client()
    other.force_login(outsider)
    assert other.post(f"/sessions/{trip.id}/delete/").status_code == 404
    assert other.post(f"/sessions/{trip.id}/rename/", {"title": "x"}).status_code == 404
    browser.post(f"/sessions/{trip.id}/delete/")
    assert not Session.objects.filter(id=trip.id).exists()


def test_self_signup_only_behind_its_setting(settings, db):
    assert Client().get("/signup/").status_code == 404
    assert b"Create an account" not in Client().get("/login/").content
    settings.ALLOW_SIGNUP = True
    assert b"Create an account" in Client().get("/login/").content
    browser = Client()
    bad = browser.post("/signup/", {"username": "carol", "password1": "a", "password2": "b"})
    assert bad.status_code == 400
    ok = browser.post(
        "/signup/",
        {"username": "carol", "password1": "long-pass-123", "password2": "long-pass-123"},
    )
    assert ok.status_code == 302 and User.objects.filter(username="carol").exists()
    assert browser.get("/").status_code == 200, "signed in"


def test_adduser_adds_a_user_who_can_log_in(db):
    from django.core.management import call_command

    call_command("adduser", "dave", "--password", "dave-pass-123", "--staff")
    dave = User.objects.get(username="dave")
    assert dave.is_staff and not dave.is_superuser and dave.check_password("dave-pass-123")
    assert Client().login(username="dave", password="dave-pass-123")


@pytest.mark.django_db(transaction=True)
def test_the_admin_shows_a_share_fork_what_the_api_shows_a_non_owner(db):
    """Issue 12.7: the forker's admin shows neither the source's (current) title nor who ran
    its runs."""
    from runs_app.models import Run
    from tests.conftest import run_turn

    alice, bob = staff("alice-staff"), staff("bob-staff")
    source_api = client_for(alice)
    sid = source_api.post("/api/sessions/", {"title": "first"}, format="json").json()["id"]
    run_turn(source_api, sid, "say hi")
    token = source_api.post(f"/api/sessions/{sid}/share/").json()["token"]
    fork_id = client_for(bob).post(f"/api/shared/{token}/fork/").json()["id"]
    Session.objects.filter(id=sid).update(title="renamed-after-the-fork")
    copied = Run.objects.get(session_id=fork_id)
    Run.objects.filter(id=copied.id).update(created_by=alice)  # as a fork before the fix did
    client = Client()
    client.force_login(bob)
    for url in (
        "/admin/sessions_app/session/",
        f"/admin/sessions_app/session/{fork_id}/change/",
        f"/admin/runs_app/run/{copied.id}/change/",
        "/admin/runs_app/run/",
    ):
        page = client.get(url)
        assert page.status_code == 200, url
        body = page.content.decode()
        assert "renamed-after-the-fork" not in body and "alice-staff" not in body, url
