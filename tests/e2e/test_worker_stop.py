"""A worker asked to stop (SIGTERM: a deploy) with runs in the middle (runs_app/execution/drain.py).
A run that ends within ``RUN_DRAIN_SECONDS`` ends there; one that goes on stops without
writing and another worker takes it over at once — not after its lease lapses (here two
minutes), as when a worker dies. Nothing it stored is lost, and the run completes."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from runs_app.models import Run
from tests.conftest import wait_until

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(300)
LEASE = 120
DRAIN = 2


@pytest.mark.django_db(transaction=True)
def test_a_stopping_worker_lets_short_runs_end_and_hands_long_ones_on_at_once(procs, tmp_path):
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        RUN_LEASE_SECONDS=str(LEASE),
        RUN_DRAIN_SECONDS=str(DRAIN),
        CELERY_VISIBILITY_TIMEOUT="3600",  # the broker's re-delivery is not what saves a run
    )
    user = User.objects.create_user("alice", password="pw")
    token = Token.objects.create(user=user).key
    http = httpx.Client(
        base_url=f"http://{procs.daphne(env, tmp_path)}",
        headers={"Authorization": f"Token {token}"},
        timeout=30,
    )
    stopping = procs.worker(env, tmp_path)
    try:
        runs = {}

        def ask(name: str, script: str) -> None:
            sid = http.post("/api/sessions/", json={"title": name}).json()["id"]
            run = http.post(f"/api/sessions/{sid}/runs/", json={"messages": [{"content": script}]})
            runs[name] = (sid, run.json()["id"])

        def streaming() -> bool:
            messages = http.get(f"/api/sessions/{runs['long'][0]}/messages/").json()["results"]
            return any(len(p.get("text", "")) > 20 for m in messages[1:] for p in m["parts"])

        ask("long", "append long.txt x\npace 50\nsay " + " ".join(f"w{i}" for i in range(120)))
        wait_until(streaming, 30, "the long run to stream")
        # Begun on the stopping worker (the only one yet), ending within its drain.
        ask("short", "append short.txt x\nwait 0.5\nsay short done")
        wait_until(lambda: (tmp_path / "ws" / runs["short"][0] / "short.txt").exists(), 20, "short")
        procs.worker(env, tmp_path)  # the worker that stays
        asked = time.monotonic()
        os.kill(stopping.pid, signal.SIGTERM)
        stopping.wait(30)
        assert time.monotonic() - asked < DRAIN + 12, "stopped after its drain, not at a timeout"

        def ended(run_id: str):
            run = http.get(f"/api/runs/{run_id}/").json()
            return run if run["status"] in ("completed", "error", "cancelled") else None

        short = wait_until(lambda: ended(runs["short"][1]), 20, "the short run to end")
        assert short["status"] == "completed"
        assert Run.objects.get(id=short["id"]).attempts == 1, "it ended there"
        long = wait_until(lambda: ended(runs["long"][1]), LEASE / 2, "the long run taken over")
        assert long["status"] == "completed", long["error"]
        assert Run.objects.get(id=long["id"]).attempts == 2, "taken over by the other worker"
        assert time.monotonic() - asked < LEASE / 2, "at once, not after its lease"
        sid = runs["long"][0]
        assert (tmp_path / "ws" / sid / "long.txt").read_text() == "x\n", "its tool ran once"
        messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
        # The answer goes on in its message where the stopped one left it (docs/semantics.md
        # §1.12): the whole text, once.
        text = "".join(p.get("text", "") for p in messages[-1]["parts"] if p["type"] == "text")
        assert text.endswith("w119") and text.count("w0 ") == 1, text
        assert http.get(f"/api/sessions/{sid}/").json()["status"] == "idle"
    except Exception:
        print(procs.logs())
        raise
