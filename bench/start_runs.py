"""The streaming benchmark's browsers asking for runs: ``POST /api/sessions/{id}/runs/`` to
the web process (Daphne), every request at once, as many people pressing Send together do,
each on a connection of its own. A process of its own (``python -m bench.start_runs`` with a
JSON order on stdin: ``url``, ``token``, ``session_ids``, ``content``), at the default CPU
weight like the websocket clients: it says ``ready`` before it reads the order, and answers
one JSON line: when each request was sent and answered (``time.time()``), its status, and
this process's CPU seconds for the lot.

Until issue 29 the runs were started by a process that called ``start_run`` itself, bypassing
the web process: what a run's start costs Daphne (the request, the admission's statements,
the enqueue) was not in the measured latency.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from urllib.parse import urlsplit

# A browser's request costs the server's machine nothing of its own CPU: the requests here
# are written on plain sockets (about a tenth of an HTTP client library's CPU per request,
# which ran on the measured machine's cores beside the server). Each on a connection of its
# own, opened when the request is sent, as before.


async def _post(host: str, port: int, request: bytes) -> int:
    reader, writer = await asyncio.open_connection(host, port)
    try:
        writer.write(request)
        status_line = await reader.readline()  # b"HTTP/1.1 202 Accepted"
        await reader.read()  # the rest, until the server closes (Connection: close)
        return int(status_line.split()[1])
    finally:
        writer.close()


async def _start(order: dict) -> dict:
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    statuses: dict[str, int] = {}
    url = urlsplit(order["url"])
    host, port = url.hostname or "127.0.0.1", url.port or 80
    body = json.dumps({"messages": [{"role": "user", "content": order["content"]}]}).encode()

    def request(session_id: str) -> bytes:
        head = (
            f"POST /api/sessions/{session_id}/runs/ HTTP/1.1\r\n"
            f"Host: {url.netloc}\r\n"
            f"Authorization: Token {order['token']}\r\n"
            "Content-Type: application/json\r\n"
            f"Content-Length: {len(body)}\r\n"
            "Connection: close\r\n\r\n"
        )
        return head.encode() + body

    prepared = {sid: request(sid) for sid in order["session_ids"]}

    async def one(session_id: str) -> None:
        sent[session_id] = time.time()
        statuses[session_id] = await asyncio.wait_for(_post(host, port, prepared[session_id]), 120)
        answered[session_id] = time.time()

    await asyncio.gather(*(one(s) for s in order["session_ids"]))
    return {"sent": sent, "answered": answered, "status": statuses}


def main() -> None:
    print("ready", flush=True)
    order = json.loads(sys.stdin.readline())
    cpu = time.process_time()
    result = asyncio.run(_start(order))
    result["cpu_s"] = time.process_time() - cpu
    print(json.dumps(result), flush=True)


if __name__ == "__main__":
    main()
