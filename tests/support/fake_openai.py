"""A local OpenAI-compatible ``/v1/chat/completions`` endpoint that streams scripted answers.

Each request is answered by ``responder(body, index)``, which returns one of:

* ``Stream(chunks)``: ``text/event-stream`` with one ``data: {...}`` event per chunk, then
  ``data: [DONE]`` (unless ``done=False``); the body is sent chunked, as real servers do;
* ``Stream(chunks, drop=True)``: the chunks, then the socket is closed mid-body (no [DONE],
  no terminating HTTP chunk), like a crashed or cut-off server;
* ``Fail(status, body)``: an HTTP error with a JSON body.

Every request body is recorded (parsed JSON) in ``server.requests``.
"""

from __future__ import annotations

import json
import socket
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any


@dataclass
class Stream:
    chunks: list[dict[str, Any]]
    done: bool = True
    drop: bool = False
    delay: float = 0.0


@dataclass
class Fail:
    status: int
    body: dict[str, Any] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)


Responder = Callable[[dict[str, Any], int], "Stream | Fail"]


def chunk(
    *,
    content: str | None = None,
    tool_calls: list[dict[str, Any]] | None = None,
    finish_reason: str | None = None,
    role: str | None = None,
    model: str = "test-model",
) -> dict[str, Any]:
    """One ``chat.completion.chunk`` with a single choice."""
    delta: dict[str, Any] = {}
    if role:
        delta["role"] = role
    if content is not None:
        delta["content"] = content
    if tool_calls is not None:
        delta["tool_calls"] = tool_calls
    return {
        "id": "chatcmpl-test",
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }


def text_chunks(*pieces: str) -> list[dict[str, Any]]:
    return (
        [chunk(role="assistant", content="")]
        + [chunk(content=p) for p in pieces]
        + [chunk(finish_reason="stop")]
    )


def tool_delta(
    index: int, *, id: str | None = None, name: str | None = None, arguments: str | None = None
) -> dict[str, Any]:
    call: dict[str, Any] = {"index": index}
    if id is not None:
        call["id"] = id
        call["type"] = "function"
    function: dict[str, Any] = {}
    if name is not None:
        function["name"] = name
    if arguments is not None:
        function["arguments"] = arguments
    if function:
        call["function"] = function
    return call


class FakeOpenAI(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, responder: Responder) -> None:
        super().__init__(("127.0.0.1", 0), _Handler)
        self.responder = responder
        self.requests: list[dict[str, Any]] = []
        self.paths: list[str] = []
        self._lock = threading.Lock()
        self._thread = threading.Thread(target=self.serve_forever, daemon=True)

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}/v1"

    def __enter__(self) -> FakeOpenAI:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.shutdown()
        self.server_close()
        self._thread.join(5)


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server: FakeOpenAI

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002
        pass

    def do_POST(self) -> None:  # noqa: N802
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length)
        try:
            body = json.loads(raw or b"{}")
        except ValueError:
            body = {"_raw": raw.decode(errors="replace")}
        with self.server._lock:
            index = len(self.server.requests)
            self.server.requests.append(body)
            self.server.paths.append(self.path)
        if self.path.rstrip("/") != "/v1/chat/completions":
            return self._json(404, {"error": {"message": f"no route {self.path}"}})
        answer = self.server.responder(body, index)
        if isinstance(answer, Fail):
            return self._json(answer.status, answer.body, answer.headers)
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.send_header("Cache-Control", "no-cache")
        self.send_header("Transfer-Encoding", "chunked")
        self.end_headers()
        for item in answer.chunks:
            self._chunk(f"data: {json.dumps(item)}\n\n")
            if answer.delay:
                time.sleep(answer.delay)  # scenario: a model that streams slowly
        if answer.drop:
            self.wfile.flush()
            self.connection.shutdown(socket.SHUT_RDWR)
            self.connection.close()
            self.close_connection = True
            return
        if answer.done:
            self._chunk("data: [DONE]\n\n")
        self.wfile.write(b"0\r\n\r\n")
        self.wfile.flush()

    def _chunk(self, text: str) -> None:
        data = text.encode()
        self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
        self.wfile.flush()

    def _json(self, status: int, body: dict[str, Any], headers: dict[str, str] | None = None):
        data = json.dumps(body).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        self.end_headers()
        self.wfile.write(data)
        self.wfile.flush()
