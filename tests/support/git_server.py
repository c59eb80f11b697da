"""A real git server for tests: HTTPS smart HTTP, served by ``git http-backend``.

``git_server(tmp)`` starts a ``ThreadingHTTPServer`` wrapped in TLS (a self-signed certificate
for 127.0.0.1 and localhost, made with the ``openssl`` CLI) in a thread; every request runs
``git http-backend`` as a CGI over the bare repositories under ``GitServer.root``.

- Public repositories: fetch and clone without credentials.
- Private repositories (``make_repo(..., private=True)``): every request needs
  ``Authorization: Basic base64(<any user>:<token>)``, else 401 with
  ``WWW-Authenticate: Basic realm="git"``.
- Push (``git-receive-pack``) always needs the token, public or private.

Plain git trusts the server with ``GIT_SSL_CAINFO=<ca_file>`` (``GitServer.git_env`` builds a
whole isolated environment) and authenticates with
``-c http.extraHeader="Authorization: <GitServer.auth_header()>"``.

In a test module, ``from tests.support.git_server import git_server_fixture`` makes the
fixture ``git_server`` (a started ``GitServer``) available; ``git_server(tmp)`` is the context
manager for code that wants its own lifetime.
"""

from __future__ import annotations

import base64
import binascii
import os
import re
import secrets
import shutil
import ssl
import subprocess
import sys
import threading
import urllib.parse
from collections.abc import Iterable, Iterator
from contextlib import contextmanager, suppress
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import BinaryIO

import pytest

GIT = shutil.which("git") or "git"
OPENSSL = shutil.which("openssl") or "openssl"
HOST = "127.0.0.1"
REALM = "git"
# /<name>.git[/<rest>]; a name may have slashes ("org/repo") but no "." or ".." segment.
_REPO_PATH = re.compile(r"^/(?P<name>[^?#]+?)\.git(?P<rest>/[^?#]*)?$")
_CHUNK = 64 * 1024


@dataclass(frozen=True)
class SeenRequest:
    method: str
    path: str  # as requested, query string included ("/r.git/info/refs?service=...")
    authorization: str | None
    headers: dict[str, str]
    status: int = 0  # the status answered (0 while the request is in flight)


