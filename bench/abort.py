"""Abort latency (cancel request → ``session.status`` idle on the websocket) over many aborts,
and recovery after SIGKILL (kill → the resumed run's first event), in services mode."""

from __future__ import annotations

import json
import os
import signal
import statistics
import time
from typing import Any

from .env import Env
from .stats import percentile


def _client(port: int, token: str):  # noqa: ANN202
    import httpx

    return httpx.Client(
        base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"}, timeout=30
    )


def _events(port: int, sid: str, token: str):  # noqa: ANN202
    from websockets.sync.client import connect

    ws = connect(f"ws://127.0.0.1:{port}/ws/sessions/{sid}/?token={token}", open_timeout=10)
    assert json.loads(ws.recv(timeout=10))["type"] == "subscribed"
    return ws


def _wait_event(ws, predicate, timeout: float) -> tuple[float, dict]:  # noqa: ANN001
    deadline = time.monotonic() + timeout
    while True:
        event = json.loads(ws.recv(timeout=max(0.01, deadline - time.monotonic())))
        if predicate(event):
            return time.time(), event


def _tool_running(event: dict) -> bool:
    part = event.get("part") or {}
    return (
        event["type"] == "message.part.updated"
        and (part.get("state") or {}).get("status") == "running"
    )


def abort_latency(env: Env, port: int, token: str, count: int) -> dict[str, Any]:
    http = _client(port, token)
    times = []
    for _ in range(count):
        sid = http.post("/api/sessions/", json={}).json()["id"]
        with _events(port, sid, token) as ws:
            run = http.post(
                f"/api/sessions/{sid}/runs/", json={"messages": [{"content": "wait 30"}]}
            ).json()
            _wait_event(ws, _tool_running, 30)
            start = time.time()
            http.post(f"/api/runs/{run['id']}/cancel/")
            end, _ = _wait_event(
                ws, lambda e: e["type"] == "session.status" and e["status"] == "idle", 30
            )
            times.append((end - start) * 1000)
    return {
        "aborts": count,
        "p50_ms": percentile(times, 50),
        "p99_ms": percentile(times, 99),
        "max_ms": max(times),
    }


def recovery(env: Env, port: int, token: str, samples: int) -> dict[str, Any]:
    from django.conf import settings

    http = _client(port, token)
    lease = float(os.environ.get("RUN_LEASE_SECONDS", settings.RUN_LEASE_SECONDS))
    times = []
    worker = env.worker(2)
    for _ in range(samples):
        sid = http.post("/api/sessions/", json={}).json()["id"]
        with _events(port, sid, token) as ws:
            http.post(
                f"/api/sessions/{sid}/runs/", json={"messages": [{"content": "wait 5\nsay after"}]}
            )
            _wait_event(ws, _tool_running, 60)
            os.killpg(worker.popen.pid, signal.SIGKILL)
            killed = time.time()
            worker.popen.wait(10)
            worker = env.worker(2)
            first, _ = _wait_event(ws, lambda e: True, lease * 3 + 60)
            times.append(first - killed)
            _wait_event(
                ws,
                lambda e: e["type"] == "run.updated" and e["run"]["status"] == "completed",
                60,
            )
    return {
        "lease_s": lease,
        "samples": samples,
        "median_s": statistics.median(times),
        "max_s": max(times),
    }


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    daphne, port = env.daphne()
    worker = env.worker(2)
    try:
        user = User.objects.create_user(f"bench-abort-{time.monotonic_ns()}", password="x")
        token = Token.objects.create(user=user).key
        aborts = abort_latency(env, port, token, 10 if quick else 50)
        worker.stop()
        recovered = recovery(env, port, token, 1 if quick else 3)
    finally:
        env.stop_all()
    return {"abort": aborts, "recovery": recovered}


def report(result: dict[str, Any]) -> str:
    a, r = result["abort"], result["recovery"]
    return "\n".join(
        [
            "Abort and recovery (services mode: Daphne + Celery worker + PostgreSQL + Redis)",
            f"  abort latency over {a['aborts']} aborts (cancel -> session.status idle): "
            f"p50 {a['p50_ms']:.0f} ms, p99 {a['p99_ms']:.0f} ms, max {a['max_ms']:.0f} ms "
            "(target p99 < 300 ms)",
            f"  recovery after SIGKILL of the whole worker ({r['samples']} samples, lease "
            f"{r['lease_s']:g} s): kill -> first event of the resumed run median "
            f"{r['median_s']:.1f} s, max {r['max_s']:.1f} s",
        ]
    )
