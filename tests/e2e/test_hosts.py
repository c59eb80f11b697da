"""Issue 45, step 1, through the real processes: Daphne and two Celery workers of different
``WORKER_HOST`` on one machine and today's shared ``WORKSPACE_ROOT``. Sessions made through
the API spread over the live hosts (the fewest sessions first), each run is executed by its
session's host (``Run.host``), a host whose beat is older than the lease gets no session, a
fork stays on its source's host, and a session with no host — or whose host died — still
runs, on the other. A clone's prepare job waits in its host's queue for that host's worker."""

from __future__ import annotations

import os
import signal
import time
from datetime import timedelta

import httpx
import pytest
import redis
from django.contrib.auth.models import User
from django.utils import timezone
from rest_framework.authtoken.models import Token

from runs_app.models import Run
from sessions_app import hosts
from sessions_app.models import Host, Session
from tests.conftest import wait_until
from tests.support.git_server import git_server

from .stack import base_env, services_database_url

pytestmark = pytest.mark.timeout(300)
LEASE = 6  # a beat every 3 s; a host dead after 6 s without one


@pytest.mark.django_db(transaction=True)
def test_sessions_live_on_their_hosts_and_their_runs_run_there(procs, tmp_path, settings):
    settings.RUN_LEASE_SECONDS = LEASE  # liveness read here as the processes read it
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        RUN_LEASE_SECONDS=str(LEASE),
    )
    token = Token.objects.create(user=User.objects.create_user("alice", password="pw")).key
    http = httpx.Client(
        base_url=f"http://{procs.daphne(env, tmp_path)}",
        headers={"Authorization": f"Token {token}"},
        timeout=60,
    )
    procs.worker({**env, "WORKER_HOST": "alpha"}, tmp_path)
    beta = procs.worker({**env, "WORKER_HOST": "beta"}, tmp_path)
    old = timezone.now() - timedelta(seconds=10 * LEASE)
    Host.objects.create(name="gamma", last_heartbeat=old, started_at=old)  # long dead, empty
    try:
        wait_until(lambda: live() == {"alpha", "beta"}, 60, "both hosts to beat", every=0.2)

        def new() -> str:
            return http.post("/api/sessions/", json={"title": "t"}).json()["id"]

        def run(sid: str) -> Run:
            body = {"messages": [{"content": "write f.txt here\nsay done"}], "wait": True}
            answer = http.post(f"/api/sessions/{sid}/runs/", json=body).json()
            assert answer["status"] == "completed", answer
            return Run.objects.get(id=answer["id"])

        sessions = [new() for _ in range(4)]
        homes = {sid: Session.objects.get(id=sid).host for sid in sessions}
        assert sorted(homes.values()) == ["alpha", "alpha", "beta", "beta"]
        for sid in sessions:
            assert run(sid).host == homes[sid]  # executed by its own host's worker

        on_beta = next(sid for sid in sessions if homes[sid] == "beta")
        fork = http.post(f"/api/sessions/{on_beta}/fork/", json={}).json()["id"]
        assert Session.objects.get(id=fork).host == "beta"  # not the emptier alpha
        assert run(fork).host == "beta"
        assert (tmp_path / "ws" / fork / "f.txt").read_text().startswith("here")

        anywhere = new()
        Session.objects.filter(id=anywhere).update(host="")  # as sessions from before hosts
        assert run(anywhere).host in {"alpha", "beta"}

        os.killpg(beta.pid, signal.SIGKILL)  # beta dies: it beats no more
        beta.wait(10)
        wait_until(lambda: live() == {"alpha"}, 30, "beta's beat to lapse", every=0.2)
        assert Session.objects.get(id=new()).host == "alpha"
        # On the shared volume a session whose host is dead goes to the default queue.
        assert run(on_beta).host == "alpha"
    except Exception:
        print(procs.logs())
        raise