@dataclass
class GitServer:
    base_url: str  # "https://127.0.0.1:<port>" (the certificate is also valid for "localhost")
    ca_file: Path  # the self-signed server certificate (PEM), to trust
    token: str  # the password private repositories and every push require
    root: Path  # where the bare repositories live: root / f"{name}.git"
    _private: set[str] = field(default_factory=set, repr=False)
    _seen: list[SeenRequest] = field(default_factory=list, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    _home: Path | None = field(default=None, repr=False)
    log_file: Path | None = None  # git http-backend's stderr

    # -- repositories ---------------------------------------------------------------------

    def url(self, name: str) -> str:
        return f"{self.base_url}/{name}.git"

    def bare(self, name: str) -> Path:
        parts = name.split("/")
        if not name or any(p in ("", ".", "..") for p in parts) or name.endswith(".git"):
            raise ValueError(f"bad repository name {name!r}")
        return self.root / f"{name}.git"

    def make_repo(
        self,
        name: str,
        files: dict[str, bytes | str],
        *,
        private: bool = False,
        branch: str = "main",
        extra_commits: int = 0,
    ) -> str:
        """A bare repository whose ``branch`` (also its HEAD) has exactly ``files`` (str is
        UTF-8; mode 100644; no filters, byte for byte). ``extra_commits`` earlier commits come
        first (each ``files`` plus a ``.history`` counter), so the branch has
        ``extra_commits + 1`` commits. Returns the clone URL."""
        bare = self.bare(name)
        if bare.exists():
            raise FileExistsError(bare)
        blobs = {
            path: data.encode() if isinstance(data, str) else data for path, data in files.items()
        }
        for path in blobs:
            _fast_import_path(path)  # a bad path fails before anything is made
        bare.parent.mkdir(parents=True, exist_ok=True)
        self._git("init", "-q", "--bare", f"--initial-branch={branch}", str(bare))
        for key, value in (
            ("http.receivepack", "true"),
            ("uploadpack.allowFilter", "true"),
            ("uploadpack.allowAnySHA1InWant", "true"),
        ):
            self._git("-C", str(bare), "config", key, value)
        stream = bytearray()
        ref = f"refs/heads/{branch}".encode()
        for i in range(extra_commits + 1):
            final = i == extra_commits
            message = b"files\n" if final else f"history {i + 1}\n".encode()
            stream += b"commit " + ref + b"\n"
            stream += (
                f"committer Git Server <git@example.invalid> {1_700_000_000 + i} +0000\n".encode()
            )
            stream += b"data %d\n%s" % (len(message), message)
            stream += b"deleteall\n"
            content = dict(blobs) if final else {**blobs, ".history": f"{i + 1}\n".encode()}
            for path, data in content.items():
                stream += b"M 100644 inline " + _fast_import_path(path) + b"\n"
                stream += b"data %d\n" % len(data) + data + b"\n"
        self._git("-C", str(bare), "fast-import", "--quiet", input=bytes(stream))
        if private:
            with self._lock:
                self._private.add(name)
        return self.url(name)

    def is_private(self, name: str) -> bool:
        with self._lock:
            return name in self._private

    def head(self, name: str, branch: str) -> str | None:
        """The commit id of ``branch`` in the bare repository, None if either is absent."""
        bare = self.bare(name)
        if not bare.is_dir():
            return None
        out = self._git(
            "-C", str(bare), "rev-parse", "-q", "--verify", f"refs/heads/{branch}^{{commit}}",
            check=False,
        )  # fmt: skip
        return out.decode().strip() or None

    def read_tree(self, name: str, ref: str) -> dict[str, bytes]:
        """Every file of ``ref`` (a branch, tag or commit id): path -> bytes. Symbolic links
        give their target; submodules are left out."""
        bare = str(self.bare(name))
        listing = self._git("-C", bare, "ls-tree", "-r", "-z", "--full-tree", f"{ref}^{{tree}}")
        entries: list[tuple[str, str]] = []
        for record in listing.split(b"\0"):
            if not record:
                continue
            meta, _, path = record.partition(b"\t")
            _mode, kind, oid = meta.decode().split()
            if kind == "blob":
                entries.append((path.decode("utf-8", "surrogateescape"), oid))
        if not entries:
            return {}
        batch = self._git(
            "-C", bare, "cat-file", "--batch", input="".join(f"{o}\n" for _, o in entries).encode()
        )  # fmt: skip
        tree: dict[str, bytes] = {}
        pos = 0
        for path, oid in entries:
            eol = batch.index(b"\n", pos)
            got, kind, size = batch[pos:eol].decode().split()
            assert got == oid and kind == "blob", batch[pos:eol]
            start = eol + 1
            tree[path] = batch[start : start + int(size)]
            pos = start + int(size) + 1
        return tree

    # -- what the server saw --------------------------------------------------------------

    def requests(self) -> list[tuple[str, str, str | None]]:
        """(method, path with query, Authorization header or None) of every request so far."""
        with self._lock:
            return [(r.method, r.path, r.authorization) for r in self._seen]

    def seen(self) -> list[SeenRequest]:
        """The same requests with all their headers and the status answered."""
        with self._lock:
            return list(self._seen)

    def clear_requests(self) -> None:
        with self._lock:
            self._seen.clear()

    # -- for git clients ------------------------------------------------------------------

    def auth_header(self, user: str = "git") -> str:
        """The Authorization header value: ``Basic base64(user:token)``."""
        return "Basic " + base64.b64encode(f"{user}:{self.token}".encode()).decode()

    def auth_args(self, user: str = "git") -> list[str]:
        """``git`` options (before the command) that send the token on every request."""
        return ["-c", f"http.extraHeader=Authorization: {self.auth_header(user)}"]

    def git_env(self, home: Path, **extra: str) -> dict[str, str]:
        """An environment for plain git that trusts the server and never prompts, with
        ``home`` as HOME and no user or system configuration."""
        home.mkdir(parents=True, exist_ok=True)
        env = {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(home),
            "LANG": "C.UTF-8",
            "GIT_SSL_CAINFO": str(self.ca_file),
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ASKPASS": "",
            "SSH_ASKPASS": "",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "Test",
            "GIT_AUTHOR_EMAIL": "test@example.invalid",
            "GIT_COMMITTER_NAME": "Test",
            "GIT_COMMITTER_EMAIL": "test@example.invalid",
        }
        env.update(extra)
        return env

    # -- internals ------------------------------------------------------------------------

    def _base_env(self) -> dict[str, str]:
        assert self._home is not None
        return {
            "PATH": os.environ.get("PATH", "/usr/bin:/bin"),
            "HOME": str(self._home),
            "LANG": "C.UTF-8",
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
        }

    def _git(self, *args: str, input: bytes | None = None, check: bool = True) -> bytes:
        proc = subprocess.run(
            [GIT, *args],
            input=input,
            capture_output=True,
            env=self._base_env(),
            timeout=120,
        )
        if check and proc.returncode != 0:
            raise RuntimeError(f"git {' '.join(args)}: {proc.stderr.decode(errors='replace')}")
        return proc.stdout if proc.returncode == 0 else b""

    def _record(self, request: SeenRequest) -> int:
        with self._lock:
            self._seen.append(request)
            return len(self._seen) - 1

    def _answered(self, index: int, status: int) -> None:
        with self._lock:
            old = self._seen[index]
            self._seen[index] = SeenRequest(
                old.method, old.path, old.authorization, old.headers, status
            )

    def _user_for(self, authorization: str | None) -> str | None:
        """The user name if the header carries the token, else None."""
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "basic":
            return None
        try:
            decoded = base64.b64decode(value.strip(), validate=True).decode()
        except (binascii.Error, UnicodeDecodeError):
            return None
        user, sep, password = decoded.partition(":")
        if not sep or not secrets.compare_digest(password, self.token):
            return None
        return user or "git"


def _fast_import_path(path: str) -> bytes:
    """A path for fast-import, always C-quoted."""
    raw = path.encode("utf-8", "surrogateescape")
    if (
        not path
        or path.startswith("/")
        or any(p in ("", ".", "..", ".git") for p in path.split("/"))
    ):
        raise ValueError(f"bad file path {path!r}")
    out = bytearray(b'"')
    for byte in raw:
        if byte in (0x22, 0x5C):
            out += b"\\" + bytes([byte])
        elif byte < 0x20 or byte == 0x7F:
            out += b"\\%03o" % byte
        else:
            out.append(byte)
    out += b'"'
    return bytes(out)


# -- HTTP ---------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    block_on_close = False
    git: GitServer
    tls: ssl.SSLContext

    def finish_request(self, request, client_address) -> None:  # type: ignore[override]
        # In the request's thread: a slow or failed handshake holds up nobody else.
        request.settimeout(60)
        try:
            tls_sock = self.tls.wrap_socket(request, server_side=True)
        except (ssl.SSLError, OSError):
            return
        try:
            super().finish_request(tls_sock, client_address)
        finally:
            with suppress(OSError):
                tls_sock.close()

    def handle_error(self, request, client_address) -> None:  # type: ignore[override]
        exc = sys.exc_info()[1]
        if isinstance(exc, ssl.SSLError | ConnectionError | TimeoutError):
            return
        super().handle_error(request, client_address)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: _Server
    server_version = "test-git-server"

    def log_message(self, format: str, *args) -> None:  # noqa: A002
        pass

    def do_GET(self) -> None:
        self._serve()

    def do_POST(self) -> None:
        self._serve()

    def _serve(self) -> None:
        git = self.server.git
        authorization = self.headers.get("Authorization")
        index = git._record(
            SeenRequest(self.command, self.path, authorization, dict(self.headers.items()))
        )
        raw_path, _, query = self.path.partition("?")
        path = urllib.parse.unquote(raw_path)
        match = _REPO_PATH.match(path)
        try:
            name = match["name"] if match else ""
            git.bare(name)
        except ValueError:
            return self._plain(index, 404, "Not Found\n")
        service = urllib.parse.parse_qs(query).get("service", [])
        push = path.endswith("/git-receive-pack") or "git-receive-pack" in service
        user = git._user_for(authorization)
        if (push or git.is_private(name)) and user is None:
            return self._plain(
                index, 401, "Unauthorized\n", {"WWW-Authenticate": f'Basic realm="{REALM}"'}
            )
        self._cgi(index, path, query, user)

    def _plain(
        self, index: int, status: int, text: str, headers: dict[str, str] | None = None
    ) -> None:
        body = text.encode()
        # A request body we did not read would be taken for the next request: close.
        self.close_connection = True
        self.send_response(status)
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.send_header("Content-Type", "text/plain; charset=utf-8")
        self.send_header("Content-Length", str(len(body)))
        self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(body)
        self.server.git._answered(index, status)

    def _body(self) -> tuple[Iterable[bytes], int | None]:
        """The request body as chunks, and its length if known (not for chunked uploads)."""
        if "chunked" in self.headers.get("Transfer-Encoding", "").lower():
            return self._dechunk(), None
        length = int(self.headers.get("Content-Length") or 0)
        return self._fixed(length), length

    def _fixed(self, length: int) -> Iterator[bytes]:
        while length > 0:
            data = self.rfile.read(min(length, _CHUNK))
            if not data:
                raise ConnectionError("request body cut short")
            length -= len(data)
            yield data

    def _dechunk(self) -> Iterator[bytes]:
        while True:
            line = self.rfile.readline(1024)
            if not line:
                raise ConnectionError("chunked body cut short")
            size = int(line.split(b";", 1)[0].strip(), 16)
            if size == 0:
                while self.rfile.readline(1024) not in (b"\r\n", b"\n", b""):
                    pass  # trailers
                return
            yield from self._fixed(size)
            self.rfile.readline(1024)  # the CRLF after the chunk

    def _cgi(self, index: int, path: str, query: str, user: str | None) -> None:
        git = self.server.git
        body, length = self._body()
        env = git._base_env()
        env.update(
            GIT_PROJECT_ROOT=str(git.root),
            GIT_HTTP_EXPORT_ALL="1",
            GATEWAY_INTERFACE="CGI/1.1",
            SERVER_PROTOCOL="HTTP/1.1",
            SERVER_SOFTWARE=self.server_version,
            REQUEST_METHOD=self.command,
            SCRIPT_NAME="",
            PATH_INFO=path,
            QUERY_STRING=query,
            CONTENT_TYPE=self.headers.get("Content-Type", ""),
            REMOTE_ADDR=self.client_address[0],
        )
        if length is not None and self.command == "POST":
            env["CONTENT_LENGTH"] = str(length)
        if user is not None:
            env["REMOTE_USER"] = user
        for key, value in self.headers.items():
            cgi_name = "HTTP_" + key.upper().replace("-", "_")
            if cgi_name not in ("HTTP_AUTHORIZATION", "HTTP_CONTENT_TYPE", "HTTP_CONTENT_LENGTH"):
                env[cgi_name] = value  # Content-Encoding (gzip), Git-Protocol (v2), ...
        log = open(git.log_file or os.devnull, "ab")  # noqa: SIM115 - closed below
        try:
            proc = subprocess.Popen(
                [GIT, "http-backend"],
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=log,
                env=env,
            )
        finally:
            log.close()
        assert proc.stdin is not None and proc.stdout is not None
        consumed = threading.Event()
        failed: list[BaseException] = []
        writer = threading.Thread(
            target=_feed, args=(proc.stdin, body, consumed, failed), daemon=True
        )
        writer.start()
        status = 502
        try:
            status = self._relay(proc.stdout)
        finally:
            writer.join(timeout=60)
            proc.stdout.close()
            try:
                proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
            if not consumed.is_set():
                self.close_connection = True
            git._answered(index, status)

    def _relay(self, out: BinaryIO) -> int:
        """Copies the CGI's answer: its header block (``Status:`` first if any), then the body,
        chunked."""
        status, reason = 200, "OK"
        headers: list[tuple[str, str]] = []
        while True:
            line = out.readline(64 * 1024)
            if not line:
                if not headers:  # the backend died before answering
                    self._send_error_head(502)
                    return 502
                break
            line = line.rstrip(b"\r\n")
            if not line:
                break
            key, _, value = line.decode("latin-1").partition(":")
            value = value.strip()
            if key.lower() == "status":
                code, _, text = value.partition(" ")
                status, reason = int(code), text or reason
            else:
                headers.append((key, value))
        self.send_response(status, reason)
        for key, value in headers:
            if key.lower() not in ("content-length", "transfer-encoding", "connection"):
                self.send_header(key, value)
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        while data := out.read1(_CHUNK):  # type: ignore[attr-defined]
            self.wfile.write(b"%x\r\n" % len(data) + data + b"\r\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()
        return status

    def _send_error_head(self, status: int) -> None:
        self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Length", "0")
        self.send_header("Connection", "close")
        self.end_headers()


def _feed(stdin: BinaryIO, body: Iterable[bytes], consumed: threading.Event, failed: list) -> None:
    """Streams the request body to the CGI; reads it all even if the CGI stops listening, so
    the connection stays usable."""
    broken = False
    try:
        for data in body:
            if broken:
                continue
            try:
                stdin.write(data)
            except (BrokenPipeError, OSError):
                broken = True
        consumed.set()
    except BaseException as exc:  # the client went away mid-body
        failed.append(exc)
    finally:
        with suppress(OSError):
            stdin.close()


# -- lifetime -----------------------------------------------------------------------------


def _self_signed(directory: Path) -> tuple[Path, Path]:
    directory.mkdir(parents=True, exist_ok=True)
    cert, key = directory / "cert.pem", directory / "key.pem"
    subprocess.run(
        [
            OPENSSL, "req", "-x509", "-nodes", "-days", "2",
            "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1",
            "-subj", f"/CN={HOST}",
            "-addext", f"subjectAltName=IP:{HOST},DNS:localhost",
            "-keyout", str(key), "-out", str(cert),
        ],
        check=True,
        capture_output=True,
        timeout=60,
    )  # fmt: skip
    return cert, key


@contextmanager
def git_server(tmp: Path) -> Iterator[GitServer]:
    """A started server over ``tmp / "git-server"``; stopped on exit."""
    base = Path(tmp) / "git-server"
    root, home = base / "repos", base / "home"
    root.mkdir(parents=True, exist_ok=True)
    home.mkdir(parents=True, exist_ok=True)
    cert, key = _self_signed(base / "tls")
    tls = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    tls.load_cert_chain(cert, key)
    server = _Server((HOST, 0), _Handler)
    server.tls = tls
    port = server.server_address[1]
    git = GitServer(
        base_url=f"https://{HOST}:{port}",
        ca_file=cert,
        token=secrets.token_urlsafe(24),
        root=root,
        _home=home,
        log_file=base / "http-backend.log",
    )
    server.git = git
    thread = threading.Thread(
        target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True
    )
    thread.start()
    try:
        yield git
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=10)


@pytest.fixture(name="git_server")
def git_server_fixture(tmp_path: Path) -> Iterator[GitServer]:
    """A started ``GitServer`` for one test (import this name; request ``git_server``)."""
    with git_server(tmp_path) as server:
        yield server


@pytest.fixture(name="server")
def reachable_server_fixture(git_server: GitServer, settings) -> GitServer:  # noqa: ANN001
    """``git_server`` as the deployment must allow it for a clone to reach it: its address
    (loopback) named in ``GIT_ALLOWED_HOSTS``, its CA trusted (import this name; request
    ``server``)."""
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    settings.GIT_SSL_CAINFO = str(git_server.ca_file)
    return git_server
