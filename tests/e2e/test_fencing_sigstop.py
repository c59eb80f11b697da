"""Issue 25 point 1, "Fencing" (docs/semantics.md §1.7, §12): a worker stopped (SIGSTOP: a VM pause,
a long GC) past its run's lease, then continued, writes nothing more.

Through the real stack (Daphne, two Celery worker processes, PostgreSQL, Redis) with a
lease of ``LEASE`` seconds:

1. only worker A runs: it takes the run, appends ``line-1`` and starts a slow tool;
2. A is SIGSTOPped and worker B started; A's lease expires, the sweep enqueues the run again
   and B takes it over (a new lease epoch): B recovers the turn, appends ``line-2`` and
   starts a slow tool of its own;
3. A, stopped for at least 3 leases, is continued while B is still in that slow tool.

Without fencing, A carries on from where it stopped as if nothing happened (its renewals
still succeed: B holds the session for the same run id): it writes its step's end over B's
recovery and runs the next step again — ``line-2`` appended a second time (checked with the
fencing of ``fencing.fence``, ``lifecycle.move``'s epoch and the keeper's stop switched off:
this test then fails there), a second "middle" message with the same tool calls on the same
parent, and a second end of the run (the session's usage counted twice). With it, A's first
write is refused (or its keeper stops it first: its lease was not renewed for
``RUN_LEASE_STOP_FRACTION`` of a lease) and it stops, its worker's log saying so.
"""

from __future__ import annotations

import collections
import contextlib
import json
import os
import re
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

pytestmark = pytest.mark.timeout(150)

LEASE = 3.0
STOPPED_FOR = 3 * LEASE  # at least; A stays stopped until B has run the second append
SCRIPT = "\n".join(
    [
        "append log.txt line-1",
        "wait 5",  # A is stopped in here
        "say middle",
        "append log.txt line-2",
        "wait 10",  # B is still in here when A is continued
        "say end",
    ]
)
TERMINAL = ("completed", "error", "cancelled")


def _stopped_lines(log: str, run_id: str) -> list[str]:
    """What a worker logs when one of its executions of ``run_id`` stops without writing
    (runs_app/execution/host.py, runs_app/execution/loop/)."""
    markers = (
        f"run {run_id}: its lease was not renewed",
        f"run {run_id} lost its lock",
        f"run {run_id}: its streamed text was refused",
    )
    return [line for line in log.splitlines() if any(m in line for m in markers)]


def _signature(message: dict) -> str:
    """What an assistant message says and calls: two executions of one step give the same."""
    return json.dumps(
        [
            (p["type"], p.get("text"), p.get("tool"), (p.get("state") or {}).get("input"))
            for p in message["parts"]
            if p["type"] in ("text", "reasoning", "tool")
        ]
    )


