"""Issue 45's scenarios through the real processes: two worker hosts on this machine, each a
Celery worker with its own ``WORKER_HOST`` and ``WORKSPACE_ROOT`` and — where the test can make
one — its own network namespace, reaching only PostgreSQL, Redis and the central store over
relays (tests/e2e/hosts_harness.py; where it cannot, loopback, and the test prints which); the
web a Daphne with ``WORKSPACE_ROOT=""`` (it holds no worktree); the central store a real git
server (``git http-backend`` over https, tests/support/git_server.py).

* Sessions spread over both hosts, each run executed by its home, its files on that host's
  disk only; a drain of alpha (``manage.py drain_host alpha``) loses nothing: every session is
  then on beta, and its next run finds its files there (materialised from the store); a
  revert and an unrevert asked of the web are done on beta's files.
* A run on alpha while alpha is lost (every process SIGKILLed, its disk deleted) mid-step:
  the session resumes on beta with its files as of the last replicated step and the run
  completes there; the step in progress is closed interrupted and its write, which ran on
  alpha, is lost with alpha's disk and never run twice (docs/semantics.md §1.5); the files on
  beta's disk, in the store and listed by the API. An idle session of alpha is moved to beta
  by beta's sweep (no run asking) and its next run finds its files there.
"""

from __future__ import annotations

import time
from pathlib import Path
from urllib.parse import urlparse

import httpx
import pytest
from django.contrib.auth.models import User
from rest_framework.authtoken.models import Token

from runs_app.models import Run
from sessions_app import hosts
from sessions_app.models import Part, Session
from tests.conftest import wait_until
from tests.support.db_templates import manage
from tests.support.git_server import GitServer, git_server
from workspace import replication

from .hosts_harness import HostSet
from .stack import Processes, base_env, services_database_url

pytestmark = [pytest.mark.timeout(300), pytest.mark.django_db(transaction=True)]
LEASE = 6  # a beat every 3 s; a host dead 6 s after its last
TERMINAL = ("completed", "error", "cancelled")


class MultiHost:
    """The web, the central store and two worker hosts (not started: ``hosts.start``)."""

    def __init__(self, procs: Processes, tmp: Path, settings, store: GitServer) -> None:  # noqa: ANN001
        settings.RUN_LEASE_SECONDS = LEASE  # liveness read here as the processes read it
        store.make_repo("central", {"README": "the central store\n"})
        self.store = store
        self.env = base_env(
            DATABASE_URL=services_database_url(),
            REDIS_URL=settings.REDIS_URL,
            RUN_LEASE_SECONDS=str(LEASE),
            SNAPSHOT_REMOTE=store.url("central"),
            SNAPSHOT_REMOTE_TOKEN=store.token,
            GIT_SSL_CAINFO=str(store.ca_file),
        )
        self.web_env = {**self.env, "WORKSPACE_ROOT": "", "MIRROR_ROOT": str(tmp / "mirror")}
        token = Token.objects.create(user=User.objects.create_user("ann", password="pw")).key
        self.http = httpx.Client(
            base_url=f"http://{procs.daphne(self.web_env, tmp)}",
            headers={"Authorization": f"Token {token}"},
            timeout=60,
        )
        ports = [
            urlparse(self.env["DATABASE_URL"]).port or 5432,
            urlparse(self.env["REDIS_URL"]).port or 6379,
            urlparse(store.url("central")).port,
        ]
        self.hosts = HostSet(procs, self.env, tmp, ports)
        print(f"worker hosts in network namespaces of their own: {self.hosts.isolated}")

    def new(self) -> str:
        return self.http.post("/api/sessions/", json={"title": "t"}).json()["id"]

    def submit(self, sid: str, script: str) -> str:
        body = {"messages": [{"content": script}]}
        answer = self.http.post(f"/api/sessions/{sid}/runs/", json=body)
        assert answer.status_code in (200, 201, 202), answer.text
        return answer.json()["id"]

    def run(self, sid: str, script: str) -> Run:
        run_id = self.submit(sid, script)
        return wait_until(lambda: ended(run_id), 90, "the run to end", every=0.2)

    def stored(self, sid: str) -> dict[str, bytes]:
        """The session's files as the central store holds them."""
        files = self.store.read_tree("central", replication.ref(sid))
        return {k: v for k, v in files.items() if k != "README"}

    def listed(self, sid: str) -> set[str]:
        """The file names the API lists (the web reads its mirror of the store)."""
        answer = self.http.get(f"/api/sessions/{sid}/files/")
        assert answer.status_code == 200, answer.text
        return set(_names(answer.json()))


def ended(run_id: str) -> Run | None:
    run = Run.objects.get(id=run_id)
    return run if run.status in TERMINAL else None


def _names(listing: object) -> list[str]:
    """File paths in an API listing, whatever nesting it uses."""
    items = (
        listing.get("files", listing.get("entries", [])) if isinstance(listing, dict) else listing
    )
    out = []
    for item in items or []:
        if isinstance(item, dict):
            if item.get("type") in ("dir", "directory"):
                continue
            out.append(item.get("path") or item.get("name"))
        else:
            out.append(str(item))
    return out


def live() -> set[str]:
    return set(hosts.live_hosts().values_list("name", flat=True))