@pytest.mark.django_db(transaction=True)
def test_a_clone_waits_in_its_hosts_queue_for_a_worker_of_that_host(procs, tmp_path, settings):
    """The prepare job of a clone goes to its session's host's queue, not the default one:
    while that host has no worker (only its beat), the job waits there, and the alpha worker
    does not take it; the host's worker, once started, clones."""
    settings.RUN_LEASE_SECONDS = LEASE
    with git_server(tmp_path) as repos:
        url = repos.make_repo("team/tool", {"README.md": "# tool\n"})
        env = base_env(
            DATABASE_URL=services_database_url(),
            REDIS_URL=settings.REDIS_URL,
            WORKSPACE_ROOT=str(tmp_path / "ws"),
            RUN_LEASE_SECONDS=str(LEASE),
            GIT_ALLOWED_HOSTS="127.0.0.1",
            GIT_SSL_CAINFO=str(repos.ca_file),
        )
        token = Token.objects.create(user=User.objects.create_user("bob", password="pw")).key
        http = httpx.Client(
            base_url=f"http://{procs.daphne(env, tmp_path)}",
            headers={"Authorization": f"Token {token}"},
            timeout=60,
        )
        procs.worker({**env, "WORKER_HOST": "alpha"}, tmp_path)
        try:
            wait_until(lambda: live() == {"alpha"}, 60, "alpha to beat", every=0.2)
            first = http.post("/api/sessions/", json={"title": "t"}).json()["id"]
            assert Session.objects.get(id=first).host == "alpha"
            Host.objects.create(name="ghost")  # beats now: live, and the emptier host
            answer = http.post("/api/sessions/", json={"repository": {"url": url}})
            sid = answer.json()["id"]
            assert Session.objects.get(id=sid).host == "ghost", answer.text
            queue = f"{env['CELERY_QUEUE']}.host.ghost"
            broker = redis.Redis.from_url(settings.REDIS_URL)
            wait_until(lambda: broker.llen(queue) == 1, 10, "the job in ghost's queue")
            assert Session.objects.get(id=sid).status == Session.Status.PREPARING
            procs.worker({**env, "WORKER_HOST": "ghost"}, tmp_path)
            wait_until(
                lambda: Session.objects.get(id=sid).status == Session.Status.IDLE,
                60,
                "ghost's worker to clone",
                every=0.2,
            )
            assert broker.llen(queue) == 0
            assert (tmp_path / "ws" / sid / "README.md").read_text() == "# tool\n"
        except Exception:
            print(procs.logs())
            raise


@pytest.mark.django_db(transaction=True)
def test_a_stopping_host_hands_its_runs_to_another_host_at_once(procs, tmp_path, settings):
    """SIGTERM to the one worker of host alpha mid-run (a deploy, one host per container):
    its drain hands the run on to the default queue, not back to alpha's queue that no one
    else reads, and beta takes it over at once, not after the lease (two minutes here)."""
    lease = 120
    settings.RUN_LEASE_SECONDS = lease
    env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(tmp_path / "ws"),
        RUN_LEASE_SECONDS=str(lease),
        RUN_DRAIN_SECONDS="1",
        CELERY_VISIBILITY_TIMEOUT="3600",  # the broker's re-delivery is not what saves it
    )
    token = Token.objects.create(user=User.objects.create_user("carol", password="pw")).key
    http = httpx.Client(
        base_url=f"http://{procs.daphne(env, tmp_path)}",
        headers={"Authorization": f"Token {token}"},
        timeout=60,
    )
    alpha = procs.worker({**env, "WORKER_HOST": "alpha"}, tmp_path)
    try:
        # Both hosts up before the run starts (a tie goes to alpha by name): on a loaded
        # machine beta's start took longer than the run, which then ended on alpha (CI).
        procs.worker({**env, "WORKER_HOST": "beta"}, tmp_path)
        wait_until(lambda: live() == {"alpha", "beta"}, 60, "both hosts to beat", every=0.2)
        sid = http.post("/api/sessions/", json={"title": "t"}).json()["id"]
        assert Session.objects.get(id=sid).host == "alpha"
        script = "append long.txt x\npace 50\nsay " + " ".join(f"w{i}" for i in range(120))
        run_id = http.post(f"/api/sessions/{sid}/runs/", json={"messages": [{"content": script}]})
        run_id = run_id.json()["id"]
        wait_until(lambda: Run.objects.get(id=run_id).host == "alpha", 30, "alpha to run it")
        asked = time.monotonic()
        os.killpg(alpha.pid, signal.SIGTERM)
        alpha.wait(30)

        def ended() -> Run | None:
            run = Run.objects.get(id=run_id)
            return run if run.status in ("completed", "error", "cancelled") else None

        run = wait_until(ended, lease / 2, "the run taken over", every=0.2)
        assert run.status == "completed" and run.host == "beta" and run.attempts == 2
        assert time.monotonic() - asked < lease / 2, "at once, not after its lease"
        assert (tmp_path / "ws" / sid / "long.txt").read_text() == "x\n", "its tool ran once"
    except Exception:
        print(procs.logs())
        raise


def live() -> set[str]:
    return set(hosts.live_hosts().values_list("name", flat=True))
