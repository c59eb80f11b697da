"""config/middleware.py: under ASGI, Django's stock middleware runs its I/O-free hooks on the
loop, and goes to the request's thread only for what may reach the database.

The requests are driven from the test's thread (``async_to_sync``), so that the views share
the test's database connection, as in tests/test_login_security.py."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

import pytest
from asgiref.sync import SyncToAsync, async_to_sync
from django.conf import settings as django_settings
from django.contrib.messages import get_messages
from django.contrib.messages.storage import default_storage
from django.contrib.sessions.models import Session as StoredSession
from django.http import HttpResponse
from django.test import AsyncClient, RequestFactory
from rest_framework.authtoken.models import Token

from config import middleware
from sessions_app.services.sessions import create_session

STOCK = {
    "SecurityMiddleware": "django.middleware.security.SecurityMiddleware",
    "CSPMiddleware": "csp.middleware.CSPMiddleware",
    "SessionMiddleware": "django.contrib.sessions.middleware.SessionMiddleware",
    "CommonMiddleware": "django.middleware.common.CommonMiddleware",
    "CsrfViewMiddleware": "django.middleware.csrf.CsrfViewMiddleware",
    "AuthenticationMiddleware": "django.contrib.auth.middleware.AuthenticationMiddleware",
    "MessageMiddleware": "django.contrib.messages.middleware.MessageMiddleware",
    "XFrameOptionsMiddleware": "django.middleware.clickjacking.XFrameOptionsMiddleware",
}

# What the project listed before config/middleware.py.
DJANGOS = [
    re.sub(r"^config\.middleware\.(\w+)$", lambda m: STOCK[m.group(1)], name)
    for name in django_settings.MIDDLEWARE
]


@contextmanager
def hops() -> Iterator[list[str]]:
    """Every ``sync_to_async`` call made meanwhile: a hand-over to a thread and back."""
    calls: list[str] = []
    original = SyncToAsync.__call__

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(getattr(self.func, "__qualname__", repr(self.func)))
        return original(self, *args, **kwargs)

    with mock.patch.object(SyncToAsync, "__call__", counted):
        yield calls


def test_every_stock_middleware_is_replaced_by_its_loop_version():
    assert all(not name.startswith("django.") for name in django_settings.MIDDLEWARE)
    assert all(name.startswith(("django.", "csp.", "api.", "axes.")) for name in DJANGOS)
    assert len(DJANGOS) == len(django_settings.MIDDLEWARE)


def test_an_api_request_under_asgi_makes_fourteen_fewer_thread_hops(owner, settings):
    session = create_session(owner=owner)
    token = Token.objects.create(user=owner).key

    def get() -> tuple[int, list[str]]:
        get = async_to_sync(AsyncClient().get)
        headers = {"authorization": f"Token {token}"}
        with hops() as calls:
            response = get(f"/api/sessions/{session.id}/", headers=headers)
        return response.status_code, calls

    status, ours = get()
    settings.MIDDLEWARE = DJANGOS
    stock_status, stock = get()
    assert status == stock_status == 200
    # Django's: two hops for each of the six with both hooks, one for the two with one.
    assert len(stock) - len(ours) == 14
    assert not any("process_request" in c or "process_response" in c for c in ours), ours


def test_a_form_login_under_asgi_saves_its_session_on_the_thread(owner):
    """The login modifies the session: saving it is a database write, which Django refuses
    to make on the loop (SynchronousOnlyOperation, a 500)."""
    client = AsyncClient(enforce_csrf_checks=True)
    page = async_to_sync(client.get)("/login/")
    assert page.status_code == 200
    token = page.cookies["csrftoken"].value
    with hops() as calls:
        response = async_to_sync(client.post)(
            "/login/",
            {"username": "alice", "password": "alice-pw", "csrfmiddlewaretoken": token},
        )
    assert response.status_code == 302, response.content[:300]
    assert "SessionMiddleware.process_response" in calls
    key = response.cookies[django_settings.SESSION_COOKIE_NAME].value
    assert StoredSession.objects.filter(session_key=key).exists()
    assert async_to_sync(client.get)("/").status_code == 200  # logged in by that session


def test_a_request_without_a_token_is_still_refused_by_csrf_under_asgi(owner):
    client = AsyncClient(enforce_csrf_checks=True)
    response = async_to_sync(client.post)("/login/", {"username": "alice", "password": "x"})
    assert response.status_code == 403


def _request_with_messages(*, add: bool, read: bool):  # noqa: ANN202
    request = RequestFactory().get("/")
    request.session = {}
    request._messages = default_storage(request)
    if add:
        request._messages.add(20, "hello")
    if read:
        list(get_messages(request))
    return request


@pytest.mark.parametrize(
    "add, read, thread", [(False, False, False), (True, False, True), (False, True, True)]
)
def test_messages_go_to_the_thread_only_when_added_or_read(add, read, thread):
    hook = middleware.MessageMiddleware(lambda request: HttpResponse())
    request = _request_with_messages(add=add, read=read)
    assert hook.response_needs_thread(request, HttpResponse()) is thread


@pytest.mark.parametrize("modified", [False, True])
def test_a_session_goes_to_the_thread_only_when_it_changed(settings, modified):
    settings.SESSION_SAVE_EVERY_REQUEST = False
    hook = middleware.SessionMiddleware(lambda request: HttpResponse())
    request = RequestFactory().get("/")
    hook.process_request(request)
    if modified:
        request.session["k"] = "v"
    assert hook.response_needs_thread(request, HttpResponse()) is modified
    settings.SESSION_SAVE_EVERY_REQUEST = True
    assert hook.response_needs_thread(request, HttpResponse()) is True


def test_csrf_kept_in_the_session_goes_to_the_thread(settings):
    hook = middleware.CsrfViewMiddleware(lambda request: HttpResponse())
    request = RequestFactory().get("/")
    assert not hook.request_needs_thread(request)
    settings.CSRF_USE_SESSIONS = True
    assert hook.request_needs_thread(request)
    assert hook.response_needs_thread(request, HttpResponse())
