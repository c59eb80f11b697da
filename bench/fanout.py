"""What a websocket frame costs the web process: Daphne's CPU per frame it sends to a listener,
before and after a change, side by side in one run.

"Before" is the project at ``FANOUT_BEFORE`` (a commit; default ``BEFORE``), "after" the
working tree. Each is served by its own Daphne, started as platform/Procfile starts it, from
its own copy of the tree, against the same database and Redis. Each has ``LISTENERS``
token-authenticated sockets, ``PER_SESSION`` on each of the sessions. This process then
streams text deltas into every session as a worker does (``realtime.events``, 50 a second a
session): both servers hold the same groups, so every event reaches both at the same moment
and the machine's load falls on both alike. The CPU of each server is read from /proc (user +
system) around the stream; its clients count the frames it sent.
"""

from __future__ import annotations

import asyncio
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from .api_cost import before_and_after
from .env import Env, cpu_seconds
from .stats import ratio

BEFORE = "e37aaa5"  # before the sockets' frames skipped Channels' session middleware
LISTENERS = 200
PER_SESSION = 4
PACE_S = 0.02  # a delta a session every 20 ms: 50 tok/s


class _Listener:
    def __init__(self, url: str) -> None:
        self.url = url
        self.frames = 0
        self.subscribed = asyncio.Event()

    async def run(self) -> None:
        from websockets.asyncio.client import connect

        async with connect(self.url, max_size=None, ping_interval=None, open_timeout=60) as ws:
            async for raw in ws:
                kind = json.loads(raw).get("type")
                if kind == "subscribed":
                    self.subscribed.set()
                elif kind == "text-delta":
                    self.frames += 1
                elif kind == "session.status":  # the end
                    return


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from sessions_app.services.sessions import create_session

    user = User.objects.create_user("bench-fanout", password="x")
    token = Token.objects.create(user=user).key
    sessions = [
        create_session(owner=user, title=f"fanout {i}").id for i in range(LISTENERS // PER_SESSION)
    ]
    close_old_connections()
    deltas = 150 if quick else 500  # a session's
    results: dict[str, Any] = {
        "listeners": LISTENERS,
        "per_session": PER_SESSION,
        "deltas_per_session": deltas,
    }
    with tempfile.TemporaryDirectory(prefix="bench-fanout-") as tmp:
        commit = os.environ.get("FANOUT_BEFORE", BEFORE)
        servers, results["before"] = before_and_after(env, commit, Path(tmp))
        results["after"] = "working tree"
        try:
            cpu, frames = asyncio.run(_stream(servers, sessions, token, deltas))
        finally:
            for proc, _port in servers.values():
                proc.stop()
    for name in servers:
        results[name + "_frames"] = frames[name]
        results[name + "_us_per_frame"] = 1e6 * cpu[name] / max(1, frames[name])
    results["ratio"] = ratio(results["after_us_per_frame"], results["before_us_per_frame"])
    return results


async def _stream(
    servers: dict[str, Any], sessions: list[str], token: str, deltas: int
) -> tuple[dict[str, float], dict[str, int]]:
    from realtime import events

    listeners = {
        name: [
            _Listener(f"ws://127.0.0.1:{port}/ws/sessions/{sid}/?token={token}")
            for sid in sessions
            for _ in range(PER_SESSION)
        ]
        for name, (_proc, port) in servers.items()
    }
    tasks = [asyncio.create_task(c.run()) for group in listeners.values() for c in group]
    for group in listeners.values():
        for c in group:
            await asyncio.wait_for(c.subscribed.wait(), 60)
    await asyncio.sleep(0.5)  # the subscriptions reach Redis
    pids = {name: proc.pid for name, (proc, _port) in servers.items()}
    start = {name: cpu_seconds(pid) for name, pid in pids.items()}

    def stream() -> None:
        began = time.monotonic()
        for i in range(deltas):
            for sid in sessions:
                events.publish_delta(
                    sid,
                    message_id="msg_bench",
                    part_id="prt_bench",
                    offset=6 * i,
                    text="word ",
                    reasoning=False,
                )
            time.sleep(max(0.0, began + (i + 1) * PACE_S - time.monotonic()))
        events.publisher.flush()
        for sid in sessions:
            events.publish(sid, events.SESSION_STATUS, status="idle", run_id=None)
        events.publisher.flush()

    await asyncio.to_thread(stream)
    await asyncio.wait_for(asyncio.gather(*tasks), 120)
    cpu = {name: cpu_seconds(pid) - start[name] for name, pid in pids.items()}
    frames = {name: sum(c.frames for c in group) for name, group in listeners.items()}
    return cpu, frames


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows = [
        [
            "Daphne CPU µs per frame sent",
            _f(r["before_us_per_frame"], 1),
            _f(r["after_us_per_frame"], 1),
            f"{_f(r['ratio'], 3)}x",
        ],
        ["frames sent", f"{r['before_frames']:,}", f"{r['after_frames']:,}", ""],
    ]
    return _table(
        "Web process CPU per websocket frame (Daphne, user + system), before vs after",
        ["", "before", "after", "after / before"],
        rows,
        f"before: {r['before'][:12]}; after: {r['after']}; {r['listeners']} sockets on each "
        f"server, {r['per_session']} a session, {r['deltas_per_session']} deltas a session at "
        "50 a second, every event to both servers at once",
    )
