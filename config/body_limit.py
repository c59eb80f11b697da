"""Request bodies bounded before anything stores them.

Django's ASGI handler reads a whole request body (to memory, then to a temporary file) before
any view runs, whatever its size: ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is checked only when a view
reads the body, and never for files. And Daphne, under it, reads the whole body too (Twisted
spools it to a temporary file past 100 kB) before the application sees a byte. So the bound
holds in two places: in Daphne's requests themselves (``daphne_bounds_bodies``), which answer
``413`` and close the connection as soon as a body passes its path's limit, declared or
streamed (the socket not read again, nothing past the limit stored); and in front of Django
(``BodyLimit``), the same bound for any other ASGI server: a body larger than its path allows
is answered ``413`` when its ``Content-Length`` says so, and cut off at the limit when it
streams without one (chunked).

The bounds: ``/api/sessions/upload/`` takes ``REPO_MAX_BYTES`` (an archive or a folder, plus
the multipart framing), ``/api/sessions/import/`` ``IMPORT_MAX_BODY_BYTES``, everything else
``DATA_UPLOAD_MAX_MEMORY_SIZE`` plus the same framing allowance.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any
from urllib.parse import unquote

from django.conf import settings

try:
    from daphne.http_protocol import WebRequest
    from twisted.web.http import HTTPChannel
except ImportError:  # served by another ASGI server
    WebRequest = HTTPChannel = None

FRAMING = 1024 * 1024  # multipart boundaries and headers, form fields beside the files

Scope = dict[str, Any]
Message = dict[str, Any]


def limit_for(path: str) -> int:
    """The most bytes a request body to ``path`` may have (0: no bound)."""
    if path == "/api/sessions/upload/":
        return settings.REPO_MAX_BYTES + FRAMING if settings.REPO_MAX_BYTES else 0
    if path == "/api/sessions/import/":
        return settings.IMPORT_MAX_BODY_BYTES + FRAMING
    return settings.DATA_UPLOAD_MAX_MEMORY_SIZE + FRAMING


def _answer(path: str, limit: int) -> tuple[bytes, bytes]:
    """The 413's body and its content type: the API's JSON error shape under ``/api/``."""
    sentence = f"The request body is larger than this endpoint takes ({limit:,} bytes)."
    if path.startswith("/api/"):
        body = json.dumps({"error": {"type": "PayloadTooLarge", "message": sentence}}).encode()
        return body, b"application/json"
    return sentence.encode(), b"text/plain; charset=utf-8"


async def _refuse(send: Callable[[Message], Awaitable[None]], path: str, limit: int) -> None:
    body, kind = _answer(path, limit)
    await send(
        {
            "type": "http.response.start",
            "status": 413,
            "headers": [
                (b"content-type", kind),
                (b"content-length", str(len(body)).encode()),
                (b"connection", b"close"),
            ],
        }
    )
    await send({"type": "http.response.body", "body": body})


class BodyLimit:
    """ASGI middleware: see the module."""

    def __init__(self, app: Callable[..., Awaitable[None]]) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        path = scope.get("path", "")
        limit = limit_for(path)
        if not limit:
            return await self.app(scope, receive, send)
        declared = dict(scope.get("headers") or []).get(b"content-length", b"")
        if declared.isdigit() and int(declared) > limit:
            return await _refuse(send, path, limit)
        received = 0
        refused = False

        async def bounded_receive() -> Message:
            nonlocal received, refused
            if refused:
                return {"type": "http.disconnect"}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    refused = True
                    await _refuse(send, path, limit)
                    return {"type": "http.disconnect"}
            return message

        async def guarded_send(message: Message) -> None:
            if not refused:  # the 413 is the answer; the application's is not sent after it
                await send(message)

        return await self.app(scope, bounded_receive, guarded_send)


def daphne_parses_no_forms() -> None:
    """Daphne's requests are Twisted's, which read a whole ``multipart/form-data`` body into
    memory and parse it into ``request.args`` before the application sees a byte — an
    upload's every byte, twice, in the web process, and a bare ``400`` for a body it cannot
    parse. Daphne never uses ``args`` (Django parses the body it is sent), so its requests
    are made without that parse (Twisted's own switch, ``parsePOSTFormSubmission``)."""
    if WebRequest is None or getattr(WebRequest, "_forms_unparsed", False):
        return
    made = WebRequest.__init__

    def __init__(self, *args: Any, **kwargs: Any) -> None:  # noqa: ANN001, N807
        kwargs.setdefault("parsePOSTFormSubmission", False)
        made(self, *args, **kwargs)

    WebRequest.__init__ = __init__
    WebRequest._forms_unparsed = True


def daphne_bounds_bodies() -> None:
    """Daphne's requests are Twisted's, which read the whole body (to a temporary file past
    100 kB) before Daphne hands the application a byte of it: ``BodyLimit``'s 413 came after
    the disk was spent, and parallel chunked bodies could fill it before any login. So its
    requests count the body as Twisted's channel decodes it: a ``Content-Length`` past the
    path's limit is answered 413 before a byte of the body is read (and without the
    ``100 Continue`` an ``Expect`` asks for), a body that streams past it (chunked) as soon as
    it does; either way the connection is then closed, the socket not read again and nothing
    past the limit stored. Bodies within their limit, and sockets' upgrades, go on as before.

    HTTP/1.1 only: Daphne speaks HTTP/2 only with the ``h2`` package and a TLS endpoint,
    neither of which the project installs; a request on any other channel is left to
    ``BodyLimit``."""
    if WebRequest is None or getattr(WebRequest, "_bodies_bounded", False):
        return
    got_length, take_chunk = WebRequest.gotLength, WebRequest.handleContentChunk
    received = WebRequest.requestReceived

    def gotLength(self, length: int | None) -> None:  # noqa: ANN001, N802 - Twisted's names
        self._body_path = _path_of(self)
        self._body_limit = limit_for(self._body_path) if self._body_path is not None else 0
        if self._body_limit and length is not None and length > self._body_limit:
            got_length(self, 0)  # an empty buffer, not a temporary file
            _refuse_on_connection(self)
        else:
            got_length(self, length)

    def handleContentChunk(self, data: bytes) -> None:  # noqa: ANN001, N802
        if self._body_refused:  # the rest of what the last read of the socket brought
            return
        self._body_received += len(data)
        if self._body_limit and self._body_received > self._body_limit:
            _refuse_on_connection(self)
        else:
            take_chunk(self, data)

    def requestReceived(self, command: bytes, path: bytes, version: bytes) -> None:  # noqa: ANN001, N802
        if not self._body_refused:  # a body refused is never the application's
            received(self, command, path, version)

    WebRequest._body_limit, WebRequest._body_received, WebRequest._body_refused = 0, 0, False
    WebRequest.gotLength = gotLength
    WebRequest.handleContentChunk = handleContentChunk
    WebRequest.requestReceived = requestReceived
    WebRequest._bodies_bounded = True


def _path_of(request: Any) -> str | None:
    """The path of a request whose headers Twisted's HTTP/1.1 channel has read. It is not on
    the request until its body is complete: the channel holds the request target, which
    Daphne makes the scope's path the same way (the query cut off, percent-decoded)."""
    if not isinstance(request.channel, HTTPChannel):
        return None
    target = request.channel._path.split(b"?", 1)[0]
    return unquote(target.decode("ascii", "replace"))


def _refuse_on_connection(request: Any) -> None:
    """Answer 413 on the request's connection and close it: Twisted stops reading the socket
    at once (``loseConnection``) and closes it when the answer is written."""
    request._body_refused = True
    request.requestHeaders.removeHeader(b"Expect")  # no "100 Continue" after the answer
    request.content.close()  # what was stored of the body, at most the limit
    body, kind = _answer(request._body_path, request._body_limit)
    head = (
        b"HTTP/1.1 413 Payload Too Large\r\nContent-Type: %s\r\nContent-Length: %d\r\n"
        b"Connection: close\r\n\r\n" % (kind, len(body))
    )
    request.channel.transport.write(head + body)
    request.channel.loseConnection()
