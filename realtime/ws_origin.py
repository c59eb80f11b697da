"""Websocket origin check. Channels' ``AllowedHostsOriginValidator`` lets every origin in
when ``ALLOWED_HOSTS`` is ``*`` (our default), so a page on any site could open a socket with
a visitor's session cookie. This one accepts a browser's socket only from the same origin as
the host it connects to — scheme, host and port — or from ``ALLOWED_HOSTS`` entries that are
not wildcards, over the expected scheme. Clients that send no ``Origin`` (scripts using
``?token=``) are not browsers and pass.

The scheme counts: ``http://host`` and ``https://host`` are different origins, and a page
served over plain http (or one of its injected scripts) must not reach an https site's
sockets with its cookie. The expected scheme is https when the socket itself came over TLS
(``wss``) or the deployment says it is served over HTTPS (``settings.HTTPS``, e.g. behind a
TLS-terminating proxy, where the socket reaches us as plain ``ws``)."""

from __future__ import annotations

from urllib.parse import urlsplit

from channels.security.websocket import WebsocketDenier
from django.conf import settings
from django.http.request import validate_host

DEFAULT_PORTS = {"http": 80, "https": 443}


def _header(scope: dict, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key.lower() == name:
            return value.decode("latin1")
    return None


def expected_scheme(scope: dict) -> str:
    if scope.get("scheme") == "wss" or getattr(settings, "HTTPS", False):
        return "https"
    return "http"


def _host_port(netloc: str, scheme: str) -> tuple[str, int] | None:
    """(host, port) of a ``host[:port]``, the scheme's default port filled in; None when it
    does not parse."""
    try:
        parts = urlsplit(f"//{netloc}")
        port = parts.port
    except ValueError:
        return None
    if not parts.hostname or parts.username is not None or parts.password is not None:
        return None
    return parts.hostname.lower(), port or DEFAULT_PORTS[scheme]


def origin_allowed(scope: dict) -> bool:
    origin = _header(scope, b"origin")
    if origin is None:
        return True
    try:
        parsed = urlsplit(origin)
    except ValueError:
        return False
    scheme = expected_scheme(scope)
    if parsed.scheme.lower() != scheme or not parsed.hostname:
        return False
    own = _host_port(_header(scope, b"host") or "", scheme)
    if own is not None and own == _host_port(parsed.netloc, scheme):
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
