"""Websocket origin check. Channels' ``AllowedHostsOriginValidator`` lets every origin in
when ``ALLOWED_HOSTS`` is ``*`` (our default), so a page on any site could open a socket with
a visitor's session cookie. This one accepts a browser's socket only from the same origin as
the host it connects to, or from ``ALLOWED_HOSTS`` entries that are not wildcards. Clients
that send no ``Origin`` (scripts using ``?token=``) are not browsers and pass."""

from __future__ import annotations

from urllib.parse import urlparse

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import validate_host


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1")
    return None


def origin_allowed(scope: dict) -> bool:
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    parsed = urlparse(origin)
    if not parsed.hostname:
        return False
    host = _header(scope, b"host") or ""
    if parsed.netloc.lower() == host.lower():
        return True
    explicit = [h for h in settings.ALLOWED_HOSTS if h != "*"]
    return bool(explicit) and validate_host(parsed.hostname, explicit)


class SameOriginValidator:
    def __init__(self, application) -> None:  # noqa: ANN001
        self.application = application

    async def __call__(self, scope, receive, send):  # noqa: ANN001, ANN204
        if scope["type"] == "websocket" and not origin_allowed(scope):
            denier = WebsocketDenier()
            return await denier(scope, receive, send)
        return await self.application(scope, receive, send)
