"""Issue 12.4 / docs/api.md "Pages and limits": message and session lists come in pages, and a
part field longer than API_PART_FIELD_MAX is cut in lists and events (``truncated``), whole at
``GET /api/parts/{id}/``. No list answers with an unbounded body."""

from __future__ import annotations

import pytest

from runs_app.services.seed import seed_runs
from sessions_app.models import Message, Part, Session
from sessions_app.services.sessions import create_session
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db


def path_ids(session: Session) -> list[str]:
    ids, current = [], session.head_id
    while current:
        ids.append(current)
        current = Message.objects.get(id=current).parent_id
    return ids[::-1]


@pytest.fixture
def long_session(owner):
    session = seed_runs(create_session(owner=owner, title="long"), 40)  # 120 messages
    session.refresh_from_db()
    return session


def test_the_first_page_is_the_one_nearest_the_head_and_previous_walks_back(api, long_session):
    everything = path_ids(long_session)
    assert len(everything) == 120
    page = api.get(f"/api/sessions/{long_session.id}/messages/?limit=50").json()
    assert [m["id"] for m in page["results"]] == everything[-50:]
    assert page["next"] is None and page["previous"]
    seen = [m["id"] for m in page["results"]]
    while page["previous"]:
        page = api.get(page["previous"]).json()
        assert page["next"], "an older page links forward again"
        seen = [m["id"] for m in page["results"]] + seen
    assert seen == everything
    forward = api.get(page["next"]).json()
    assert [m["id"] for m in forward["results"]] == everything[20:70]


def test_the_default_page_and_the_limits_of_limit(api, long_session, settings):
    url = f"/api/sessions/{long_session.id}/messages/"
    assert len(api.get(url).json()["results"]) == settings.API_PAGE_DEFAULT
    for bad in ("0", "-1", "201", "x", "1e3"):
        response = api.get(f"{url}?limit={bad}")
        assert response.status_code == 400, bad
        assert response.json()["error"]["type"] == "ValidationError"
    for bad in ("before=msg_nope", "after=msg_nope", "before=a&after=b"):
        assert api.get(f"{url}?{bad}").status_code == 400
    tree = api.get(f"{url}?tree=1&limit=200").json()
    assert len(tree["results"]) == 120 and tree["previous"] is None


def test_a_message_of_another_session_is_no_cursor(api, long_session, owner):
    other = seed_runs(create_session(owner=owner), 1)
    stranger = Message.objects.filter(session=other).first()
    response = api.get(f"/api/sessions/{long_session.id}/messages/?before={stranger.id}")
    assert response.status_code == 400


@pytest.mark.django_db(transaction=True)
def test_long_fields_are_cut_in_lists_and_whole_at_the_part(api, owner, settings):
    settings.API_PART_FIELD_MAX = 1000
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    big = "x" * 5000
    run_turn(api, sid, f"write big.txt {big}\nread big.txt")
    results = api.get(f"/api/sessions/{sid}/messages/").json()["results"]
    tools = [p for m in results for p in m["parts"] if p["type"] == "tool"]
    write, read = tools
    assert write["truncated"] and len(write["state"]["input"]["content"]) <= 1000
    assert read["truncated"] and len(read["state"]["output"]) == 1000
    user_text = [p for p in results[0]["parts"] if p["type"] == "text"][0]
    assert user_text["truncated"] and len(user_text["text"]) == 1000
    whole = api.get(f"/api/parts/{write['id']}/").json()
    assert whole["state"]["input"]["content"] == big and "truncated" not in whole
    assert api.get(f"/api/parts/{read['id']}/").json()["state"]["output"] == big
    outsider = client_for(owner.__class__.objects.create_user("eve", password="eve-pw"))
    assert outsider.get(f"/api/parts/{write['id']}/").status_code == 404
    assert api.get("/api/parts/prt_nope/").status_code == 404


