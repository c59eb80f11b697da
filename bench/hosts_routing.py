"""Worker hosts (issue 45): a run's start with routing (the session homed on a live host, its
run sent to that host's Celery queue, ``sessions_app/hosts.queue_for``) against without (no
home: the default queue, as with one host or a shared volume).

Through the shipped process layout (``bench/env.py``): one Daphne and one Celery worker as
platform/Procfile starts it (``--pool threads -c 4``), with ``WORKER_HOST`` set: it beats
(``hosts.beat``) and consumes its host's queue beside the default one (config/celery.py).
Two sessions of the scripted model, one homed on the worker's host and one with no home (its
``host`` blanked in the database; placement had homed it). Runs alternate between them:
``POST /api/sessions/{id}/runs/`` with ``"wait": true`` and the script ``say hi``, and the
start is the run's ``started_at`` (the worker took it, ``lifecycle.begin``) less the moment
the request was sent, on one clock (this machine's). The run's queue wait
(``started_at - created_at``) is reported beside it.

**A file read through the API** (``GET /api/sessions/{id}/files/<path>``), the same file of
the same session from two web processes: one that holds the worktrees (``WORKSPACE_ROOT`` set,
``HOLDS_WORKTREES`` True: the worktree's file, opened by descriptor) and one started with
``WORKSPACE_ROOT=""`` (``HOLDS_WORKTREES`` False: the session's current tree from its mirror
of the central store, ``sessions_app/reads.py``). The worker pushes each step to the central
store (``SNAPSHOT_REMOTE``: the tests' https git server). Reads alternate between the two,
warm; then the first read from the mirror right after each of a few new steps (the mirror
fetches the step first).
"""

from __future__ import annotations

import os
import statistics
import time
from datetime import datetime
from typing import Any

import httpx

from .env import LISTEN_BACKLOG, VENV_BIN, Env, favour, free_port, wait_port
from .stats import percentile

HOST = "bench-host-a"
WARMUPS = 3
ROUNDS = 15
ROUNDS_QUICK = 8
READS = 100
READS_QUICK = 30
STEPS = 5


def _start(env: Env, extra: dict[str, str]) -> int:
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        _daphne, port = env.daphne()
        env.worker(4, pool="threads")
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = httpx.get(f"http://127.0.0.1:{port}/api/health/", timeout=10).json()
        if health["checks"]["worker"]["ok"] and _live(HOST):
            return port
        time.sleep(0.5)
    raise RuntimeError(f"the worker of {HOST} did not answer in 60 s")


def _mirror_web(env: Env, extra: dict[str, str], mirror_root: str) -> int:
    """A second Daphne that holds no worktree (``WORKSPACE_ROOT=""``), as env.daphne starts
    one otherwise; its port."""
    port = free_port()
    listen = f"tcp:port={port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}"
    proc = env.spawn(
        f"daphne-mirror-{port}",
        [str(VENV_BIN / "daphne"), "-e", listen, "config.asgi:application"],
        ASGI_THREADS="32",
        **{**extra, "WORKSPACE_ROOT": "", "MIRROR_ROOT": mirror_root},
    )
    favour(proc.popen.pid)
    wait_port(port, proc=proc.popen)
    return port


def _get_ms(http: httpx.Client, url: str, expected: bytes) -> float:
    start = time.perf_counter()
    response = http.get(url, timeout=60)
    took = (time.perf_counter() - start) * 1000
    if response.status_code != 200 or response.content != expected:
        raise RuntimeError(f"read {url}: {response.status_code} {response.text[:200]}")
    return took


def _reads(local: httpx.Client, remote: httpx.Client, quick: bool) -> dict[str, Any]:
    """The read measurements (see the module), in a session of ``local``'s web."""
    sid = local.post("/api/sessions/", json={"title": "reads"}).json()["id"]
    _one(local, sid, "write notes/f.txt hello")
    url = f"/api/sessions/{sid}/files/notes/f.txt"
    out: dict[str, Any] = {"first_mirror_ms": _get_ms(remote, url, b"hello")}
    disk, mirror = [], []
    for _ in range(READS_QUICK if quick else READS):
        disk.append(_get_ms(local, url, b"hello"))
        mirror.append(_get_ms(remote, url, b"hello"))
    after = []
    for step in range(STEPS):
        _one(local, sid, f"write notes/f.txt step {step}")
        after.append(_get_ms(remote, url, f"step {step}".encode()))
    out.update(
        reads=len(disk),
        disk_ms=statistics.median(disk),
        disk_p99_ms=percentile(disk, 99),
        mirror_ms=statistics.median(mirror),
        mirror_p99_ms=percentile(mirror, 99),
        after_step_ms=statistics.median(after),
        steps=len(after),
    )
    return out


def _live(host: str) -> bool:
    from sessions_app import hosts

    return hosts.is_live(host)


def _one(http: httpx.Client, sid: str, script: str = "say hi") -> dict[str, float]:
    body = {"messages": [{"role": "user", "content": script}], "wait": True}
    for _ in range(100):
        sent = time.time()
        response = http.post(f"/api/sessions/{sid}/runs/", json=body, timeout=120)
        if response.status_code != 409:  # the previous run's end still holds the session
            break
        time.sleep(0.02)
    run = response.json()
    if response.status_code != 200 or run.get("status") != "completed":
        raise RuntimeError(f"run: {response.status_code} {response.text[:300]}")
    started = datetime.fromisoformat(run["started_at"]).timestamp()
    created = datetime.fromisoformat(run["created_at"]).timestamp()
    return {"start_ms": (started - sent) * 1000, "queued_ms": (started - created) * 1000}


def run(env: Env, quick: bool, server: Any, mirror_root: str) -> dict[str, Any]:
    """Routing, then the reads; ``server``: the central store's git server."""
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    from sessions_app.models import Session

    user = User.objects.create_user(f"bench-hosts-{time.monotonic_ns()}", password="x")
    headers = {"Authorization": f"Token {Token.objects.create(user=user).key}"}
    extra = {
        "WORKER_HOST": HOST,
        "SNAPSHOT_REMOTE": server.url("central"),
        "SNAPSHOT_REMOTE_TOKEN": server.token,
        "GIT_SSL_CAINFO": str(server.ca_file),
    }
    port = _start(env, extra)
    mirror_port = _mirror_web(env, extra, mirror_root)
    samples: dict[str, list[dict[str, float]]] = {"routed": [], "default": []}
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            sids = {}
            for kind in samples:
                made = http.post("/api/sessions/", json={"title": f"routing {kind}"})
                sids[kind] = made.json()["id"]
            placed = Session.objects.get(id=sids["routed"]).host
            Session.objects.filter(id=sids["default"]).update(host="")
            for _ in range(WARMUPS):
                for sid in sids.values():
                    _one(http, sid)
            for _ in range(ROUNDS_QUICK if quick else ROUNDS):
                for kind, sid in sids.items():
                    samples[kind].append(_one(http, sid))
            with httpx.Client(base_url=f"http://127.0.0.1:{mirror_port}", headers=headers) as b:
                reads = _reads(http, b, quick)
    finally:
        env.stop_all()
    out: dict[str, Any] = {"host": HOST, "placed_on": placed, "rounds": len(samples["routed"])}
    out["reads"] = reads
    for kind, rows in samples.items():
        for key in ("start_ms", "queued_ms"):
            values = [r[key] for r in rows]
            out[f"{kind}_{key}"] = statistics.median(values)
            out[f"{kind}_{key}_max"] = max(values)
    return out
