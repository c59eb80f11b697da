"""SEMANTICS 6: share links pin a point (head and files) to read and fork, never to write."""

from __future__ import annotations

import pytest
from django.test import Client
from rest_framework.test import APIClient

from sessions_app.models import Message, Session
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
