"""Issue 12, item 9, through Daphne: ASGI reads the body differently from the in-process WSGI
test client (spooled to a file, possibly without a Content-Length). Bad input still answers a
4xx in the contract's JSON shape."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(240)
HUGE = 3 * 1024 * 1024  # over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB by default)


def _error(response: httpx.Response, status: int) -> dict:
    assert response.status_code == status, (response.status_code, response.text[:300])
    assert response.headers["content-type"].startswith("application/json"), response.headers
    body = response.json()
    assert set(body) == {"error"} and set(body["error"]) == {"type", "message"}, body
    return body["error"]


@pytest.mark.django_db(transaction=True)
def test_bad_input_through_daphne_answers_json_4xx(procs, tmp_path):
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        REPO_MAX_BYTES="100000",
    )
    token = Token.objects.create(user=User.objects.create_user("alice", password="pw"))
    host = procs.daphne(env, tmp_path)
    headers = {"Authorization": f"Token {token.key}", "Content-Type": "application/json"}
    big = json.dumps({"messages": [{"role": "user", "content": "x" * HUGE}]}).encode()

    def chunked() -> Iterator[bytes]:  # no Content-Length: Transfer-Encoding: chunked
        for start in range(0, len(big), 64 * 1024):
            yield big[start : start + 64 * 1024]

    try:
        with httpx.Client(base_url=f"http://{host}", headers=headers, timeout=60) as http:
            sid = http.post("/api/sessions/", json={"title": "bad"}).json()["id"]
            # Bodies past their path's bound are refused in front of Django (413), declared
            # or streamed, before Django spools them (config/body_limit.py).
            upload = {"Content-Type": "multipart/form-data; boundary=x"}
            error = _error(http.post("/api/sessions/upload/", content=big, headers=upload), 413)
            assert error["type"] == "PayloadTooLarge"
            ten = b"{" + b" " * (10 * 1024 * 1024) + b"}"
            _error(http.post("/api/sessions/", content=ten), 413)
            _error(
                http.post(
                    "/api/sessions/",
                    content=(ten[i : i + 65536] for i in range(0, len(ten), 65536)),
                ),
                413,
            )
            runs = f"/api/sessions/{sid}/runs/"
            error = _error(http.post(runs, content=big), 400)
            assert error["type"] == "ValidationError" and "limit" in error["message"]
            # Without a Content-Length DRF reads no body at all (``Request._load_stream``):
            # the run request is refused as empty, in the JSON shape, never a 5xx.
            error = _error(http.post(runs, content=chunked()), 400)
            assert error["type"] == "ValidationError"
            for depth in (100, 500, 10_000):
                error = _error(http.post(runs, content="[" * depth + "]" * depth), 400)
                assert "nested deeper" in error["message"]
                error = _error(http.post("/api/sessions/", content='{"a":' * depth), 400)
            _error(http.get(f"/api/sessions/{sid}/files/{'a' * 5_000}"), 400)
            _error(http.get(f"/api/sessions/{sid}/diff/", params={"file": "../x"}), 400)
            assert http.get(f"/api/sessions/{sid}/").status_code == 200, "still serving"
    except Exception:
        print(procs.logs())
        raise