@pytest.mark.django_db(transaction=True)
def test_a_worker_stopped_past_its_lease_writes_nothing_once_continued(procs, tmp_path):
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        RUN_LEASE_SECONDS=str(LEASE),
        # The broker's own re-delivery must not be what hands the run to B: the sweep is.
        CELERY_VISIBILITY_TIMEOUT="3600",
    )
    user = User.objects.create_user("fenced", password="pw")
    token = Token.objects.create(user=user).key
    stopped = False
    try:
        # Worker A starts up while Daphne does; B only once A has the run.
        worker_a = procs.worker(env, tmp_path)
        log_a = procs.procs[-1][1]
        host = procs.daphne(env, tmp_path)
        http = httpx.Client(
            base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
        )
        sid = http.post("/api/sessions/", json={"title": "fencing"}).json()["id"]
        run_id = http.post(
            f"/api/sessions/{sid}/runs/", json={"messages": [{"content": SCRIPT}]}
        ).json()["id"]
        worktree_log = tmp_path / "ws" / sid / "log.txt"

        def appended() -> str:
            return worktree_log.read_text() if worktree_log.exists() else ""

        def run() -> dict:
            return http.get(f"/api/runs/{run_id}/").json()

        # 1. Worker A, the only one, runs the first append and is in the slow tool after it.
        wait_until(lambda: "line-1" in appended(), 60, "worker A to run the first append")
        os.killpg(worker_a.pid, signal.SIGSTOP)
        stopped, stopped_at = True, time.monotonic()

        # 2. Worker B takes the run over once A's lease expired, and goes on with the turn.
        procs.worker(env, tmp_path)
        log_b = procs.procs[-1][1]
        wait_until(lambda: "line-2" in appended(), 60, "worker B to take the run over")
        left = stopped_at + STOPPED_FOR - time.monotonic()
        if left > 0:
            time.sleep(left)  # the rest of the SIGSTOP: 3 leases at least
        taken = Run.objects.get(id=run_id)
        assert taken.status == "running", "B must still be in the run when A continues"
        assert taken.attempts == 2, f"one take-over, not {taken.attempts - 1}"

        # 3. A continues while B runs its slow tool.
        os.killpg(worker_a.pid, signal.SIGCONT)
        stopped = False
        continued_at = time.monotonic()
        done = wait_until(lambda: (r := run())["status"] in TERMINAL and r, 60, "the run to end")
        session = wait_until(
            lambda: (s := http.get(f"/api/sessions/{sid}/").json())["status"] == "idle" and s,
            20,
            "the session to be idle",
        )
        # A has stopped by now (its keeper stops it within a tick of being continued);
        # without fencing there is no such line and it wrote on: the checks below say what.
        with contextlib.suppress(AssertionError):
            wait_until(lambda: _stopped_lines(log_a.read_text(), run_id), 10, "A to stop")
        print(f"A continued {time.monotonic() - continued_at:.1f} s ago")

        # -- the run ended once, completed, and the session is free.
        assert done["status"] == "completed", done
        assert done["error"] is None, done
        assert session["busy_run_id"] is None, session
        # Each ``finish`` adds its execution's usage to the session's: a second end (A's)
        # would count A's calls there beside the run's own.
        calls = (session["usage"].get("calls"), done["usage"].get("calls"))
        assert calls[0] == calls[1], f"session usage {session['usage']} != run's {done['usage']}"

        # -- every side effect at most once (each appends a line of its own).
        content = http.get(f"/api/sessions/{sid}/files/log.txt").text
        counts = collections.Counter(content.splitlines())
        assert all(n == 1 for n in counts.values()), f"an append ran twice: {content!r}"
        assert content == "line-1\nline-2\n", content

        # -- nothing twice among the messages and parts, on the path or off it.
        everything = http.get(f"/api/sessions/{sid}/messages/", params={"tree": 1}).json()
        path = http.get(f"/api/sessions/{sid}/messages/").json()
        assert not everything.get("next") and not everything.get("previous")
        messages = everything["results"]
        assert [m["id"] for m in path["results"]] == [m["id"] for m in messages], (
            "a message off the path: another execution wrote a branch of its own"
        )
        parts = [p for m in messages for p in m["parts"]]
        assert len({m["id"] for m in messages}) == len(messages)
        assert len({p["id"] for p in parts}) == len(parts)
        tools = [p for p in parts if p["type"] == "tool"]
        call_ids = [p["call_id"] for p in tools]
        assert len(set(call_ids)) == len(call_ids), f"a tool call twice: {call_ids}"
        assistant = [m for m in messages if m["role"] == "assistant"]
        parents = [m["parent_id"] for m in messages]
        assert len(set(parents)) == len(parents), "two messages on one parent"
        signatures = [_signature(m) for m in assistant]
        assert len(set(signatures)) == len(signatures), f"a step written twice: {signatures}"
        assert [m["role"] for m in messages] == ["user", "assistant", "assistant", "assistant"]
        text = ["".join(p.get("text") or "" for p in m["parts"]) for m in assistant]
        assert text[1:] == ["middle", "end"], text
        # Step 0 is as B's recovery left it (its calls were on record, pending, when B took it
        # over: interrupted, never run again); A's end of that step, written after it was
        # continued, would have made them completed.
        first = assistant[0]
        assert first["error"]["reason"] == "UnfinishedAssistantMessage", first
        for part in (p for p in first["parts"] if p["type"] == "tool"):
            state = part["state"]
            assert state["status"] == "error" and state["metadata"].get("interrupted"), part
        # B's own steps ran whole.
        for message in assistant[1:]:
            assert message["completed_at"] and not message["error"], message
            for part in (p for p in message["parts"] if p["type"] == "tool"):
                assert part["state"]["status"] == "completed", part

        # -- A said it stopped without writing; B was never stopped.
        a_lines = _stopped_lines(log_a.read_text(), run_id)
        assert a_lines, "worker A's log does not say it stopped:\n" + log_a.read_text()[-4000:]
        assert not _stopped_lines(log_b.read_text(), run_id), log_b.read_text()[-4000:]
        print("worker A:", *a_lines, sep="\n  ")
        assert not re.search(r"run \S+ crashed in the host", log_a.read_text())
    except BaseException:
        print(procs.logs())
        raise
    finally:
        if stopped:  # the fixture's terminate must reach it
            os.killpg(worker_a.pid, signal.SIGCONT)
