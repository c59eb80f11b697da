"""Issue 45, step 5: forks across hosts (runs_app/services/fork_job.py). Two real worker
processes, A and B, each with its own ``WORKER_HOST`` and ``WORKSPACE_ROOT``, replicate to the
central store (the https git server of tests/support/git_server.py, a bare ``central``
repository as tests/test_replication.py's ``central`` makes it); this test process is the web,
with no worktree (``HOLDS_WORKTREES`` False). A fork whose source lives on A is made on B from
the central store, byte for byte, and runs there; a fork on A itself is made of hard links to
the source's files; another user's fork of a share crosses hosts the same way; a job that no
longer holds its fork writes nothing; a fork point whose tree the store lacks fails the fork
as a failed clone is failed, never a 500."""

from __future__ import annotations

import os
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from runs_app.models import Run
from runs_app.services import fork_job
from sessions_app import hosts
from sessions_app.models import Host, Message, Part, Session
from workspace import replication

from .conftest import new_session, wait_until
from .e2e.stack import Processes, base_env, services_database_url
from .support.git_server import GitServer, git_server
from .test_replication import _remote

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]
LEASE = 6  # a beat every 3 s


@dataclass
class Cluster:
    store: GitServer
    procs: Processes
    roots: dict[str, Path]
    queue: str
    logs: Path


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Cluster]:  # noqa: ANN001
    """The central store and the worker hosts A and B, started once for the module."""
    from django.conf import settings

    tmp = tmp_path_factory.mktemp("fork-hosts")
    with django_db_blocker.unblock():
        database = services_database_url()
    with git_server(tmp) as store:
        store.make_repo("central", {"README": "the central store\n"})
        queue = f"agentplat-forks-{uuid.uuid4().hex[:12]}"
        env = base_env(
            DATABASE_URL=database,
            REDIS_URL=settings.REDIS_URL,
            RUN_LEASE_SECONDS=str(LEASE),
            CELERY_QUEUE=queue,
            SNAPSHOT_REMOTE=store.url("central"),
            SNAPSHOT_REMOTE_TOKEN=store.token,
            GIT_SSL_CAINFO=str(store.ca_file),
        )
        procs = Processes()
        roots = {name: tmp / name for name in ("A", "B")}
        try:
            for name, root in roots.items():
                procs.worker({**env, "WORKER_HOST": name, "WORKSPACE_ROOT": str(root)}, tmp)
            yield Cluster(store, procs, roots, queue, tmp)
        finally:
            procs.stop()


@pytest.fixture
def web(cluster: Cluster, settings, tmp_path) -> Path:  # noqa: ANN001
    """This process as the web of the deployment: no worktree, runs and jobs to the hosts'
    queues (every host is live: its own queue), the central store set; its (unused)
    ``WORKSPACE_ROOT``, which nothing may make."""
    settings.HOLDS_WORKTREES = False
    settings.WORKSPACE_ROOT = tmp_path / "web"
    settings.MIRROR_ROOT = tmp_path / "mirror"  # the web's own, not the project's var/
    settings.RUN_EXECUTOR = "celery"
    settings.RUN_LEASE_SECONDS = LEASE
    settings.CELERY_TASK_DEFAULT_QUEUE = cluster.queue
    settings.SNAPSHOT_REMOTE = cluster.store.url("central")
    settings.SNAPSHOT_REMOTE_TOKEN = cluster.store.token
    settings.GIT_SSL_CAINFO = str(cluster.store.ca_file)
    live = lambda: set(hosts.live_hosts().values_list("name", flat=True)) >= {"A", "B"}  # noqa: E731
    wait_until(live, 60, "A and B to beat", every=0.2)
    yield settings.WORKSPACE_ROOT
    assert not settings.WORKSPACE_ROOT.exists(), "the web made a worktree"


def _ended(run_id: str) -> Run | None:
    run = Run.objects.get(id=run_id)
    return run if run.status in Run.TERMINAL else None


