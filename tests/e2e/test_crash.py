"""docs/semantics.md §1.7: a worker killed with SIGKILL mid-run. Its lease expires, the next
worker's sweep enqueues the run again, and it resumes: nothing persisted is lost and no side-effect
tool runs twice. The Redis visibility timeout is set to an hour, so the broker's own
re-delivery cannot be what saves the run."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from tests.conftest import wait_until

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(900)

# 3 scenarios a round: 7 rounds kill the worker 21 times (issue 7 asks for 20); the suite
# runs 2 (6 kills), docs/operations.md the 7.
ROUNDS = int(os.environ.get("CRASH_ROUNDS", "2"))


def kill_worker(proc) -> None:
    os.killpg(proc.pid, signal.SIGKILL)  # the whole worker: main process and pool children
    proc.wait(10)


@pytest.mark.django_db(transaction=True)
def test_a_killed_worker_s_runs_resume_without_running_a_tool_twice(procs, tmp_path):
    url = services_database_url()
    workspace = tmp_path / "ws"
    env = base_env(
        DATABASE_URL=url,
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(workspace),
        RUN_LEASE_SECONDS="2",
        CELERY_VISIBILITY_TIMEOUT="3600",
    )
    user = User.objects.create_user("alice", password="pw")
    token = Token.objects.create(user=user).key
    host = procs.daphne(env, tmp_path)
    http = httpx.Client(
        base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
    )
    worker = procs.worker(env, tmp_path)
    scripts = {
        "during a slow tool": ("append log.txt x\nwait 5", lambda wt: (wt / "log.txt").exists()),
        "between tool batches": (
            "append log.txt x\nsay between\nappend log2.txt y\nwait 5",
            lambda wt: (wt / "log2.txt").exists(),
        ),
        "during a streamed reply": (
            "pace 100\nsay " + " ".join(f"w{i}" for i in range(30)) + "\nappend log.txt x",
            None,
        ),
    }
    try:
        kills = 0
        for attempt in range(ROUNDS):
            for label, (script, ready) in scripts.items():
                sid = http.post("/api/sessions/", json={"title": label}).json()["id"]
                worktree = workspace / sid
                run = http.post(
                    f"/api/sessions/{sid}/runs/", json={"messages": [{"content": script}]}
                ).json()

                def streamed_some(sid=sid):
                    messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
                    return any(
                        len(p.get("text", "")) > 20 for m in messages[1:] for p in m["parts"]
                    )

                def started(ready=ready, worktree=worktree, streamed_some=streamed_some):
                    return ready(worktree) if ready else streamed_some()

                wait_until(started, 30, f"{label} to start")
                time.sleep(0.3)  # scenario: the kill lands a little way into the run
                persisted = {
                    p["id"]
                    for m in http.get(f"/api/sessions/{sid}/messages/").json()["results"]
                    for p in m["parts"]
                }
                kill_worker(worker)
                kills += 1
                worker = procs.worker(env, tmp_path)
                done = wait_until(
                    lambda run=run: (
                        (r := http.get(f"/api/runs/{run['id']}/").json())["status"]
                        in ("completed", "error", "cancelled")
                        and r
                    ),
                    40,
                    f"the run {label} (attempt {attempt}) to be resumed",
                )
                assert done["status"] == "completed", done["error"]
                assert (worktree / "log.txt").read_text() == "x\n", "append ran exactly once"
                if (worktree / "log2.txt").exists():
                    assert (worktree / "log2.txt").read_text() == "y\n"
                session = http.get(f"/api/sessions/{sid}/").json()
                assert session["status"] == "idle"
                messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
                tools = [p for m in messages for p in m["parts"] if p["type"] == "tool"]
                assert all(p["state"]["status"] in ("completed", "error") for p in tools)
                if label == "between tool batches":
                    # The batch before the crash was checkpointed: kept, not interrupted.
                    first = next(p for p in tools if p["state"]["input"].get("path") == "log.txt")
                    assert first["state"]["status"] == "completed", first
                recovered = [m for m in messages if (m["error"] or {}).get("reason")]
                if label == "during a streamed reply":
                    # The answer goes on where the crash stopped it, in its message
                    # (docs/semantics.md §1.12): the whole text once, no error.
                    said = ["".join(p.get("text") or "" for p in m["parts"]) for m in messages]
                    assert said[1] == scripts[label][0].split("say ")[1].split("\n")[0]
                    assert not recovered, recovered
                else:
                    assert recovered[0]["error"]["reason"] == "UnfinishedAssistantMessage"
                kept = {p["id"] for m in messages for p in m["parts"]}
                assert persisted <= kept, "a part persisted before the kill was lost"
        assert kills == 3 * ROUNDS
    except Exception:
        print(procs.logs())
        raise