def test_a_page_stops_at_its_byte_budget(api, owner, settings):
    """181 MB once came back from one GET …/messages/; now a page stops near its budget."""
    settings.API_PART_FIELD_MAX = 10_000
    settings.API_PAGE_MAX_BYTES = 50_000
    session = create_session(owner=owner)
    parent = None
    for i in range(30):
        message = Message.objects.create(session=session, role="user", parent=parent)
        Part.objects.create(message=message, session=session, type="text", text=f"{i}" * 20_000)
        parent = message
    Session.objects.filter(id=session.id).update(head=parent)
    response = api.get(f"/api/sessions/{session.id}/messages/?limit=200")
    body = response.json()
    assert len(response.content) < 80_000
    assert 1 <= len(body["results"]) <= 5 and body["previous"]
    assert body["results"][-1]["id"] == parent.id
    settings.API_PAGE_MAX_BYTES = 1
    one = api.get(f"/api/sessions/{session.id}/messages/").json()
    assert [m["id"] for m in one["results"]] == [parent.id], "always one message at least"


def test_nested_tool_input_is_cut_keeping_its_shape(owner, settings):
    from sessions_app.selectors import part_data

    settings.API_PART_FIELD_MAX = 100
    session = create_session(owner=owner)
    message = Message.objects.create(session=session, role="assistant")
    deep: dict = {"leaf": "y" * 500}
    for _ in range(100):
        deep = {"a": deep, "list": ["z" * 50] * 50}
    part = Part.objects.create(
        message=message,
        session=session,
        type="tool",
        tool="write",
        state={"status": "completed", "input": deep, "output": "ok"},
    )
    data = part_data(part)
    assert data["truncated"] and isinstance(data["state"]["input"], dict)
    assert len(str(data["state"]["input"])) < 1000
    assert part_data(part, whole=True)["state"]["input"] == deep


def test_the_session_list_is_paged(api, owner):
    for i in range(7):
        create_session(owner=owner, title=f"s{i}")
    page = api.get("/api/sessions/?limit=3").json()
    titles = [s["title"] for s in page["results"]]
    assert titles == ["s6", "s5", "s4"] and page["next"]
    while page["next"]:
        page = api.get(page["next"]).json()
        titles += [s["title"] for s in page["results"]]
    assert titles == [f"s{i}" for i in range(6, -1, -1)]
    assert api.get("/api/sessions/?q=s3").json()["results"][0]["title"] == "s3"
    assert api.get("/api/sessions/?limit=500").status_code == 400
    assert api.get("/api/sessions/?cursor=garbage").status_code == 404


def test_the_shared_view_is_paged_too(api, outsider, long_session, owner):
    owner_api = client_for(owner)
    token = owner_api.post(f"/api/sessions/{long_session.id}/share/").json()["token"]
    viewer = client_for(outsider)
    page = viewer.get(f"/api/shared/{token}/?limit=100").json()
    assert len(page["messages"]) == 100 and page["previous"]
    older = viewer.get(page["previous"]).json()
    assert len(older["messages"]) == 20 and older["previous"] is None


def test_the_worktree_listing_is_bounded_and_survives_dangling_links(api, owner, settings):
    settings.API_FILES_MAX = 5
    session = create_session(owner=owner)
    for i in range(8):
        (session.worktree / f"d{i % 2}").mkdir(exist_ok=True)
        (session.worktree / f"d{i % 2}" / f"{i}.txt").write_text("x" * i)
    (session.worktree / "gone").symlink_to(session.worktree / "nowhere")
    (session.worktree / ".git").mkdir()
    (session.worktree / ".git" / "config").write_text("x")
    listing = api.get(f"/api/sessions/{session.id}/files/")
    assert listing.status_code == 200 and len(listing.json()) == 5
    settings.API_FILES_MAX = 100
    paths = [e["path"] for e in api.get(f"/api/sessions/{session.id}/files/").json()]
    assert paths == sorted(paths) and "gone" in paths and len(paths) == 9
    assert api.get(f"/api/sessions/{session.id}/files/d1/").json()[0]["path"] == "d1/1.txt"
    assert api.get(f"/api/sessions/{session.id}/files/gone").status_code in (400, 404)
