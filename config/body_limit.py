"""Request bodies bounded before anything stores them.

Django's ASGI handler reads a whole request body (to memory, then to a temporary file) before
any view runs, whatever its size: ``DATA_UPLOAD_MAX_MEMORY_SIZE`` is checked only when a view
reads the body, and never for files. So the bound is set here, in front of it: a body larger
than its path allows is answered ``413`` when its ``Content-Length`` says so, and cut off at the
limit when it streams without one (chunked): no byte past it is read.

The bounds: ``/api/sessions/upload/`` takes ``REPO_MAX_BYTES`` (an archive or a folder, plus
the multipart framing), ``/api/sessions/import/`` ``IMPORT_MAX_BODY_BYTES``, everything else
``DATA_UPLOAD_MAX_MEMORY_SIZE`` plus the same framing allowance.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable
from typing import Any

from django.conf import settings

try:
    from daphne.http_protocol import WebRequest
except ImportError:  # served by another ASGI server
    WebRequest = None

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


async def _refuse(send: Callable[[Message], Awaitable[None]], path: str, limit: int) -> None:
    sentence = f"The request body is larger than this endpoint takes ({limit:,} bytes)."
    if path.startswith("/api/"):
        body = json.dumps({"error": {"type": "PayloadTooLarge", "message": sentence}}).encode()
        kind = b"application/json"
    else:
        body, kind = sentence.encode(), b"text/plain; charset=utf-8"
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
