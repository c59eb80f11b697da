from __future__ import annotations

import pytest
from rest_framework.test import APIClient

from sessions_app.models import Session

pytestmark = pytest.mark.django_db


def test_it_issues_a_token_for_a_valid_login(owner):
    client = APIClient()
    ok = client.post(
        "/api/auth/token/", {"username": "alice", "password": "alice-pw"}, format="json"
    )
    assert ok.status_code == 200 and len(ok.json()["token"]) == 40
    bad = client.post("/api/auth/token/", {"username": "alice", "password": "x"}, format="json")
    assert bad.status_code == 401
    assert bad.json()["error"]["type"] == "NotAuthenticated"


def test_it_answers_401_in_the_error_shape_without_credentials():
    response = APIClient().get("/api/sessions/")
    assert response.status_code == 401
    assert response.json()["error"]["type"] == "NotAuthenticated"


def test_it_creates_lists_gets_and_deletes_sessions(api, owner):
    created = api.post("/api/sessions/", {"title": "first"}, format="json")
    assert created.status_code == 201
    body = created.json()
    assert body["id"].startswith("ses_") and body["status"] == "idle"
    assert body["model"] == "scripted" and body["checkpoint"] == "tool-batch"
    assert body["head_message_id"] is None and body["revert"] is None
    assert [s["id"] for s in api.get("/api/sessions/").json()["results"]] == [body["id"]]
    assert api.get(f"/api/sessions/{body['id']}/").json()["title"] == "first"
    assert api.delete(f"/api/sessions/{body['id']}/").status_code == 204
    assert not Session.objects.exists()


def test_it_refuses_bad_session_input(api):
    bad = api.post("/api/sessions/", {"checkpoint": "sometimes"}, format="json")
    assert bad.status_code == 400
    assert bad.json()["error"] == {
        "type": "ValidationError",
        "message": "checkpoint must be one of runs, tool-batch, tool.",
    }
    assert api.post("/api/sessions/", {"model": "gpt"}, format="json").status_code == 400
    garbage = api.post("/api/sessions/", "not json", content_type="application/json")
    assert garbage.status_code == 400 and garbage.json()["error"]["type"] == "ValidationError"


def test_ids_are_prefixed_and_sort_by_creation(api):
    ids = [api.post("/api/sessions/", {}, format="json").json()["id"] for _ in range(5)]
    assert ids == sorted(ids)


@pytest.mark.django_db(transaction=True)
def test_an_outsider_gets_404_on_every_session_endpoint(api, outsider_api):
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": "hi"}], "wait": True},
        format="json",
    ).json()
    calls = [
        ("get", f"/api/sessions/{sid}/", None),
        ("delete", f"/api/sessions/{sid}/", None),
        ("get", f"/api/sessions/{sid}/messages/", None),
        ("post", f"/api/sessions/{sid}/head/", {"message_id": run["input_message_id"]}),
        ("get", f"/api/sessions/{sid}/runs/", None),
        ("post", f"/api/sessions/{sid}/runs/", {"messages": [{"role": "user", "content": "x"}]}),
        (
            "post",
            f"/api/sessions/{sid}/runs/stream/",
            {"messages": [{"role": "user", "content": "x"}]},
        ),
        ("post", f"/api/sessions/{sid}/abort/", {}),
        ("get", f"/api/sessions/{sid}/files/", None),
        ("get", f"/api/sessions/{sid}/files/a.txt", None),
        ("get", f"/api/runs/{run['id']}/", None),
        ("get", f"/api/runs/{run['id']}/messages/", None),
        ("post", f"/api/runs/{run['id']}/cancel/", {}),
    ]
    for method, url, body in calls:
        response = getattr(outsider_api, method)(url, body, format="json")
        assert response.status_code == 404, (method, url, response.status_code)
        assert response.json()["error"]["type"] == "NotFound"
    assert Session.objects.filter(id=sid).exists()


def test_unknown_api_paths_answer_json_404(api):
    response = api.get("/api/nothing-here/")
    assert response.status_code == 404
    assert response.json()["error"]["type"] == "NotFound"


def test_the_openapi_schema_and_docs_are_served(api):
    schema = api.get("/api/schema/?format=json")
    assert schema.status_code == 200
    assert "/api/sessions/{session_id}/runs/" in schema.json()["paths"]
    assert api.get("/api/docs/").status_code == 200


def _history(session, count):
    from sessions_app.models import Message, Part

    parent, messages, parts = None, [], []
    for i in range(count):
        m = Message(session=session, role="user" if i % 2 == 0 else "assistant", parent=parent)
        messages.append(m)
        parts += [
            Part(message=m, session=session, order=0, type="text", text=f"m{i}"),
            Part(message=m, session=session, order=1, type="step-start", data={"snapshot": "x"}),
        ]
        parent = m
    Message.objects.bulk_create(messages)
    Part.objects.bulk_create(parts)
    Session.objects.filter(id=session.id).update(head=messages[-1])


def test_messages_load_in_constant_queries(api, owner):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    counts = []
    for size in (3, 300):
        sid = api.post("/api/sessions/", {}, format="json").json()["id"]
        _history(Session.objects.get(id=sid), size)
        with CaptureQueriesContext(connection) as ctx:
            body = api.get(f"/api/sessions/{sid}/messages/?limit=200").json()["results"]
        assert len(body) == min(size, 200) and body[-1]["parts"][0]["text"] == f"m{size - 1}"
        tree = api.get(f"/api/sessions/{sid}/messages/?tree=1&limit=200").json()["results"]
        assert len(tree) == min(size, 200)
        counts.append(len(ctx.captured_queries))
    assert counts[0] == counts[1]


@pytest.mark.django_db(transaction=True)
def test_nul_characters_are_a_400_everywhere(api, owner):
    """Found by the fuzzer: PostgreSQL cannot store NUL, and it was a 500."""
    from django.test import Client

    response = api.post("/api/sessions/", {"title": "a\x00b"}, format="json")
    assert response.status_code == 400 and response.json()["error"]["type"] == "ValidationError"
    sid = api.post("/api/sessions/", {"title": "ok"}, format="json").json()["id"]
    run = {"messages": [{"role": "user", "content": "say \x00"}]}
    assert api.post(f"/api/sessions/{sid}/runs/", run, format="json").status_code == 400
    assert api.get(f"/api/sessions/{sid}/diff/?message_id=%00").status_code == 400
    assert api.get(f"/api/sessions/{sid}%00/").status_code in (400, 404)
    browser = Client()
    browser.force_login(owner)
    assert browser.post("/sessions/new/", {"title": "x\x00"}).status_code == 400
    assert api.get(f"/api/sessions/{sid}/").json()["title"] == "ok"
