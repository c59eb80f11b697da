"""Websocket security (issue 12, items 8 and 10).

Item 8: a socket outlives the credentials it was opened with. Every open socket rechecks them
every ``WS_AUTH_RECHECK_SECONDS`` and closes with 4403 when the user is deactivated or
deleted, the token deleted, the Django session logged out, the password changed, or the
conversation deleted or given away; an untouched socket stays open and keeps receiving.

Item 10: the origin check compares the scheme too (an http page must not open an https
site's socket with its cookie, nor the reverse)."""

from __future__ import annotations

import json
import time

import pytest
from asgiref.sync import sync_to_async
from channels.testing import WebsocketCommunicator
from django.conf import settings as django_settings
from django.contrib.auth.models import User
from django.contrib.sessions.backends.db import SessionStore
from django.test import Client
from rest_framework.authtoken.models import Token

from realtime import events
from realtime.ws_origin import origin_allowed
from sessions_app.models import Session
from tests.conftest import client_for
from tests.support.waits import subscribed, until

INTERVAL = 0.3
# The close must come within one interval of the change, plus the recheck's queries on a
# loaded CI machine.
DEADLINE = INTERVAL + 1.5
HOST = [(b"host", b"localhost"), (b"origin", b"http://localhost")]

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _fast_recheck(settings):
    settings.WS_AUTH_RECHECK_SECONDS = INTERVAL


@pytest.fixture
def sid(owner) -> str:
    return client_for(owner).post("/api/sessions/", {"title": "ws"}, format="json").json()["id"]


@pytest.fixture
def token(owner) -> str:
    return Token.objects.get_or_create(user=owner)[0].key


@pytest.fixture
def cookie(owner) -> str:
    """The owner's Django session key, logged in as the login page would."""
    browser = Client()
    browser.force_login(owner)
    return browser.cookies[django_settings.SESSION_COOKIE_NAME].value


def _cookie_header(key: str) -> list[tuple[bytes, bytes]]:
    return [*HOST, (b"cookie", f"{django_settings.SESSION_COOKIE_NAME}={key}".encode())]


async def _subscribed(path: str, headers: list) -> WebsocketCommunicator:
    from config.asgi import application

    communicator = WebsocketCommunicator(application, path, headers=headers)
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    first = await communicator.receive_output(timeout=5)
    assert first["type"] == "websocket.send" and '"subscribed"' in first["text"], first
    return communicator


async def _close_code(communicator: WebsocketCommunicator, within: float) -> int | None:
    """The close code of the first close frame within ``within`` seconds; events that
    arrive before it are skipped."""
    deadline = time.monotonic() + within
    while (left := deadline - time.monotonic()) > 0:
        try:
            message = await communicator.receive_output(timeout=left)
        except TimeoutError:
            break
        if message["type"] == "websocket.close":
            return message.get("code")
    raise AssertionError(f"the socket stayed open for {within}s")


async def _stays_open(communicator: WebsocketCommunicator, seconds: float) -> None:
    assert await communicator.receive_nothing(timeout=seconds, interval=0.05)


async def _revoked_closes(path: str, headers: list, revoke) -> None:  # noqa: ANN001
    communicator = await _subscribed(path, headers)
    await _stays_open(communicator, 2 * INTERVAL)  # the recheck passes while nothing changed
    await sync_to_async(revoke)()
    started = time.monotonic()
    assert await _close_code(communicator, DEADLINE) == 4403
    assert time.monotonic() - started < DEADLINE
    await communicator.disconnect()


# -- token sockets ---------------------------------------------------------------------------


async def test_it_closes_a_token_socket_when_the_token_is_deleted(sid, token):
    await _revoked_closes(
        f"/ws/sessions/{sid}/?token={token}", HOST, lambda: Token.objects.filter(key=token).delete()
    )


async def test_it_closes_a_token_socket_when_the_user_is_deactivated(sid, token, owner):
    await _revoked_closes(
        f"/ws/sessions/{sid}/?token={token}",
        HOST,
        lambda: User.objects.filter(pk=owner.pk).update(is_active=False),
    )


