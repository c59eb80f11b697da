"""Issue 42, finding 5: a body's limit holds in Daphne itself (config/body_limit.py,
``daphne_bounds_bodies``). Daphne (Twisted) read a whole body, spooled to a temporary file,
before the application's 413: an unauthenticated chunked login of 400 MiB was read to the end.
Now a body past its path's limit is answered 413 (JSON) and the connection closed once the
limit is passed, and only the limit is stored; a declared length past it, before the body.

Measured on a raw socket against a real Daphne: the bytes the client got into the connection
before the server stopped reading (kernel buffers included), and the bytes the Daphne process
wrote (``wchar`` of /proc/<pid>/io: the spooled body is all of it)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import socket
import time
import zipfile
from pathlib import Path

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from config.body_limit import FRAMING, limit_for
from tests.conftest import wait_until

from .stack import Processes, base_env, services_database_url

pytestmark = pytest.mark.timeout(60)
MiB = 1024 * 1024
REPO_MAX_BYTES = 100_000  # the upload endpoint's limit here: this plus FRAMING, about 1.1 MiB
SENT_AT_MOST = 64 * MiB


@pytest.fixture(scope="module")
def daphne(django_db_setup, tmp_path_factory):  # noqa: ANN001, ANN201
    tmp = tmp_path_factory.mktemp("body-limit")
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp / "ws"),
        REPO_MAX_BYTES=str(REPO_MAX_BYTES),
    )
    procs = Processes()
    try:
        host = procs.daphne(env, tmp)
        yield host, procs.procs[0][0].pid
    except Exception:
        print(procs.logs())
        raise
    finally:
        procs.stop()


def _written(pid: int) -> int:
    """What the Daphne process has written to files (its temporary body files among them)."""
    for line in Path(f"/proc/{pid}/io").read_text().splitlines():
        if line.startswith("wchar:"):
            return int(line.split()[1])
    raise AssertionError("no wchar in /proc/<pid>/io")


def _holds_connection_from(pid: int, client_port: int) -> bool:
    """Whether process ``pid`` still has open the socket of its connection from our
    ``client_port`` (its inode among the process's descriptors): once it has not, it reads,
    and so spools, nothing more of that request."""
    fds = Path(f"/proc/{pid}/fd")
    inodes = set()
    for fd in fds.iterdir():
        with contextlib.suppress(OSError):
            target = os.readlink(fd)
            if target.startswith("socket:["):
                inodes.add(target[len("socket:[") : -1])
    for table in ("tcp", "tcp6"):
        with contextlib.suppress(OSError):
            for line in Path(f"/proc/{pid}/net/{table}").read_text().splitlines()[1:]:
                fields = line.split()
                if int(fields[2].rsplit(":", 1)[1], 16) == client_port and fields[9] in inodes:
                    return True
    return False


def _connect(host: str) -> socket.socket:
    address, port = host.split(":")
    sock = socket.create_connection((address, int(port)), timeout=5)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 64 * 1024)  # count little of our own
    return sock


def _answer(sock: socket.socket) -> tuple[bytes, bool]:
    """Everything the server answers, and whether it closed the connection (rather than
    leaving it open past the timeout)."""
    sock.settimeout(3)
    answer = b""
    try:
        while data := sock.recv(65536):
            answer += data
    except ConnectionResetError:
        pass
    except TimeoutError:
        return answer, False
    return answer, True


def _json_413(answer: bytes) -> dict:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 413 "), answer[:300]
    assert b"content-type: application/json" in head.lower(), head
    error = json.loads(body)["error"]
    assert error["type"] == "PayloadTooLarge" and "larger than" in error["message"], error
    return error


@pytest.mark.parametrize(
    ("path", "limit"),
    [
        ("/api/auth/token/", limit_for("/api/auth/token/")),  # no login needed to send it
        ("/api/sessions/upload/", REPO_MAX_BYTES + FRAMING),
    ],
)
def test_it_stops_reading_a_chunked_body_at_the_limit(daphne, path, limit):
    host, pid = daphne
    written = _written(pid)
    sock = _connect(host)
    sock.sendall(
        f"POST {path} HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        "Transfer-Encoding: chunked\r\n\r\n".encode()
    )
    chunk = b"x" * 65536
    frame = b"%x\r\n%s\r\n" % (len(chunk), chunk)
    sent = 0
    started = time.monotonic()
    try:
        while sent < SENT_AT_MOST:
            sock.sendall(frame)
            sent += len(chunk)
        sock.sendall(b"0\r\n\r\n")
    except (BrokenPipeError, ConnectionResetError, TimeoutError):
        pass  # the server stopped reading (a timeout: its buffers full, the socket unread)
    answer, closed = _answer(sock)
    client_port = sock.getsockname()[1]
    sock.close()
    # The server's side of the close: its socket gone, it spools nothing more.
    wait_until(lambda: not _holds_connection_from(pid, client_port), 10, "Daphne's close")
    spooled = _written(pid) - written
    print(f"{path}: limit {limit:,}, sent {sent:,}, Daphne wrote {spooled:,} bytes")
    # Past the limit only what the kernel's buffers took (64 MiB was read to the end before).
    assert sent < 2 * limit + 4 * MiB, f"{sent:,} bytes went in before the server stopped"
    assert spooled < limit + 256 * 1024, f"Daphne wrote {spooled:,} bytes (its spooled body)"
    _json_413(answer)
    assert closed, "the connection is closed after the 413"
    assert time.monotonic() - started < 10


@pytest.mark.parametrize("expect", [False, True])
def test_it_refuses_a_declared_length_past_the_limit_before_the_body(daphne, expect):
    host, pid = daphne
    written = _written(pid)
    sock = _connect(host)
    extra = "Expect: 100-continue\r\n" if expect else ""
    sock.sendall(
        f"POST /api/auth/token/ HTTP/1.1\r\nHost: {host}\r\nContent-Type: application/json\r\n"
        f"Content-Length: {400 * MiB}\r\n{extra}\r\n".encode()
    )
    answer, closed = _answer(sock)  # not a byte of the body sent
    sock.close()
    # The answer is the 413 itself: no "100 Continue" inviting the body first.
    _json_413(answer)
    assert closed
    assert _written(pid) - written < 64 * 1024


@pytest.mark.django_db(transaction=True)
def test_bodies_within_the_limit_still_reach_the_application(daphne):
    host, _pid = daphne
    token = Token.objects.create(user=User.objects.create_user("alice", password="pw"))
    archive = io.BytesIO()
    with zipfile.ZipFile(archive, "w") as zipped:
        zipped.writestr("proj/a.txt", "hello\n")
        zipped.writestr("proj/pad.bin", bytes(range(256)) * 256)  # 64 kB, stored as is
    with httpx.Client(base_url=f"http://{host}", timeout=30) as http:
        login = {"username": "alice", "password": "wrong"}
        answer = http.post("/api/auth/token/", json=login)
        assert answer.status_code == 401 and answer.json()["error"]["type"], answer.text
        answer = http.post(
            "/api/sessions/upload/",
            files={"file": ("proj.zip", archive.getvalue(), "application/zip")},
            headers={"Authorization": f"Token {token.key}"},
        )
        assert answer.status_code == 201, answer.text
        # A chunked body under the limit is read to its end and handed on (DRF reads no body
        # without a Content-Length, so the login is refused as empty: 400, not 413).
        answer = http.post(
            "/api/auth/token/",
            content=iter([b'{"username": "alice", ', b'"password": "wrong"}']),
            headers={"Content-Type": "application/json"},
        )
        assert answer.status_code == 400, answer.text
