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

import httpx


async def _start(order: dict) -> dict:
    sent: dict[str, float] = {}
    answered: dict[str, float] = {}
    statuses: dict[str, int] = {}
    headers = {"Authorization": f"Token {order['token']}"}
    body = {"messages": [{"role": "user", "content": order["content"]}]}
    limits = httpx.Limits(max_connections=len(order["session_ids"]), max_keepalive_connections=0)
    async with httpx.AsyncClient(
        base_url=order["url"], headers=headers, limits=limits, timeout=120
    ) as client:

        async def one(session_id: str) -> None:
            sent[session_id] = time.time()
            response = await client.post(f"/api/sessions/{session_id}/runs/", json=body)
            answered[session_id] = time.time()
            statuses[session_id] = response.status_code

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
