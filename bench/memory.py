"""Resident memory of the worker and of Daphne (VmRSS from /proc), services mode.

1. N sequential scripted runs (each with a tool batch that writes files, so snapshots, tools,
   checkpoints and events all run), started over the HTTP API with ``wait``; RSS sampled every
   N/10 runs; run N/10 is compared with run N (target: within 10%).
2. 200 idle websocket clients connected to Daphne: RSS before and after, MiB per client.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

from .env import Env, rss_mib, tree_rss_mib
from .stats import ratio

SCRIPT = "pace 0\nsay run {i}\nwrite notes.txt run {i}\nappend log.txt line {i}\nsay ok"
RUNS_PER_SESSION = 10


def _sample(daphne_pid: int, worker_pid: int, runs: int) -> dict[str, Any]:
    parent, kids = tree_rss_mib(worker_pid)
    return {
        "runs": runs,
        "daphne_mib": rss_mib(daphne_pid),
        "worker_parent_mib": parent,
        "worker_children_mib": kids,
        "worker_total_mib": parent + sum(kids),
    }


async def _idle_clients(port: int, token: str, session_ids: list[str]) -> list[Any]:
    from websockets.asyncio.client import connect

    async def one(sid: str):  # noqa: ANN202
        ws = await connect(
            f"ws://127.0.0.1:{port}/ws/sessions/{sid}/?token={token}", ping_interval=None
        )
        first = await ws.recv()
        assert '"subscribed"' in first, first
        return ws

    sockets = []
    for i in range(0, len(session_ids), 50):  # in waves, as browsers would arrive
        sockets += await asyncio.gather(*(one(s) for s in session_ids[i : i + 50]))
    return sockets


def run(env: Env, *, runs: int, clients: int = 200) -> dict[str, Any]:
    import httpx
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from sessions_app.services.sessions import create_session

    daphne, port = env.daphne()
    worker = env.worker(2)
    try:
        user = User.objects.create_user("bench-memory", password="x")
        token = Token.objects.create(user=user).key
        close_old_connections()
        http = httpx.Client(
            base_url=f"http://127.0.0.1:{port}",
            headers={"Authorization": f"Token {token}"},
            timeout=120,
        )
        samples = [_sample(daphne.pid, worker.pid, 0)]
        every = max(1, runs // 10)
        session_id = None
        started = time.monotonic()
        failures = 0
        for i in range(runs):
            if i % RUNS_PER_SESSION == 0:
                resp = http.post("/api/sessions/", json={"title": f"memory {i}"})
                resp.raise_for_status()
                session_id = resp.json()["id"]
            resp = http.post(
                f"/api/sessions/{session_id}/runs/",
                json={"messages": [{"role": "user", "content": SCRIPT.format(i=i)}], "wait": True},
            )
            resp.raise_for_status()
            if resp.json()["status"] != "completed":
                failures += 1
            if (i + 1) % every == 0:
                samples.append(_sample(daphne.pid, worker.pid, i + 1))
        elapsed = time.monotonic() - started
        http.close()
        first = next(s for s in samples if s["runs"] == every)
        last = samples[-1]

        # Idle websocket clients.
        sessions = [create_session(owner=user, title=f"idle {i}").id for i in range(clients)]
        close_old_connections()
        time.sleep(1.0)
        before = rss_mib(daphne.pid)

        async def connect_and_measure() -> tuple[float, float]:
            sockets = await _idle_clients(port, token, sessions)
            await asyncio.sleep(2.0)
            during = rss_mib(daphne.pid)
            for ws in sockets:
                await ws.close()
            await asyncio.sleep(1.0)
            return during, rss_mib(daphne.pid)

        during, after_close = asyncio.run(connect_and_measure())
        return {
            "runs": runs,
            "failed_runs": failures,
            "seconds": elapsed,
            "runs_per_s": runs / elapsed if elapsed else 0.0,
            "samples": samples,
            "at": {"early": first["runs"], "late": last["runs"]},
            "worker_early_mib": first["worker_total_mib"],
            "worker_late_mib": last["worker_total_mib"],
            "worker_ratio": ratio(last["worker_total_mib"], first["worker_total_mib"]),
            "daphne_early_mib": first["daphne_mib"],
            "daphne_late_mib": last["daphne_mib"],
            "daphne_ratio": ratio(last["daphne_mib"], first["daphne_mib"]),
            "clients": clients,
            "daphne_before_clients_mib": before,
            "daphne_with_clients_mib": during,
            "daphne_after_close_mib": after_close,
            "mib_per_client": (during - before) / clients,
            "worker_command": "celery -A config worker -c 2 --prefetch-multiplier 1 -l warning",
        }
    finally:
        daphne.stop()
        worker.stop()