def _turn(api, sid: str, script: str, cluster: Cluster) -> Run:  # noqa: ANN001
    answer = api.post(
        f"/api/sessions/{sid}/runs/",
        {"messages": [{"role": "user", "content": script}]},
        format="json",
    )
    assert answer.status_code == 202, answer.json()
    run = wait_until(lambda: _ended(answer.json()["id"]), 90, "the run to end", every=0.1)
    assert run.status == "completed", _logs(cluster)
    return run


def _logs(cluster: Cluster) -> str:
    return cluster.procs.logs()


def _files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def _source_on_a(api, cluster: Cluster) -> tuple[str, str]:  # noqa: ANN001
    """A session homed on A with two replicated steps: its id, and the last message of its
    first turn (the fork point whose files are ``FIRST``)."""
    sid = new_session(api)
    Session.objects.filter(id=sid).update(host="A")
    assert _turn(api, sid, "write a.txt A1\nwrite sub/b.bin B1", cluster).host == "A"
    assert _turn(api, sid, "write a.txt A2\nwrite c.txt C1", cluster).host == "A"
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    assert Session.objects.get(id=sid).replicated_snapshot
    return sid, second.parent_id


FIRST = {"a.txt": b"A1", "sub/b.bin": b"B1"}


def _drain(name: str) -> None:
    Host.objects.filter(name=name).update(draining=True)


def _made(fork_id: str, cluster: Cluster) -> Session:
    """The fork once its job let it go (idle)."""
    wait_until(
        lambda: Session.objects.get(id=fork_id).status == Session.Status.IDLE,
        60,
        "the fork's files",
        every=0.1,
    )
    fork = Session.objects.get(id=fork_id)
    assert not fork.source.get("error"), (fork.source, _logs(cluster))
    return fork


def test_a_fork_of_a_session_on_a_is_made_on_b_from_the_central_store(api, cluster, web):
    sid, point = _source_on_a(api, cluster)
    _drain("A")
    answer = api.post(f"/api/sessions/{sid}/fork/", {"message_id": point}, format="json")
    assert answer.status_code == 201, answer.json()
    assert answer.json()["status"] == "preparing"
    fork = _made(answer.json()["id"], cluster)
    assert fork.host == "B"
    worktree = cluster.roots["B"] / fork.id
    assert _files(worktree) == FIRST  # byte for byte the fork point's files
    assert not (cluster.roots["A"] / fork.id).exists()
    # Its first snapshot is in the store (a later re-home of the fork finds it).
    assert cluster.store.read_tree("central", replication.ref(fork.id)) == FIRST
    assert fork.replicated_snapshot
    run = _turn(api, fork.id, "write d.txt D1", cluster)
    assert run.host == "B"
    assert _files(worktree) == {**FIRST, "d.txt": b"D1"}


def test_a_fork_on_the_sources_host_shares_its_files_by_hard_link(api, cluster, web):
    sid, _ = _source_on_a(api, cluster)
    answer = api.post(f"/api/sessions/{sid}/fork/", {}, format="json")
    assert answer.status_code == 201, answer.json()
    fork = _made(answer.json()["id"], cluster)
    assert fork.host == "A"
    mine, theirs = cluster.roots["A"] / fork.id, cluster.roots["A"] / sid
    assert _files(mine) == _files(theirs) == {**FIRST, "a.txt": b"A2", "c.txt": b"C1"}
    assert os.stat(mine / "c.txt").st_ino == os.stat(theirs / "c.txt").st_ino
    assert not (cluster.roots["B"] / fork.id).exists()


def test_another_users_fork_of_a_share_crosses_hosts(api, outsider_api, cluster, web):
    sid, _ = _source_on_a(api, cluster)
    token = api.post(f"/api/sessions/{sid}/share/").json()["token"]
    _drain("A")
    answer = outsider_api.post(f"/api/shared/{token}/fork/", {}, format="json")
    assert answer.status_code == 201, answer.json()
    fork = _made(answer.json()["id"], cluster)
    assert fork.host == "B" and fork.source == {"type": "share"}
    assert _files(cluster.roots["B"] / fork.id) == {**FIRST, "a.txt": b"A2", "c.txt": b"C1"}