async def test_it_closes_a_token_socket_when_the_user_is_deleted(sid, token, owner):
    await _revoked_closes(
        f"/ws/sessions/{sid}/?token={token}",
        HOST,
        lambda: User.objects.filter(pk=owner.pk).delete(),
    )


async def test_it_closes_a_token_socket_when_the_conversation_is_deleted(sid, token):
    await _revoked_closes(
        f"/ws/sessions/{sid}/?token={token}", HOST, lambda: Session.objects.filter(id=sid).delete()
    )


async def test_it_closes_a_token_socket_when_the_conversation_changes_owner(sid, token, outsider):
    await _revoked_closes(
        f"/ws/sessions/{sid}/?token={token}",
        HOST,
        lambda: Session.objects.filter(id=sid).update(owner=outsider),
    )


# -- cookie sockets --------------------------------------------------------------------------


async def test_it_closes_a_cookie_socket_when_the_session_is_logged_out(sid, cookie):
    # What logout() does to the session: flush() deletes its row.
    await _revoked_closes(
        f"/ws/sessions/{sid}/", _cookie_header(cookie), lambda: SessionStore(cookie).flush()
    )


async def test_it_closes_a_cookie_socket_when_the_password_changes(sid, cookie, owner):
    def change_password() -> None:
        user = User.objects.get(pk=owner.pk)
        user.set_password("a new one")
        user.save()

    await _revoked_closes(f"/ws/sessions/{sid}/", _cookie_header(cookie), change_password)


async def test_it_closes_a_cookie_socket_when_the_user_is_deactivated(sid, cookie, owner):
    await _revoked_closes(
        f"/ws/sessions/{sid}/",
        _cookie_header(cookie),
        lambda: User.objects.filter(pk=owner.pk).update(is_active=False),
    )


async def test_it_closes_a_cookie_socket_when_the_user_is_deleted(sid, cookie, owner):
    await _revoked_closes(
        f"/ws/sessions/{sid}/",
        _cookie_header(cookie),
        lambda: User.objects.filter(pk=owner.pk).delete(),
    )


async def test_it_closes_a_cookie_socket_when_the_conversation_is_deleted(sid, cookie):
    await _revoked_closes(
        f"/ws/sessions/{sid}/",
        _cookie_header(cookie),
        lambda: Session.objects.filter(id=sid).delete(),
    )


# -- sockets left alone ----------------------------------------------------------------------


async def test_an_untouched_socket_stays_open_and_keeps_receiving(sid, token, cookie, outsider):
    by_token = await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST)
    by_cookie = await _subscribed(f"/ws/sessions/{sid}/", _cookie_header(cookie))
    # Someone else's credentials changing touch neither socket.
    await sync_to_async(lambda: User.objects.filter(pk=outsider.pk).update(is_active=False))()
    await _stays_open(by_token, 5 * INTERVAL)
    await subscribed(events.group_name(sid))  # Redis delivers to this process from now on
    events.publish(sid, events.SESSION_STATUS, status="idle", run_id=None)
    for communicator in (by_token, by_cookie):
        event = json.loads(await communicator.receive_from(timeout=5))
        assert event["type"] == events.SESSION_STATUS and event["session_id"] == sid
        await communicator.disconnect()


async def test_a_cookie_socket_s_frames_go_to_the_server_without_a_session_wrapper(
    sid, cookie, outsider, monkeypatch
):
    """A socket never saves a Django session: its frames (one per few tokens per listener)
    must not pass through Channels' session middleware's send, which looked at the session
    for a save on every one (a twentieth of the web process's time while runs streamed). The
    cookie still decides who the socket is: the owner's subscribes, an outsider's is closed."""
    from channels.sessions import InstanceSessionWrapper

    wrapped = []
    real = InstanceSessionWrapper.send

    async def counted(self, message):  # noqa: ANN001, ANN202
        wrapped.append(message["type"])
        return await real(self, message)

    monkeypatch.setattr(InstanceSessionWrapper, "send", counted)
    by_cookie = await _subscribed(f"/ws/sessions/{sid}/", _cookie_header(cookie))
    await subscribed(events.group_name(sid))  # Redis delivers to this process from now on
    events.publish(sid, events.SESSION_STATUS, status="idle", run_id=None)
    event = json.loads(await by_cookie.receive_from(timeout=5))
    assert event["type"] == events.SESSION_STATUS
    await by_cookie.disconnect()
    assert wrapped == []

    browser = Client()
    await sync_to_async(browser.force_login)(outsider)
    key = browser.cookies[django_settings.SESSION_COOKIE_NAME].value
    from config.asgi import application

    theirs = WebsocketCommunicator(application, f"/ws/sessions/{sid}/", headers=_cookie_header(key))
    await theirs.connect(timeout=5)
    assert await _close_code(theirs, 5) == 4403


