"""Django's stock middleware, with the hooks that do no I/O run on the server's loop.

Under ASGI, Django runs every hook of a ``MiddlewareMixin`` middleware through
``sync_to_async``: a hand-over to the request's thread and back for each one, two per
middleware, fourteen a request for the eight below (about 80 µs of CPU each on an idle
machine, more under load). Their hooks read and write headers, cookies and lazy attributes
of the request, so here they run inline on the loop, as ``NulGuardMiddleware``
(api/guards.py) does. A hook that can reach the database still runs on the
request's thread: saving a session that was modified, storing messages that were added or
read, a CSRF secret kept in the session. Measured with ``./dev bench --only api``
(bench/api_cost.py): about 1.1–1.5 ms less of the web process's CPU per API request.

In sync mode (WSGI, Django's test ``Client``) these are Django's classes unchanged.
"""

from __future__ import annotations

from typing import Any

from asgiref.sync import sync_to_async
from csp.middleware import CSPMiddleware as _CSPMiddleware
from django.conf import settings
from django.contrib.auth.middleware import AuthenticationMiddleware as _AuthenticationMiddleware
from django.contrib.messages.middleware import MessageMiddleware as _MessageMiddleware
from django.contrib.sessions.middleware import SessionMiddleware as _SessionMiddleware
from django.http import HttpRequest, HttpResponseBase
from django.middleware.clickjacking import XFrameOptionsMiddleware as _XFrameOptionsMiddleware
from django.middleware.common import CommonMiddleware as _CommonMiddleware
from django.middleware.csrf import CsrfViewMiddleware as _CsrfViewMiddleware
from django.middleware.security import SecurityMiddleware as _SecurityMiddleware


class OnTheLoop:
    """Mixed in before a ``MiddlewareMixin`` middleware: in async mode its
    ``process_request`` and ``process_response`` run on the loop, unless
    ``request_needs_thread``/``response_needs_thread`` say they may do I/O this time."""

    get_response: Any

    def request_needs_thread(self, request: HttpRequest) -> bool:
        return False

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        return False

    async def __acall__(self, request: HttpRequest) -> HttpResponseBase:
        # MiddlewareMixin.__acall__, with each hook's thread hop made conditional.
        response = None
        if hasattr(self, "process_request"):
            if self.request_needs_thread(request):
                response = await sync_to_async(self.process_request)(request)
            else:
                response = self.process_request(request)
        response = response or await self.get_response(request)
        if hasattr(self, "process_response"):
            if self.response_needs_thread(request, response):
                response = await sync_to_async(self.process_response)(request, response)
            else:
                response = self.process_response(request, response)
        return response


class SecurityMiddleware(OnTheLoop, _SecurityMiddleware):
    """Headers and the HTTPS redirect."""


class CSPMiddleware(OnTheLoop, _CSPMiddleware):
    """A lazy nonce, then the policy header."""


class CommonMiddleware(OnTheLoop, _CommonMiddleware):
    """The slash redirect (a URL resolve) and Content-Length."""


class AuthenticationMiddleware(OnTheLoop, _AuthenticationMiddleware):
    """Puts a lazy ``request.user`` in place: the view's thread loads it."""


class XFrameOptionsMiddleware(OnTheLoop, _XFrameOptionsMiddleware):
    """One header."""


class CsrfViewMiddleware(OnTheLoop, _CsrfViewMiddleware):
    """The secret is read from, and a new one set in, a cookie; ``CSRF_USE_SESSIONS`` keeps
    it in the session instead, which is the database. (``process_view``, which may parse a
    form, keeps Django's hop.)"""

    def request_needs_thread(self, request: HttpRequest) -> bool:
        return settings.CSRF_USE_SESSIONS

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        return settings.CSRF_USE_SESSIONS


class SessionMiddleware(OnTheLoop, _SessionMiddleware):
    """Puts a lazy session in place; at the end saves it, on the thread, if it changed."""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        session = getattr(request, "session", None)
        return session is not None and (session.modified or settings.SESSION_SAVE_EVERY_REQUEST)


class MessageMiddleware(OnTheLoop, _MessageMiddleware):
    """Puts the message storage in place; at the end stores the messages, on the thread,
    if any were added or read (the fallback storage may write them to the session)."""

    def response_needs_thread(self, request: HttpRequest, response: HttpResponseBase) -> bool:
        storage = getattr(request, "_messages", None)
        return storage is not None and (storage.used or storage.added_new)