def test_a_job_that_lost_its_fork_writes_nothing(api, cluster, web, settings, monkeypatch):
    """The fork is placed on a host with no worker (its job waits in that queue); its job run
    here as that host's, taken over between making the files and moving them in."""
    sid, point = _source_on_a(api, cluster)
    _drain("A")
    _drain("B")
    Host.objects.create(name="ghost")  # live now, and no worker consumes its queue
    answer = api.post(f"/api/sessions/{sid}/fork/", {"message_id": point}, format="json")
    fork = Session.objects.get(id=answer.json()["id"])
    assert fork.host == "ghost" and fork.status == Session.Status.PREPARING
    job = fork.busy_run_id
    made = fork_job.fill_from

    def taken_over(*args, **kwargs) -> None:  # noqa: ANN002, ANN003
        made(*args, **kwargs)
        Session.objects.filter(id=fork.id).update(busy_run_id="run_other")

    monkeypatch.setattr(fork_job, "fill_from", taken_over)
    ghost = cluster.logs / "ghost"
    settings.WORKSPACE_ROOT, settings.WORKER_HOST, settings.HOLDS_WORKTREES = ghost, "ghost", True
    tree = Part.objects.filter(message_id=point, type=Part.Type.STEP_FINISH).get().data["snapshot"]
    fork_job.prepare(fork.id, job, sid, tree)
    assert (ghost / ".snapshots" / "objects").is_dir()  # it did fetch and make the files
    assert not (ghost / fork.id).exists() and not (ghost / ".snapshots" / f"{fork.id}.git").exists()
    assert not list((ghost / ".staging").iterdir())
    after = Session.objects.get(id=fork.id)
    assert after.busy_run_id == "run_other" and after.status == Session.Status.PREPARING
    assert not after.replicated_commit and not after.source.get("error")
    assert _remote(cluster.store, fork.id) == ""  # nothing pushed for it
    settings.WORKSPACE_ROOT = web  # as the web's, for the fixture's check


def test_a_fork_point_whose_tree_the_store_lacks_fails_the_fork_cleanly(api, cluster, web):
    sid, point = _source_on_a(api, cluster)
    finish = Part.objects.filter(message_id=point, type=Part.Type.STEP_FINISH).get()
    finish.data = {**finish.data, "snapshot": "0" * 39 + "1"}  # a tree no store holds
    finish.save(update_fields=["data"])
    _drain("A")
    answer = api.post(f"/api/sessions/{sid}/fork/", {"message_id": point}, format="json")
    assert answer.status_code == 201, answer.json()
    fork_id = answer.json()["id"]
    wait_until(lambda: Session.objects.get(id=fork_id).source.get("error"), 60, "the fork to fail")
    shown = api.get(f"/api/sessions/{fork_id}/")
    assert shown.status_code == 200
    assert shown.json()["status"] == "idle"
    assert "central store has no snapshot" in shown.json()["source"]["error"]
    assert _files(cluster.roots["B"] / fork_id) == {}


def test_alternatives_across_hosts_run_once_their_files_are_made(api, cluster, web):
    """Best-of-N makes forks too: on B, each held for its files, its run started by the job
    that made them (a run cannot start on a fork still preparing)."""
    sid, _ = _source_on_a(api, cluster)
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    _drain("A")
    answer = api.post(
        f"/api/sessions/{sid}/alternatives/", {"message_id": second.id, "n": 2}, format="json"
    )
    assert answer.status_code == 201, answer.json()
    for alt in answer.json()["sessions"]:
        run = wait_until(
            # Its own run, not the copies of the source's (their origin named).
            lambda alt=alt: Run.objects.filter(
                session_id=alt, status="completed", forked_from_session__isnull=True
            ).first(),
            90,
            "the alternative's run",
            every=0.1,
        )
        assert run.host == "B" and Session.objects.get(id=alt).host == "B"
        assert _files(cluster.roots["B"] / alt) == {**FIRST, "a.txt": b"A2", "c.txt": b"C1"}