async def test_the_watch_forgets_the_socket_and_ends_with_the_last(sid, token):
    from sessions_app.socket_watch import watch_for_this_loop

    communicator = await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST)
    watch = watch_for_this_loop()
    assert len(watch.sockets) == 1 and not watch.task.done()
    await communicator.disconnect()
    await until(lambda: watch.sockets == {} and watch.task.done(), 10, "the watch to end")


async def test_one_recheck_serves_every_socket_of_the_process(sid, token, monkeypatch):
    """All the sockets of a process are rechecked together, in one call (a query or two),
    not one call and one fresh connection per socket."""
    from sessions_app import socket_watch

    calls: list[int] = []
    original = socket_watch.still_allowed

    def counted(items):  # noqa: ANN001, ANN202
        calls.append(len(items))
        return original(items)

    monkeypatch.setattr(socket_watch, "still_allowed", counted)
    sockets = [await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST) for _ in range(5)]
    await until(lambda: calls and max(calls) == 5, 10, "one recheck of the five sockets")
    assert max(calls) == 5
    for communicator in sockets:
        await communicator.disconnect()


async def test_a_recheck_that_fails_keeps_the_socket_and_the_next_one_decides(
    sid, token, monkeypatch
):
    from sessions_app import socket_watch

    answers = iter([RuntimeError("database away"), RuntimeError("still away"), [False]])

    def flaky(items):  # noqa: ANN001, ANN202
        answer = next(answers, [False] * len(items))
        if isinstance(answer, Exception):
            raise answer
        return answer

    communicator = await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST)
    monkeypatch.setattr(socket_watch, "still_allowed", flaky)
    assert await _close_code(communicator, 4 * INTERVAL + 1.0) == 4403
    assert next(answers, None) is None, "closed only after the recheck that answered"
    await communicator.disconnect()


# -- frames ----------------------------------------------------------------------------------


async def test_a_ping_is_answered_whatever_its_spacing(sid, token):
    communicator = await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST)
    for frame in ('{"type":"ping"}', '{ "type" : "ping" }', '\n{"type": "ping", "n": 1}\n'):
        await communicator.send_to(text_data=frame)
        assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "pong"}
    await communicator.disconnect()


async def test_frames_that_are_not_json_objects_are_ignored(sid, token):
    communicator = await _subscribed(f"/ws/sessions/{sid}/?token={token}", HOST)
    for frame in ("ping", "{", "[" * 100_000, '"ping"', "[]", '{"type": 1}'):
        await communicator.send_to(text_data=frame)
    await communicator.send_to(bytes_data=b'{"type": "ping"}')
    await _stays_open(communicator, 0.2)
    await communicator.send_to(text_data='{"type": "ping"}')
    assert json.loads(await communicator.receive_from(timeout=5)) == {"type": "pong"}
    await communicator.disconnect()


# -- the origin's scheme (item 10) -----------------------------------------------------------


def _scope(origin: str | None, host: str = "localhost", scheme: str = "ws") -> dict:
    headers = [(b"host", host.encode())]
    if origin is not None:
        headers.append((b"origin", origin.encode()))
    return {"type": "websocket", "scheme": scheme, "headers": headers}


def test_an_http_site_refuses_an_https_origin():
    assert not origin_allowed(_scope("https://localhost"))
    assert not origin_allowed(_scope("https://localhost:8000", host="localhost:8000"))


