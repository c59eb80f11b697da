"""Authorization matrix (issue 7): every URL pattern of the project, each identity — owner,
another user, anonymous, a staff user who is not the owner, a share-token holder. A new
endpoint that is not classified here fails the first test, so none can escape the matrix.

Expected: outsiders (another user, staff non-owner, share holder on session endpoints) get
404, anonymous gets 401 (API) or the login page (pages); share holders read and fork through
``/api/shared/`` only; the owner reaches everything."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import get_resolver

from sessions_app.models import Message, Part
from tests.conftest import client_for, run_turn

pytestmark = pytest.mark.django_db(transaction=True)

# Route → kind. "session"/"run": owner only; "shared": anyone with the token (reads and
# forks); "collection": any logged-in user, scoped to their own; "public": no login.
API = {
    "api/auth/token/": "public",  # POST; its DELETE (revoke) needs the caller's login
    "api/auth/password/": "collection",  # the caller's own password
    "api/health/": "public",
    "api/sessions/": "collection",
    "api/sessions/import/": "collection",  # makes a session of the caller's own
    "api/sessions/upload/": "collection",  # likewise, from an archive or a folder
    "api/credentials/": "collection",  # the caller's own credentials
    # One of the caller's credentials: another's id is a 404 (test_repositories.py).
    "api/credentials/<str:credential_id>/": "collection",
    "api/usage/": "collection",  # the caller's usage (a superuser may name another user)
    "api/usage/quota/": "collection",
    "api/models/": "collection",  # the deployment's list: any logged-in user, nothing of others
    "api/tools/": "collection",  # likewise: the tools and whether shell is on
    "api/schema/": "public",
    "api/docs/": "public",
    "api/shared/<str:token>/": "shared",
    "api/shared/<str:token>/fork/": "shared",
    "api/shared/<str:token>/files/<path:path>": "shared",
}
PAGES = {
    "": "page-login",
    "sessions/new/": "page-login",
    "sessions/<str:session_id>/": "page-session",
    "sessions/<str:session_id>/rename/": "page-session",
    "sessions/<str:session_id>/delete/": "page-session",
    "s/<str:token>/": "page-shared",
    "s/<str:token>/fork/": "page-shared",
    "login/": "public",
    "logout/": "public",
    "signup/": "public",
    "invite/<str:token>/": "public",  # an invitation link: the token is the credential
    "password/": "page-login",
    "credentials/": "page-login",  # the caller's own credentials
    "usage/": "page-login",  # the caller's own usage and quotas
    "metrics": "metrics-token",  # 404 unless METRICS_TOKEN is set; then its bearer only
}
SKIPPED = ("admin/", "^static/")  # the admin has its own tests (test_admin*.py)


def routes() -> list[tuple[str, object]]:
    def walk(patterns, prefix=""):  # noqa: ANN001, ANN202
        for p in patterns:
            if hasattr(p, "url_patterns"):
                yield from walk(p.url_patterns, prefix + str(p.pattern))
            else:
                yield prefix + str(p.pattern), p.callback

    return [(r, cb) for r, cb in walk(get_resolver().url_patterns) if not r.startswith(SKIPPED)]


def kind(route: str) -> str | None:
    if route in API:
        return API[route]
    if route in PAGES:
        return PAGES[route]
    if route.startswith("api/sessions/<str:session_id>/"):
        return "session"
    if route.startswith("api/runs/<str:run_id>/"):
        return "run"
    if route == "api/parts/<str:part_id>/":
        return "session"  # a part of a session: the owner's alone
    return None


def methods(callback) -> list[str]:  # noqa: ANN001
    # A ViewSet route answers the methods it maps (``actions``); a function view its own.
    names = getattr(callback, "actions", None) or getattr(
        getattr(callback, "cls", None), "http_method_names", None
    )
    return [m for m in names or ["get", "post"] if m in ("get", "post", "patch", "delete")]


@pytest.fixture
def world(api, owner):
    sid = api.post("/api/sessions/", {"title": "private"}, format="json").json()["id"]
    run = run_turn(api, sid, "write a.txt secret\nsay ok")
    token = api.post(f"/api/sessions/{sid}/share/").json()["token"]
    message = Message.objects.filter(session_id=sid).first().id
    part = Part.objects.filter(session_id=sid, type="tool").first().id
    return {
        "session_id": sid,
        "run_id": run["id"],
        "token": token,
        "message": message,
        "part_id": part,
    }


def fill(route: str, world: dict) -> str:
    url = "/" + route
    for key in ("session_id", "run_id", "token", "part_id"):
        url = url.replace(f"<str:{key}>", world[key])
    return url.replace("<path:path>", "a.txt")


def test_every_route_is_in_the_matrix():
    unclassified = [r for r, _ in routes() if kind(r) is None]
    assert not unclassified, f"classify these routes in the matrix: {unclassified}"


def test_outsiders_get_404_on_every_session_and_run_endpoint(world, outsider):
    staff = User.objects.create_user("staffer", password="pw", is_staff=True)
    body = {"message_id": world["message"], "num_turns": 1, "messages": [], "title": "x"}
    checked = 0
    for who in (client_for(outsider), client_for(staff)):  # the outsider also holds the token
        for route, callback in routes():
            if kind(route) not in ("session", "run"):
                continue
            for method in methods(callback):
                url = fill(route, world)
                response = getattr(who, method)(url, body, format="json")
                assert response.status_code == 404, (method, url, response.status_code)
                assert response.json()["error"]["type"] == "NotFound"
                checked += 1
    assert checked > 50


def test_anonymous_gets_401_on_the_api_and_the_login_page_for_pages(world):
    anonymous = client_for(None)
    browser = Client()
    for route, callback in routes():
        k = kind(route)
        url = fill(route, world)
        for method in methods(callback):
            if k in ("session", "run", "collection", "shared"):
                response = getattr(anonymous, method)(url, {}, format="json")
                assert response.status_code == 401, (method, url, response.status_code)
            elif k in ("page-login", "page-session", "page-shared"):
                response = getattr(browser, method)(url)
                if k == "page-login" and method == "post" and route == "sessions/new/":
                    assert response.status_code == 302
                assert response.status_code == 302, (method, url, response.status_code)
                assert "/login/" in response["Location"]


def test_share_holders_read_and_fork_only(world, outsider):
    holder = client_for(outsider)
    token = world["token"]
    assert holder.get(f"/api/shared/{token}/").status_code == 200
    assert holder.get(f"/api/shared/{token}/files/a.txt").content == b"secret"
    assert holder.post(f"/api/shared/{token}/fork/").status_code == 201
    for method in ("post", "patch", "delete", "put"):
        assert getattr(holder, method)(f"/api/shared/{token}/").status_code == 405
    for route, _ in routes():
        if kind(route) == "shared":
            assert holder.get(fill(route, {**world, "token": "wrong"})).status_code in (404, 405)
    pages = Client()
    pages.force_login(outsider)
    assert pages.get(f"/sessions/{world['session_id']}/").status_code == 404
    assert pages.post(f"/sessions/{world['session_id']}/delete/").status_code == 404
    assert pages.get(f"/s/{token}/").status_code == 200


# Reads whose query names something: what the owner's request gives.
OWNER_QUERIES = {"api/sessions/<str:session_id>/compare/": "?a={message}"}


def test_the_owner_reaches_every_read(world, api):
    for route, callback in routes():
        if kind(route) in ("session", "run", "collection", "shared") and "get" in methods(callback):
            response = api.get(fill(route, world) + OWNER_QUERIES.get(route, "").format(**world))
            assert response.status_code == 200, (route, response.status_code)


def test_csrf_is_enforced_on_cookie_authenticated_writes(world, owner):
    browser = Client(enforce_csrf_checks=True)
    browser.force_login(owner)
    for url in ("/api/sessions/", f"/api/sessions/{world['session_id']}/rollback/"):
        response = browser.post(url, {}, content_type="application/json")
        assert response.status_code == 403, url
    assert browser.post(f"/sessions/{world['session_id']}/delete/").status_code == 403
    assert browser.get(f"/api/sessions/{world['session_id']}/").status_code == 200


# "": every other socket path, accepted and closed with 4403 (never a routing error).
WEBSOCKETS = {"ws/sessions/<str:session_id>/": "session", "": "refused"}


def test_every_websocket_route_is_in_the_matrix():
    from config.routing import websocket_urlpatterns

    assert {str(p.pattern) for p in websocket_urlpatterns} == set(WEBSOCKETS)


async def _ws_close_code(path: str, headers: list | None = None) -> int | str | None:
    """4403 (accepted, then closed: not yours), "denied" (refused before the handshake
    completed: the origin), or 1000 (subscribed)."""
    from channels.testing import WebsocketCommunicator

    from config.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=headers or [])
    connected, _ = await communicator.connect(timeout=5)
    if not connected:
        return "denied"
    message = await communicator.receive_output(timeout=5)
    await communicator.disconnect()
    if message["type"] == "websocket.close":
        return message.get("code")
    return 1000 if "subscribed" in message.get("text", "") else None


def test_websockets_close_4403_for_outsiders_and_check_the_origin(world, owner, outsider):
    from asgiref.sync import async_to_sync
    from rest_framework.authtoken.models import Token

    sid = world["session_id"]
    mine = Token.objects.get_or_create(user=owner)[0].key
    theirs = Token.objects.get_or_create(user=outsider)[0].key
    origin = [(b"origin", b"http://localhost"), (b"host", b"localhost")]
    close = async_to_sync(_ws_close_code)
    assert close(f"/ws/sessions/{sid}/?token={theirs}", origin) == 4403
    assert close(f"/ws/sessions/{sid}/", origin) == 4403, "anonymous"
    assert close(f"/ws/sessions/{sid}/?token={mine}", origin) == 1000, "the owner subscribes"
    evil = [(b"origin", b"http://evil.example"), (b"host", b"localhost")]
    assert close(f"/ws/sessions/{sid}/?token={mine}", evil) == "denied", "origin checked"
    same = [(b"origin", b"http://127.0.0.1:8000"), (b"host", b"127.0.0.1:8000")]
    assert close(f"/ws/sessions/{sid}/?token={mine}", same) == 1000
