"""docs/semantics.md §6: share links pin a point (head and files) to read and fork, never to
write."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions_app.models import Message, Session, Share
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def shared(api):
    sid = api.post("/api/sessions/", {"title": "trip plan"}, format="json").json()["id"]
    run_turn(api, sid, "write plan.txt day one\nsay planned")
    response = api.post(f"/api/sessions/{sid}/share/")
    assert response.status_code == 201
    return sid, response.json()


def user_texts(body: dict) -> list[str]:
    return [
        "".join(p.get("text", "") for p in m["parts"] if p["type"] == "text")
        for m in body["messages"]
        if m["role"] == "user"
    ]


def test_a_share_pins_the_head_and_the_files(api, outsider, shared):
    sid, link = shared
    assert len(link["token"]) >= 32 and link["url"] == f"/s/{link['token']}/"
    assert link["message_id"] == Session.objects.get(id=sid).head_id
    viewer = client_for(outsider)
    body = viewer.get(f"/api/shared/{link['token']}/").json()
    assert user_texts(body) == ["write plan.txt day one\nsay planned"]
    assert body["files"] == [{"path": "plan.txt", "size": 7}]
    assert [d["file"] for d in body["diff"]] == ["plan.txt"]
    assert viewer.get(f"/api/shared/{link['token']}/files/plan.txt").content == b"day one"
    for bad in ("nope.txt", "../plan.txt", "./plan.txt", "a/../../etc/passwd"):
        assert viewer.get(f"/api/shared/{link['token']}/files/{bad}").status_code == 404
    # The owner moves on, reverts, rolls back: the link shows what was pinned.
    run_turn(api, sid, "write plan.txt day two")
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": first.id}, format="json")
    api.post(f"/api/sessions/{sid}/unrevert/")
    api.post(f"/api/sessions/{sid}/rollback/", {"num_turns": 2}, format="json")
    again = viewer.get(f"/api/shared/{link['token']}/").json()
    assert user_texts(again) == user_texts(body) and again["files"] == body["files"]
    assert viewer.get(f"/api/shared/{link['token']}/files/plan.txt").content == b"day one"


def test_resharing_moves_the_pin_and_revoking_404s(api, outsider, shared):
    sid, link = shared
    run_turn(api, sid, "append plan.txt day two")
    moved = api.post(f"/api/sessions/{sid}/share/").json()
    assert moved["token"] == link["token"] and moved["message_id"] != link["message_id"]
    viewer = client_for(outsider)
    assert len(user_texts(viewer.get(f"/api/shared/{link['token']}/").json())) == 2
    assert api.delete(f"/api/sessions/{sid}/share/").status_code == 204
    gone = viewer.get(f"/api/shared/{link['token']}/")
    assert gone.status_code == 404 and gone.json()["error"]["type"] == "NotFound"
    assert viewer.post(f"/api/shared/{link['token']}/fork/").status_code == 404
    fresh = api.post(f"/api/sessions/{sid}/share/").json()
    assert fresh["token"] != link["token"], "a revoked link stays dead"


def test_a_wrong_token_is_404(outsider, shared):
    viewer = client_for(outsider)
    assert viewer.get("/api/shared/not-a-token/").status_code == 404
    assert viewer.get(f"/api/shared/{'x' * 300}/").status_code == 404


def test_a_share_grants_read_and_fork_never_write(outsider, shared):
    sid, link = shared
    viewer = client_for(outsider)
    assert viewer.post(f"/api/shared/{link['token']}/", {}, format="json").status_code == 405
    assert viewer.delete(f"/api/shared/{link['token']}/").status_code == 405
    body = {"messages": [{"role": "user", "content": "say hi"}]}
    assert viewer.post(f"/api/sessions/{sid}/runs/", body, format="json").status_code == 404
    assert viewer.post(f"/api/sessions/{sid}/rollback/", {"num_turns": 1}).status_code == 404
    assert viewer.delete(f"/api/sessions/{sid}/").status_code == 404
    assert viewer.post(f"/api/sessions/{sid}/share/").status_code == 404
    assert viewer.delete(f"/api/sessions/{sid}/share/").status_code == 404
    assert Session.objects.filter(id=sid).exists()


def test_anonymous_reading_only_when_the_setting_allows(settings, shared):
    _, link = shared
    anonymous = APIClient()
    response = anonymous.get(f"/api/shared/{link['token']}/")
    assert response.status_code == 401 and response.json()["error"]["type"] == "NotAuthenticated"
    page = Client().get(link["url"])
    assert page.status_code == 302 and "/login/" in page["Location"]
    settings.SHARE_ANONYMOUS_READ = True
    assert anonymous.get(f"/api/shared/{link['token']}/").status_code == 200
    assert Client().get(link["url"]).status_code == 200
    assert anonymous.post(f"/api/shared/{link['token']}/fork/").status_code == 401


def test_forking_a_share_gives_my_own_copy_with_the_files(api, outsider, shared):
    sid, link = shared
    run_turn(api, sid, "write plan.txt changed later")  # after the pin
    viewer = client_for(outsider)
    response = viewer.post(f"/api/shared/{link['token']}/fork/")
    assert response.status_code == 201
    fork = response.json()
    assert fork["owner"] == outsider.pk and fork["forked_from_session_id"] == sid
    assert fork["forked_from_message_id"] == link["message_id"]
    copy = Session.objects.get(id=fork["id"])
    assert (copy.worktree / "plan.txt").read_text() == "day one"
    run_turn(viewer, fork["id"], "append plan.txt mine")
    assert (copy.worktree / "plan.txt").read_text() == "day onemine\n"
    owner_files = Session.objects.get(id=sid).worktree / "plan.txt"
    assert owner_files.read_text() == "changed later", "the owner's session is unchanged"
    assert viewer.get(f"/api/sessions/{fork['id']}/").status_code == 200
    assert api.get(f"/api/sessions/{fork['id']}/").status_code == 404, "the fork is not theirs"


def test_the_shared_page_and_its_fork_button(outsider, shared):
    sid, link = shared
    browser = Client()
    browser.force_login(outsider)
    page = browser.get(link["url"])
    assert page.status_code == 200
    assert b"Fork into my account" in page.content and b'data-path="plan.txt"' in page.content
    assert b"planned" in page.content and b"plan.txt" in page.content
    response = browser.post(f"{link['url']}fork/")
    assert response.status_code == 302 and response["Location"].startswith("/sessions/ses_")
    fork_id = response["Location"].strip("/").split("/")[-1]
    assert Session.objects.get(id=fork_id).owner == outsider
    assert browser.get(response["Location"]).status_code == 200


def test_an_empty_pin_shows_and_forks_the_empty_conversation(api, outsider):
    """Issue 12.1: a share of an empty conversation never turns into "the head"."""
    sid = api.post("/api/sessions/", {"title": "later"}, format="json").json()["id"]
    link = api.post(f"/api/sessions/{sid}/share/").json()
    assert link["message_id"] is None
    run_turn(api, sid, "write secret.txt after the pin\nsay the secret answer")
    viewer = client_for(outsider)
    body = viewer.get(f"/api/shared/{link['token']}/").json()
    assert body["messages"] == [] and body["files"] == [] and body["diff"] == []
    assert viewer.get(f"/api/shared/{link['token']}/files/secret.txt").status_code == 404
    fork = viewer.post(f"/api/shared/{link['token']}/fork/").json()
    copy = Session.objects.get(id=fork["id"])
    assert fork["head_message_id"] is None and not Message.objects.filter(session=copy).exists()
    assert not (copy.worktree / "secret.txt").exists()
    assert viewer.get(f"/api/sessions/{fork['id']}/files/").json() == []
    # The page's fork button copies the same nothing.
    browser = Client()
    browser.force_login(outsider)
    page_fork = browser.post(f"{link['url']}fork/")["Location"].strip("/").split("/")[-1]
    assert not Message.objects.filter(session_id=page_fork).exists()
    assert not (Session.objects.get(id=page_fork).worktree / "secret.txt").exists()


def test_a_pin_that_a_cleanup_deleted_answers_404(api, outsider):
    """Issue 12.1: revert past the pin and clean up: the link is dead, it never shows or
    forks the head."""
    sid = api.post("/api/sessions/", {"title": "t"}, format="json").json()["id"]
    run_turn(api, sid, "write a.txt one")
    run_turn(api, sid, "write b.txt two")
    link = api.post(f"/api/sessions/{sid}/share/").json()
    run_turn(api, sid, "write c.txt three")
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    api.post(f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json")
    assert api.post(f"/api/sessions/{sid}/cleanup/").status_code == 200
    assert not Message.objects.filter(id=link["message_id"]).exists()
    assert Share.objects.get(token=link["token"]).message_id == link["message_id"]
    viewer = client_for(outsider)
    for response in (
        viewer.get(f"/api/shared/{link['token']}/"),
        viewer.get(f"/api/shared/{link['token']}/files/a.txt"),
        viewer.post(f"/api/shared/{link['token']}/fork/"),
    ):
        assert response.status_code == 404 and response.json()["error"]["type"] == "NotFound"
    browser = Client()
    browser.force_login(outsider)
    assert browser.get(link["url"]).status_code == 404
    assert browser.post(f"{link['url']}fork/").status_code == 404
    assert not Session.objects.filter(owner=outsider).exists()


def test_the_system_prompt_is_shared_only_when_the_owner_says_so(api, outsider):
    """Issue 12.2 / docs/semantics.md §6.4."""
    secret = "SECRET INSTRUCTIONS 7f3a"
    sid = api.post("/api/sessions/", {"title": "t", "system_prompt": secret}, format="json").json()[
        "id"
    ]
    run_turn(api, sid, "say hi")
    link = api.post(f"/api/sessions/{sid}/share/").json()
    assert link["include_system_prompt"] is False
    viewer = client_for(outsider)
    assert secret not in viewer.get(f"/api/shared/{link['token']}/").content.decode()
    browser = Client()
    browser.force_login(outsider)
    assert secret not in browser.get(link["url"]).content.decode()
    fork = viewer.post(f"/api/shared/{link['token']}/fork/").json()
    assert fork["system_prompt"] == ""
    runs = viewer.get(f"/api/sessions/{fork['id']}/runs/").json()
    transcript = viewer.get(f"/api/runs/{runs[0]['id']}/messages/").json()
    assert transcript[0]["role"] == "user" and secret not in str(transcript)
    # Shared with it: shown and copied.
    link = api.post(
        f"/api/sessions/{sid}/share/", {"include_system_prompt": True}, format="json"
    ).json()
    assert link["include_system_prompt"] is True
    assert viewer.get(f"/api/shared/{link['token']}/").json()["session"]["system_prompt"] == secret
    assert secret in browser.get(link["url"]).content.decode()
    fork = viewer.post(f"/api/shared/{link['token']}/fork/").json()
    assert fork["system_prompt"] == secret
    bad = api.post(f"/api/sessions/{sid}/share/", {"include_system_prompt": "x"}, format="json")
    assert bad.status_code == 400 and bad.json()["error"]["type"] == "ValidationError"


def test_a_share_fork_does_not_name_who_ran_the_source(api, owner, outsider, shared):
    """Issue 12.7: copied runs do not carry the source owner's user."""
    from runs_app.models import Run

    sid, link = shared
    assert Run.objects.filter(session_id=sid, created_by=owner).exists()
    fork = client_for(outsider).post(f"/api/shared/{link['token']}/fork/").json()
    copied = Run.objects.filter(session_id=fork["id"])
    assert copied.exists() and not copied.filter(created_by=owner).exists()
    own = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()
    assert Run.objects.filter(session_id=own["id"], created_by=owner).exists()


def test_the_owner_reads_the_live_link_and_when_it_was_pinned(api, outsider_api, sid):
    """After a reload the chat shows the existing link, not only "Share" (issue 17)."""
    assert api.get(f"/api/sessions/{sid}/share/").status_code == 204
    run_turn(api, sid, "say one")
    made = api.post(f"/api/sessions/{sid}/share/", {}, format="json").json()
    shown = api.get(f"/api/sessions/{sid}/share/").json()
    assert shown["url"] == made["url"] and shown["pinned_at"] == made["pinned_at"]
    run_turn(api, sid, "say two")
    moved = api.post(f"/api/sessions/{sid}/share/", {}, format="json").json()
    assert moved["token"] == made["token"] and moved["pinned_at"] > made["pinned_at"]
    assert api.get(f"/api/sessions/{sid}/share/").json()["message_id"] == moved["message_id"]
    assert outsider_api.get(f"/api/sessions/{sid}/share/").status_code == 404
    api.delete(f"/api/sessions/{sid}/share/")
    assert api.get(f"/api/sessions/{sid}/share/").status_code == 204
