"""What an API request costs the web process: CPU ms per request of Daphne, before and after a
change, side by side in one run.

"Before" is the project at ``API_BEFORE`` (a commit; default ``BEFORE``), "after" the working
tree. Each is served by its own Daphne, started as platform/Procfile starts it (a queue of 1024
connections, ``ASGI_THREADS=32``), from its own copy of the tree, against the same database
and Redis. Two requests, each from a token-authenticated client on one keep-alive
connection, one after another (the CPU of one request, not of a burst):

* ``POST /api/sessions/{id}/runs/``: a run asked for (each on a new session, so each is
  admitted and enqueued; no worker runs here, so none starts);
* ``GET /api/sessions/{id}/``: a read, the fixed cost of any request.

Blocks of ``BLOCK`` requests alternate between the two servers, so the machine's load falls
on both alike; the CPU of each is read from /proc (user + system) around its blocks.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

from .env import Env, cpu_seconds
from .paint import _tree_of
from .stats import ratio

BEFORE = "5947d54"  # before config/middleware.py
BLOCK = 50


def before_and_after(env: Env, commit: str, tmp: Path) -> tuple[dict[str, Any], str]:
    """Two Daphnes at equal weights, as platform/Procfile starts them: "before" serving the
    project at ``commit`` (unpacked into ``tmp``), "after" the working tree; and the full
    commit id."""
    full = _tree_of(commit, tmp)
    return {"before": env.daphne(equal=True, tree=tmp), "after": env.daphne(equal=True)}, full


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    import httpx
    from django.contrib.auth.models import User
    from django.db import close_old_connections
    from rest_framework.authtoken.models import Token

    from sessions_app.services.sessions import create_session

    # Requests of each kind, each server (two servers: within the 1,000 sessions of a quota).
    count = 200 if quick else 450
    user = User.objects.create_user("bench-api", password="x")
    token = Token.objects.create(user=user).key
    warm = 20
    fresh = iter([create_session(owner=user, title=f"api {i}") for i in range(2 * (count + warm))])
    read = create_session(owner=user, title="read")
    close_old_connections()
    body = {"messages": [{"role": "user", "content": "hello"}]}
    results: dict[str, Any] = {"requests": count, "block": BLOCK}
    with tempfile.TemporaryDirectory(prefix="bench-api-") as tmp:
        servers, results["before"] = before_and_after(
            env, os.environ.get("API_BEFORE", BEFORE), Path(tmp)
        )
        results["after"] = "working tree"
        clients = {
            name: httpx.Client(
                base_url=f"http://127.0.0.1:{port}", headers={"Authorization": f"Token {token}"}
            )
            for name, (_proc, port) in servers.items()
        }

        def post(name: str) -> None:
            response = clients[name].post(f"/api/sessions/{next(fresh).id}/runs/", json=body)
            if response.status_code != 202:
                raise RuntimeError(f"{name}: POST answered {response.status_code}")

        def get(name: str) -> None:
            response = clients[name].get(f"/api/sessions/{read.id}/")
            if response.status_code != 200:
                raise RuntimeError(f"{name}: GET answered {response.status_code}")

        try:
            for name in servers:  # imports, first connections
                for _ in range(warm):
                    post(name)
                    get(name)
            cpu = {(name, kind): 0.0 for name in servers for kind in ("post", "get")}
            for block in range(count // BLOCK):
                for name in ("before", "after") if block % 2 else ("after", "before"):
                    pid = servers[name][0].pid
                    for kind, request in (("post", post), ("get", get)):
                        start = cpu_seconds(pid)
                        for _ in range(BLOCK):
                            request(name)
                        cpu[(name, kind)] += cpu_seconds(pid) - start
        finally:
            for client in clients.values():
                client.close()
            for proc, _port in servers.values():
                proc.stop()
    done = (count // BLOCK) * BLOCK
    for kind in ("post", "get"):
        before = 1000 * cpu[("before", kind)] / done
        after = 1000 * cpu[("after", kind)] / done
        results[kind] = {"before_ms": before, "after_ms": after, "ratio": ratio(after, before)}
    return results


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows = [
        [
            label,
            _f(r[kind]["before_ms"], 2),
            _f(r[kind]["after_ms"], 2),
            f"{_f(r[kind]['ratio'], 3)}x",
        ]
        for kind, label in (
            ("post", "POST /api/sessions/{id}/runs/ (a run asked for)"),
            ("get", "GET /api/sessions/{id}/ (a read)"),
        )
    ]
    return _table(
        "Web process CPU ms per API request (Daphne, user + system), before vs after",
        ["", "before", "after", "after / before"],
        rows,
        f"before: {r['before'][:12]}; after: {r['after']}; {r['requests']} requests of each "
        f"kind per server, in alternating blocks of {r['block']}",
    )