def test_an_https_site_refuses_an_http_origin(settings):
    assert not origin_allowed(_scope("http://localhost", scheme="wss"))
    settings.HTTPS = True  # behind a TLS-terminating proxy: the socket reaches us as ws
    assert not origin_allowed(_scope("http://localhost"))
    assert not origin_allowed(_scope("http://localhost:8000", host="localhost:8000"))


def test_the_same_scheme_host_and_port_is_accepted(settings):
    assert origin_allowed(_scope("http://localhost"))
    assert origin_allowed(_scope("http://LocalHost:8000", host="localhost:8000"))
    assert origin_allowed(_scope("https://example.com", host="example.com", scheme="wss"))
    # The default port, written or not, is the same origin.
    assert origin_allowed(_scope("https://example.com", host="example.com:443", scheme="wss"))
    settings.HTTPS = True
    assert origin_allowed(_scope("https://example.com", host="example.com"))


def test_another_host_or_port_is_refused():
    assert not origin_allowed(_scope("http://evil.example"))
    assert not origin_allowed(_scope("http://localhost:8001", host="localhost:8000"))
    assert not origin_allowed(_scope("null"))
    assert not origin_allowed(_scope("http://[::1"))


def test_explicit_allowed_hosts_need_the_expected_scheme(settings):
    settings.ALLOWED_HOSTS = ["app.example.com", "localhost"]
    assert origin_allowed(_scope("http://app.example.com"))
    assert not origin_allowed(_scope("https://app.example.com"))
    settings.HTTPS = True
    assert origin_allowed(_scope("https://app.example.com"))
    assert not origin_allowed(_scope("http://app.example.com"))


def test_a_client_without_origin_passes(settings):
    assert origin_allowed(_scope(None))
    settings.HTTPS = True
    assert origin_allowed(_scope(None, scheme="wss"))


async def test_the_app_denies_a_socket_from_the_other_scheme(sid, token):
    from config.asgi import application

    for origin, expected in ((b"https://localhost", False), (b"http://localhost", True)):
        headers = [(b"host", b"localhost"), (b"origin", origin)]
        communicator = WebsocketCommunicator(
            application, f"/ws/sessions/{sid}/?token={token}", headers=headers
        )
        connected, _ = await communicator.connect(timeout=5)
        assert connected is expected, origin
        if connected:
            await communicator.disconnect()


# -- paths and credentials no session has (issue 14, finding 14) ------------------------------


@pytest.mark.parametrize(
    "path",
    [
        "/ws/sessions/..%2F{sid}/?token={token}",  # was the router's "No route found": a 500
        "/ws/sessions/{sid}/extra/?token={token}",
        "/ws/other/?token={token}",
        "/ws/sessions/ses_%00/?token={token}",  # a NUL never reaches a query
        "/ws/sessions/{sid}/?token=%00",
        "/ws/sessions/%E2%82%AC/?token={token}",  # nor a non-ASCII group name
    ],
)
async def test_a_socket_path_or_token_no_session_has_is_closed_with_4403(sid, token, path):
    from config.asgi import application

    communicator = WebsocketCommunicator(
        application, path.format(sid=sid, token=token), headers=HOST
    )
    connected, _ = await communicator.connect(timeout=5)
    assert connected
    assert await _close_code(communicator, 5) == 4403
    await communicator.disconnect()


async def test_a_frame_for_a_client_that_has_gone_is_dropped_not_raised():
    """An event that reaches the consumer after its client went (Daphne raises autobahn's
    ``Disconnected`` for the send) must not end the consumer before its ``disconnect``
    leaves the group and the socket watch: it is dropped."""
    from autobahn.exception import Disconnected

    from sessions_app.consumers import SessionConsumer

    consumer = SessionConsumer()
    sent: list[dict] = []

    async def gone(message: dict) -> None:
        sent.append(message)
        raise Disconnected("Attempt to send on a closed protocol")

    consumer.base_send = gone
    await consumer.session_event({"type": "session.event", "text": '{"type": "text-delta"}'})
    await consumer.send_json({"type": "pong"})
    assert [m["type"] for m in sent] == ["websocket.send", "websocket.send"]
