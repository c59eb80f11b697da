"""Issue 15 / docs/semantics.md §8.2 through the real path (Daphne, Celery, PostgreSQL, Redis): a
run that waits for its owner holds no worker — every worker may stop, leases come and go, and an
approval given later, to a worker started after, completes the run; a deny reaches the model."""

from __future__ import annotations

import os
import signal
import time

import httpx
import pytest

from tests.conftest import wait_until

from .stack import api_stack

pytestmark = pytest.mark.timeout(240)


def _run(http: httpx.Client, run_id: str) -> dict:
    return http.get(f"/api/runs/{run_id}/").json()


@pytest.mark.django_db(transaction=True)
def test_an_approval_after_every_worker_restarted_completes_the_run(procs, tmp_path):
    stack = api_stack(procs, tmp_path, "approver", RUN_LEASE_SECONDS="2")
    env, http, workspace = stack.env, stack.http, stack.workspace
    worker = procs.worker(env, tmp_path)
    try:
        sid = http.post(
            "/api/sessions/", json={"title": "ask", "permissions": {"write": "ask"}}
        ).json()["id"]
        run_id = http.post(
            f"/api/sessions/{sid}/runs/",
            json={"messages": [{"content": "write a.txt approved\nsay written"}]},
        ).json()["id"]
        run = wait_until(
            lambda: (r := _run(http, run_id))["status"] == "requires_action" and r,
            30,
            "the run to wait",
        )
        (call,) = run["required_action"]["tool_calls"]
        assert "+approved" in call["preview"]
        # Every worker stops; the waiting run loses nothing (it held none of them).
        os.killpg(worker.pid, signal.SIGKILL)
        worker.wait(10)
        time.sleep(3)  # past the lease: no sweep takes a waiting run over
        assert _run(http, run_id)["status"] == "requires_action"
        assert http.get(f"/api/sessions/{sid}/").json()["status"] == "waiting"
        procs.worker(env, tmp_path)
        time.sleep(3)  # its sweeps pass (another process: no trace to wait on) and leave it be
        assert _run(http, run_id)["status"] == "requires_action", "a new worker leaves it be"
        answer = http.post(
            f"/api/runs/{run_id}/approve/", json={"part_id": call["part_id"], "decision": "allow"}
        )
        assert answer.status_code == 200, answer.text
        wait_until(lambda: _run(http, run_id)["status"] == "completed", 30, "the run to end")
        assert (workspace / sid / "a.txt").read_text() == "approved"
        assert http.get(f"/api/sessions/{sid}/").json()["status"] == "idle"

        # A deny with a reason: the model reads it (the scripted model's transcript).
        run_id = http.post(
            f"/api/sessions/{sid}/runs/",
            json={"messages": [{"content": "write b.txt nope"}]},
        ).json()["id"]
        run = wait_until(
            lambda: (r := _run(http, run_id))["status"] == "requires_action" and r,
            30,
            "the second run to wait",
        )
        part_id = run["required_action"]["tool_calls"][0]["part_id"]
        http.post(
            f"/api/runs/{run_id}/approve/",
            json={"part_id": part_id, "decision": "deny", "reason": "use c.txt instead"},
        )
        wait_until(lambda: _run(http, run_id)["status"] == "completed", 30, "the run to end")
        transcript = http.get(f"/api/runs/{run_id}/messages/").json()
        assert any(m["role"] == "tool" and "use c.txt instead" in m["content"] for m in transcript)
        assert not (workspace / sid / "b.txt").exists()
    except Exception:
        print(procs.logs())
        raise
