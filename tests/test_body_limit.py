"""Request bodies are bounded in front of Django (config/body_limit.py): Django's ASGI
handler would otherwise read any body whole, to memory and disk, before a view could refuse
it. A declared length past the path's limit is a 413 at once; a chunked body is cut off at
the limit, and no byte after it is read."""

from __future__ import annotations

import json

import pytest

from config.body_limit import BodyLimit, limit_for


def _app_that_reads_everything(seen: list[bytes]):  # noqa: ANN202
    async def app(scope, receive, send):  # noqa: ANN001, ANN202
        while True:
            message = await receive()
            if message["type"] == "http.disconnect":
                return
            seen.append(message.get("body", b""))
            if not message.get("more_body"):
                break
        await send({"type": "http.response.start", "status": 200, "headers": []})
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _call(path: str, chunks: list[bytes], length: int | None = None):  # noqa: ANN202
    headers = [(b"content-length", str(length).encode())] if length is not None else []
    scope = {"type": "http", "path": path, "headers": headers}
    pending = [
        {"type": "http.request", "body": c, "more_body": i < len(chunks) - 1}
        for i, c in enumerate(chunks)
    ]
    pulled: list[int] = []

    async def receive():  # noqa: ANN202
        pulled.append(1)
        return pending.pop(0) if pending else {"type": "http.disconnect"}

    sent: list[dict] = []

    async def send(message):  # noqa: ANN001, ANN202
        sent.append(message)

    seen: list[bytes] = []
    await BodyLimit(_app_that_reads_everything(seen))(scope, receive, send)
    return sent, seen, len(pulled)


async def test_a_declared_length_past_the_limit_is_refused_before_reading(settings):
    settings.REPO_MAX_BYTES = 1000
    limit = limit_for("/api/sessions/upload/")
    sent, seen, pulled = await _call("/api/sessions/upload/", [b"x"], length=limit + 1)
    assert sent[0]["status"] == 413 and pulled == 0 and seen == []
    answer = json.loads(sent[1]["body"])
    assert answer["error"]["type"] == "PayloadTooLarge"


async def test_a_chunked_body_is_cut_off_at_the_limit(settings):
    limit = limit_for("/api/sessions/")
    chunk = b"y" * (1024 * 1024)
    chunks = [chunk] * (limit // len(chunk) + 5)
    sent, _seen, pulled = await _call("/api/sessions/", chunks)
    assert [m.get("status") for m in sent if m["type"] == "http.response.start"] == [413]
    assert pulled <= limit // len(chunk) + 2, "nothing read far past the limit"


async def test_bodies_within_the_limit_pass(settings):
    sent, seen, _ = await _call("/api/sessions/", [b"{}"], length=2)
    assert sent[0]["status"] == 200 and seen == [b"{}"]


@pytest.mark.parametrize(
    ("path", "setting"),
    [
        ("/api/sessions/upload/", "REPO_MAX_BYTES"),
        ("/api/sessions/import/", "IMPORT_MAX_BODY_BYTES"),
    ],
)
def test_the_large_endpoints_have_their_own_limits(settings, path, setting):
    setattr(settings, setting, 50 * 1024 * 1024)
    assert limit_for(path) > limit_for("/api/sessions/") > settings.DATA_UPLOAD_MAX_MEMORY_SIZE
