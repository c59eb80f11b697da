"""Faults (issue 7): the worker's PostgreSQL connections are killed (``pg_terminate_backend``)
in the middle of a run. The run must not hang: it completes (the loop reconnects, or the
lease expires and the run resumes) or ends in ``error`` with a clear message; the session is
idle again; every tool part is in a final state (nothing half-written visible)."""

from __future__ import annotations

import httpx
import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection
from rest_framework.authtoken.models import Token

from tests.conftest import wait_until

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(300)


def kill_other_backends() -> int:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity"
            " WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


def unfinished_tools(http: httpx.Client, sid: str) -> list[tuple[str, dict]]:
    """The tool calls of the session's path that are neither completed nor failed."""
    messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
    return [
        (p["tool"], p["state"])
        for m in messages
        for p in m["parts"]
        if p["type"] == "tool" and p["state"]["status"] not in ("completed", "error")
    ]


@pytest.mark.django_db(transaction=True)
def test_killed_database_connections_mid_run(procs, tmp_path):
    url = services_database_url()
    env = base_env(
        DATABASE_URL=url,
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        RUN_LEASE_SECONDS="2",
    )
    user = User.objects.create_user("alice", password="pw")
    token = Token.objects.create(user=user).key
    host = procs.daphne(env, tmp_path)
    procs.worker(env, tmp_path)
    http = httpx.Client(
        base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=30
    )
    outcomes = []
    try:
        for i in range(3):
            sid = http.post("/api/sessions/", json={"title": f"db fault {i}"}).json()["id"]
            words = " ".join(f"w{n}" for n in range(40))
            script = f"append log.txt x\npace 60\nsay {words}\nappend log.txt y"
            run = http.post(
                f"/api/sessions/{sid}/runs/", json={"messages": [{"content": script}]}
            ).json()

            def streaming(sid=sid):
                messages = http.get(f"/api/sessions/{sid}/messages/").json()["results"]
                return any(len(p.get("text", "")) > 10 for m in messages[1:] for p in m["parts"])

            wait_until(streaming, 30, "the reply to stream")
            assert kill_other_backends() >= 1
            final = wait_until(
                lambda run=run: (
                    (r := http.get(f"/api/runs/{run['id']}/").json())["status"]
                    in ("completed", "error", "cancelled")
                    and r
                ),
                60,
                "the run to end after its connections were killed",
            )
            outcomes.append((final["status"], (final["error"] or {}).get("message")))
            if final["status"] == "error":
                assert final["error"]["type"] == "DatabaseError", final["error"]
                assert "database connection was lost" in final["error"]["message"]
            session = wait_until(
                lambda sid=sid: (
                    (s := http.get(f"/api/sessions/{sid}/").json())["status"] == "idle" and s
                ),
                30,
                "the session to be idle again",
            )
            assert session["busy_run_id"] is None
            # Every call final, also one the run had put on record and not started when the
            # loss ended it (it ends with the run's last message, interrupted).
            unfinished = unfinished_tools(http, sid)
            assert not unfinished, (final, unfinished)
            log = (tmp_path / "ws" / sid / "log.txt").read_text()
            assert log.count("x\n") == 1, "a side-effect tool ran exactly once"
            # And the session works afterwards.
            after = http.post(
                f"/api/sessions/{sid}/runs/",
                json={"messages": [{"content": "say still here"}], "wait": True},
            ).json()
            assert after["status"] == "completed", after
            assert not unfinished_tools(http, sid)
            log = (tmp_path / "ws" / sid / "log.txt").read_text()
            assert log.count("x\n") == 1 and log.count("y\n") <= 1, log
    except Exception:
        print(procs.logs())
        raise
    print("outcomes:", outcomes)