def test_sessions_spread_over_two_hosts_and_a_drain_loses_nothing(procs, tmp_path, settings):
    with git_server(tmp_path / "store") as store:
        stack = MultiHost(procs, tmp_path, settings, store)
        hs = stack.hosts
        hs.start("alpha")
        hs.start("beta")
        try:
            wait_until(lambda: live() == {"alpha", "beta"}, 60, "both hosts to beat", every=0.2)
            sessions = [stack.new() for _ in range(4)]
            homes = {sid: Session.objects.get(id=sid).host for sid in sessions}
            assert sorted(homes.values()) == ["alpha", "alpha", "beta", "beta"]
            files = {}
            for sid in sessions:
                run = stack.run(sid, f"write f.txt {sid}\nwrite sub/g.txt {homes[sid]}")
                assert run.status == "completed" and run.host == homes[sid]
                files[sid] = {"f.txt": sid.encode(), "sub/g.txt": homes[sid].encode()}
                other = "beta" if homes[sid] == "alpha" else "alpha"
                assert hs.files(homes[sid], sid) == files[sid]  # on its home's disk
                assert hs.files(other, sid) == {}  # and no other's
                assert stack.stored(sid) == files[sid]  # replicated

            out = manage(stack.web_env, "drain_host", "alpha")
            assert "2 moved, 0 busy" in out, out
            assert {Session.objects.get(id=sid).host for sid in sessions} == {"beta"}
            assert Session.objects.get(id=stack.new()).host == "beta"  # alpha takes none
            for sid in sessions:  # nothing lost: each runs on beta, on its files
                run = stack.run(sid, "append log.txt after the drain")
                assert run.status == "completed" and run.host == "beta"
                expected = {**files[sid], "log.txt": b"after the drain\n"}
                assert hs.files("beta", sid) == expected
                assert stack.stored(sid) == expected
                assert stack.listed(sid) >= set(expected)
            # A history move from the web (no worktree) is done by the new home, on its files.
            moved = next(sid for sid in sessions if homes[sid] == "alpha")
            last = Run.objects.filter(session_id=moved).latest("created_at")
            answer = stack.http.post(
                f"/api/sessions/{moved}/revert/", json={"message_id": last.input_message_id}
            )
            assert answer.status_code == 200, answer.text
            assert hs.files("beta", moved) == files[moved]  # log.txt reverted, on beta
            answer = stack.http.post(f"/api/sessions/{moved}/unrevert/")
            assert answer.status_code == 200, answer.text
            assert hs.files("beta", moved)["log.txt"] == b"after the drain\n"
        except Exception:
            print(procs.logs())
            raise
        finally:
            hs.close()


def test_a_host_lost_mid_run_its_session_resumes_on_the_other(procs, tmp_path, settings):
    with git_server(tmp_path / "store") as store:
        stack = MultiHost(procs, tmp_path, settings, store)
        hs = stack.hosts
        hs.start("alpha")
        hs.start("beta")
        try:
            wait_until(lambda: live() == {"alpha", "beta"}, 60, "both hosts to beat", every=0.2)
            sid = stack.new()
            assert Session.objects.get(id=sid).host == "alpha"  # both empty: by name
            stack.new()  # on beta
            idle = stack.new()  # on alpha, idle when alpha dies
            assert Session.objects.get(id=idle).host == "alpha"
            assert stack.run(idle, "write i.txt I1").status == "completed"
            # Step 1 writes and is replicated; step 2 writes, then waits: alpha dies there.
            script = (
                "write a.txt A1\nwrite sub/b.txt B1\n"
                "say waiting\nwrite d.txt D1\nwait 5\n"
                "say resumed\nwrite c.txt C1"
            )
            run_id = stack.submit(sid, script)

            def mid_step_two() -> bool:
                session = Session.objects.get(id=sid)
                return bool(session.replicated_snapshot) and (hs.files("alpha", sid).get("d.txt"))

            wait_until(mid_step_two, 60, "step 1 replicated and step 2 begun", every=0.05)
            assert Run.objects.get(id=run_id).host == "alpha"
            assert stack.stored(sid) == {"a.txt": b"A1", "sub/b.txt": b"B1"}
            hs.kill("alpha")
            killed = time.monotonic()
            assert not hs.hosts["alpha"].root.exists()

            run = wait_until(lambda: ended(run_id), 90, "the run to end on beta", every=0.2)
            recovered = time.monotonic() - killed
            print(f"alpha killed mid-step: the run completed on beta {recovered:.1f} s later")
            assert run.status == "completed", (run.status, run.error)
            assert run.host == "beta" and run.attempts >= 2
            assert Session.objects.get(id=sid).host == "beta"
            # Step 2's write was running with alpha: interrupted, never run twice
            # (docs/semantics.md §1.5), and what it wrote went with alpha's disk.
            calls = Part.objects.filter(session_id=sid, type=Part.Type.TOOL)
            lost = next(p for p in calls if (p.state or {}).get("input", {}).get("path") == "d.txt")
            print("the call running with alpha:", lost.state)
            assert lost.state["status"] == "error" and lost.state["metadata"]["interrupted"]
            expected = {"a.txt": b"A1", "sub/b.txt": b"B1", "c.txt": b"C1"}
            assert hs.files("beta", sid) == expected  # step 3 after the interrupted step 2
            assert stack.stored(sid) == expected
            assert stack.listed(sid) >= set(expected)
            assert live() == {"beta"}
            # The idle one was moved by beta's sweep, no run asking (sessions_app/rehome.py):
            # its next run finds its files on beta.
            wait_until(
                lambda: Session.objects.get(id=idle).host == "beta", 3 * LEASE, "the sweep's move"
            )
            assert hs.files("beta", idle) == {}  # lazily: the files come with the next claim
            assert stack.run(idle, "append i.txt I2").host == "beta"
            assert hs.files("beta", idle) == {"i.txt": b"I1I2\n"}
        except Exception:
            print(procs.logs())
            raise
        finally:
            hs.close()
