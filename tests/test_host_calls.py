"""Issue 45, steps 1 and 3 (sessions_app/host_calls.py, sessions_app/repositories/upload_store.py):
a web process that holds no worktree (this test process, ``HOLDS_WORKTREES`` False, its
``WORKSPACE_ROOT`` never made) sends the history moves that touch files and an upload's files
to the session's home host. Two real Celery workers (hosts alpha and beta, each its own
``WORKSPACE_ROOT``) and the central store on the https git server; the moves change the files
on the home host's worktree and nowhere else, an error raised there is the same JSON, a dead
home is moved to a live host that materialises the worktree, a host that does not answer is
a 503 and the call, picked up later, does nothing."""

from __future__ import annotations

import base64
import io
import json
import subprocess
import threading
import time
import uuid
import zipfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pytest
import redis
from django.conf import settings as django_settings
from django.core.files.uploadedfile import SimpleUploadedFile
from django.db import OperationalError, connections, transaction
from django.test import Client
from django.utils import timezone

from runs_app.models import Run
from sessions_app import host_calls
from sessions_app.models import HistoryEvent, Host, Message, Part, Session
from tests.conftest import new_session, wait_until
from tests.e2e.stack import Processes, base_env, services_database_url
from tests.support.git_server import GitServer, git_server
from workspace import worktree_files

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.timeout(300)]
LEASE = 6  # a beat every 3 s
HOSTS = ("alpha", "beta")


class Cluster:
    def __init__(self, store: GitServer, roots: dict[str, Path], queue: str, procs: Processes):
        self.store, self.roots, self.queue, self.procs = store, roots, queue, procs

    def files(self, host: str, sid: str) -> dict[str, str]:
        root = self.roots[host] / sid
        return {
            p.relative_to(root).as_posix(): p.read_text()
            for p in root.rglob("*")
            if p.is_file() and ".git" not in p.relative_to(root).parts
        }


@pytest.fixture(scope="module")
def cluster(django_db_setup, django_db_blocker, tmp_path_factory) -> Iterator[Cluster]:  # noqa: ANN001
    """The central store and one worker per host, started once for the module (slow)."""
    tmp = tmp_path_factory.mktemp("host-calls")
    with django_db_blocker.unblock(), git_server(tmp) as store:
        store.make_repo("central", {"README": "the central store\n"})
        env = base_env(
            DATABASE_URL=services_database_url(),
            REDIS_URL=django_settings.REDIS_URL,
            RUN_LEASE_SECONDS=str(LEASE),
            SNAPSHOT_REMOTE=store.url("central"),
            SNAPSHOT_REMOTE_TOKEN=store.token,
            GIT_SSL_CAINFO=str(store.ca_file),
            GIT_ALLOWED_HOSTS="127.0.0.1",  # the clone of the push test, on its host
        )
        procs = Processes()
        roots = {host: tmp / host for host in HOSTS}
        try:
            for host in HOSTS:
                procs.worker({**env, "WORKER_HOST": host, "WORKSPACE_ROOT": str(roots[host])}, tmp)
            yield Cluster(store, roots, env["CELERY_QUEUE"], procs)
        finally:
            procs.stop()


@pytest.fixture
def web(cluster: Cluster, settings, tmp_path) -> Path:  # noqa: ANN001
    """This process as the web of the deployment: no worktree, its runs sent to the hosts."""
    settings.HOLDS_WORKTREES = False
    settings.WORKSPACE_ROOT = tmp_path / "web-root"
    settings.MIRROR_ROOT = tmp_path / "mirror"  # the web's own, not the project's var/
    settings.RUN_EXECUTOR = "celery"
    settings.CELERY_TASK_DEFAULT_QUEUE = cluster.queue
    settings.RUN_LEASE_SECONDS = LEASE
    settings.SNAPSHOT_REMOTE = cluster.store.url("central")
    settings.SNAPSHOT_REMOTE_TOKEN = cluster.store.token
    settings.GIT_SSL_CAINFO = str(cluster.store.ca_file)
    settings.HOST_CALL_TIMEOUT = 30
    try:
        wait_until(lambda: _live() >= set(HOSTS), 60, "both hosts to beat", every=0.2)
    except BaseException:
        print(cluster.procs.logs())
        raise
    return settings.WORKSPACE_ROOT


def _live() -> set[str]:
    since = timezone.now() - timedelta(seconds=LEASE)
    return set(Host.objects.filter(last_heartbeat__gte=since).values_list("name", flat=True))


def _turn(api, sid: str, script: str) -> None:  # noqa: ANN001
    body = {"messages": [{"role": "user", "content": script}]}
    run_id = api.post(f"/api/sessions/{sid}/runs/", body, format="json").json()["id"]
    finished = wait_until(
        lambda: (
            Run.objects.filter(id=run_id, status__in=["completed", "failed", "cancelled"])
            .values_list("status", flat=True)
            .first()
        ),
        60,
        "the run to end on its host",
        every=0.1,
    )
    assert finished == "completed"


def _users(sid: str) -> list[str]:
    rows = Message.objects.filter(session_id=sid, role=Message.Role.USER).order_by("id")
    return list(rows.values_list("id", flat=True))


def _zip(members: dict[str, str]) -> SimpleUploadedFile:
    data = io.BytesIO()
    with zipfile.ZipFile(data, "w") as archive:
        for name, text in members.items():
            archive.writestr(name, text)
    return SimpleUploadedFile("proj.zip", data.getvalue())


def test_history_moves_change_the_files_on_the_home_host_only(cluster, web, api, outsider_api):
    sid = new_session(api)
    home = Session.objects.get(id=sid).host
    other = next(h for h in HOSTS if h != home)
    _turn(api, sid, "write f.txt one")
    _turn(api, sid, "write f.txt two")
    assert cluster.files(home, sid) == {"f.txt": "two"}
    second = _users(sid)[1]
    url = f"/api/sessions/{sid}"

    assert (
        outsider_api.post(f"{url}/revert/", {"message_id": second}, format="json").status_code
        == 404
    )
    assert outsider_api.post(f"{url}/unrevert/").status_code == 404
    assert cluster.files(home, sid) == {"f.txt": "two"}

    # Busy with a run on its host: the host's 409 is the JSON a direct call answers.
    body = {"messages": [{"role": "user", "content": "wait 5"}]}
    waiting = api.post(f"{url}/runs/", body, format="json").json()["id"]
    wait_until(
        lambda: Run.objects.filter(id=waiting, status="running").exists(), 30, "the wait", 0.1
    )
    busy = api.post(f"{url}/revert/", {"message_id": second}, format="json")
    assert busy.status_code == 409
    assert busy.json() == {
        "error": {"type": "SessionBusyError", "message": "A run is in progress on this session."}
    }
    # (Not cancelled: a cancel from the web still reads the snapshot store, runs_app's part.)
    wait_until(
        lambda: Run.objects.filter(id=waiting, status="completed").exists(), 30, "its end", 0.1
    )

    answer = api.post(f"{url}/revert/", {"message_id": second}, format="json")
    assert answer.status_code == 200, answer.json()
    assert answer.json()["revert"]["message_id"] == second
    assert cluster.files(home, sid) == {"f.txt": "one"}
    # An error raised on the host is the JSON a direct call answers.
    refused = api.post(f"{url}/rollback/", {"num_turns": 1}, format="json")
    assert refused.status_code == 409
    assert refused.json() == {
        "error": {
            "type": "ConflictError",
            "message": "A revert is pending: unrevert or confirm it before a rollback.",
        }
    }
    answer = api.post(f"{url}/unrevert/")
    assert answer.status_code == 200 and answer.json()["revert"] is None
    assert cluster.files(home, sid) == {"f.txt": "two"}

    assert api.post(f"{url}/revert/", {"message_id": second}, format="json").status_code == 200
    answer = api.post(f"{url}/cleanup/")
    assert answer.status_code == 200 and answer.json()["revert"] is None
    assert cluster.files(home, sid) == {"f.txt": "one"}
    assert len(_users(sid)) == 1  # the second turn is gone

    _turn(api, sid, "write g.txt three")
    answer = api.post(f"{url}/rollback/", {"num_turns": 1}, format="json")
    assert answer.status_code == 200
    first_leaf = Session.objects.get(id=sid).head_id
    assert HistoryEvent.objects.filter(session_id=sid, kind="rollback").count() == 1
    # The rolled-back branch shown again: its files are the worktree's (nothing to move).
    answer = api.post(f"{url}/head/", {"message_id": _users(sid)[-1]}, format="json")
    assert answer.status_code == 200 and Session.objects.get(id=sid).head_id != first_leaf
    assert cluster.files(home, sid) == {"f.txt": "one", "g.txt": "three"}
    assert HistoryEvent.objects.filter(session_id=sid, kind="head").count() == 1

    assert not (cluster.roots[other] / sid).exists()
    assert not web.exists()  # the web never made a worktree, nor its root


def test_an_upload_s_files_appear_on_its_host_only(cluster, web, api):
    answer = api.post("/api/sessions/upload/", {"file": _zip({"src/a.py": "A\n", "b.md": "B"})})
    assert answer.status_code == 201, answer.json()
    sid = answer.json()["id"]
    session = Session.objects.get(id=sid)
    assert cluster.files(session.host, sid) == {"src/a.py": "A\n", "b.md": "B"}
    other = next(h for h in HOSTS if h != session.host)
    assert not (cluster.roots[other] / sid).exists()
    assert not web.exists()
    # Recorded as a local upload records it: its text, and a patch part naming every file.
    parts = Part.objects.filter(message_id=session.head_id).order_by("order")
    assert parts[0].text == "Uploaded proj.zip: 2 files, 3 bytes."
    assert parts[3].data["files"] == ["b.md", "src/a.py"]
    assert session.replicated_snapshot == parts[1].data["snapshot"]
    assert HistoryEvent.objects.filter(session_id=sid, kind="upload").count() == 1


def test_a_dead_home_moves_to_a_live_host_that_materialises_the_worktree(cluster, web, api):
    answer = api.post("/api/sessions/upload/", {"file": _zip({"f.txt": "kept\n"})})
    sid = answer.json()["id"]
    first = Session.objects.get(id=sid).host
    target = next(h for h in HOSTS if h != first)
    gone = timezone.now() - timedelta(seconds=10 * LEASE)
    Host.objects.create(name="gone", last_heartbeat=gone, started_at=gone)
    Session.objects.filter(id=sid).update(host="gone")
    Host.objects.filter(name=first).update(draining=True)  # the move goes to the other host
    message = Session.objects.get(id=sid).head_id

    reverted = api.post(f"/api/sessions/{sid}/revert/", {"message_id": message}, format="json")
    assert reverted.status_code == 200, reverted.json()
    assert Session.objects.get(id=sid).host == target
    assert (cluster.roots[target] / sid).is_dir() and cluster.files(target, sid) == {}
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert cluster.files(target, sid) == {"f.txt": "kept\n"}  # from the central store
    assert cluster.files(first, sid) == {"f.txt": "kept\n"}  # the old copy, untouched
    assert not web.exists()


def test_a_host_that_does_not_answer_is_a_503_and_nothing_changes(cluster, web, api, settings):
    settings.HOST_CALL_TIMEOUT = 1
    Host.objects.create(name="ghost")  # beats now: live, but no worker reads its queue
    sid = new_session(api)
    Session.objects.filter(id=sid).update(host="ghost")
    broker = redis.Redis.from_url(settings.REDIS_URL)
    queue = f"{cluster.queue}.host.ghost"
    broker.delete(queue)

    answer = api.post(f"/api/sessions/{sid}/revert/", {"message_id": "m-none"}, format="json")
    assert answer.status_code == 503
    assert answer.json()["error"]["type"] == "ServiceUnavailable"
    assert "did not answer in time; nothing was changed" in answer.json()["error"]["message"]
    assert answer["Retry-After"] == "1"
    # The message a ghost worker would read later is abandoned: running it does nothing.
    message = json.loads(broker.rpop(queue))
    payload = json.loads(base64.b64decode(message["body"]))[0][0]
    assert payload["name"] == "revert" and payload["session"] == sid
    session = Session.objects.get(id=sid)
    replies = f"agentplat:host-call:{payload['id']}:reply"
    host_calls.answer(payload)
    assert broker.llen(replies) == 0
    assert Session.objects.get(id=sid).updated_at == session.updated_at
    assert not HistoryEvent.objects.filter(session_id=sid).exists()
    assert not web.exists()


def test_with_no_live_host_to_go_to_a_move_is_a_503(cluster, web, api):
    sid = new_session(api)
    Session.objects.filter(id=sid).update(host="")
    Host.objects.update(draining=True)  # none takes a session
    answer = api.post(f"/api/sessions/{sid}/unrevert/")
    assert answer.status_code == 503
    assert answer.json()["error"] == {
        "type": "ServiceUnavailable",
        "message": "No worker host is live to hold this session's files; try again.",
    }
    assert Session.objects.get(id=sid).host == ""
    assert not web.exists()


def _files_of_step_left_open(cluster: Cluster, sid: str) -> Run:
    """A run left running by an execution that is gone (its lease lapsed) in the middle of a
    step that wrote ``late.txt`` on the home host: the state a cancel must close there."""
    session = Session.objects.get(id=sid)
    run = Run.objects.create(session=session, status=Run.Status.RUNNING, lease_epoch=1)
    step = Message.objects.create(session=session, run_id=run.id, role="assistant")
    Part.objects.create(
        message=step,
        session=session,
        order=0,
        type="step-start",
        data={"snapshot": session.replicated_snapshot, "step": 0},
    )
    worktree_files.replace_file(  # the write tool's own writer, on the home's disk
        cluster.roots[session.host] / sid, ("late.txt",), b"written late\n", append=False
    )
    Session.objects.filter(id=sid).update(
        busy_run_id=run.id, lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return run


def test_a_cancel_closes_the_open_step_on_the_home_host(cluster, web, api):
    sid = new_session(api)
    home = Session.objects.get(id=sid).host
    _turn(api, sid, "write f.txt one")
    # A run whose execution is alive: the cancel only asks it to stop (no file is read).
    body = {"messages": [{"role": "user", "content": "wait 5"}]}
    live = api.post(f"/api/sessions/{sid}/runs/", body, format="json").json()["id"]
    wait_until(lambda: Run.objects.filter(id=live, status="running").exists(), 30, "it", 0.1)
    assert api.post(f"/api/runs/{live}/cancel/").status_code == 202
    assert not web.exists()
    ended = lambda: Run.objects.filter(id=live, status="cancelled").exists()  # noqa: E731
    wait_until(ended, 30, "the loop to stop", 0.1)
    assert not web.exists()

    # Its execution gone: it ends now, on the home host, its open step closed on the files
    # there (the write the step made is recorded), as a cancel on one host closes it.
    run = _files_of_step_left_open(cluster, sid)
    answer = api.post(f"/api/runs/{run.id}/cancel/")
    assert answer.status_code == 202, answer.json()
    assert answer.json()["status"] == "cancelled"
    finish = Part.objects.get(message__run_id=run.id, type="step-finish")
    assert finish.data["interrupted"]
    patch = Part.objects.get(message__run_id=run.id, type="patch")
    assert patch.data["files"] == ["late.txt"]
    assert Session.objects.get(id=sid).busy_run_id is None
    assert cluster.files(home, sid) == {"f.txt": "one", "late.txt": "written late\n"}
    assert not web.exists()


def test_adopt_takes_the_fork_s_files_on_the_home_host(cluster, web, api):
    sid = new_session(api)
    home = Session.objects.get(id=sid).host
    other = next(h for h in HOSTS if h != home)
    _turn(api, sid, "write f.txt one")
    point = Session.objects.get(id=sid).head_id
    Host.objects.filter(name=home).update(draining=True)  # the fork is made on the other host
    made = api.post(f"/api/sessions/{sid}/fork/", {"message_id": point}, format="json")
    assert made.status_code == 201, made.json()
    fork = made.json()["id"]
    wait_until(lambda: Session.objects.filter(id=fork, status="idle").exists(), 60, "the fork", 0.1)
    Host.objects.filter(name=home).update(draining=False)
    assert Session.objects.get(id=fork).host == other
    _turn(api, fork, "write g.txt two")

    answer = api.post(f"/api/sessions/{sid}/adopt/", {"session_id": fork}, format="json")
    assert answer.status_code == 200, answer.json()
    assert cluster.files(home, sid) == {"f.txt": "one", "g.txt": "two"}
    assert HistoryEvent.objects.filter(session_id=sid, kind="adopt").count() == 1
    assert not (cluster.roots[other] / sid).exists()
    assert not web.exists()


def _store_ref(cluster: Cluster, sid: str) -> str:
    found = subprocess.run(
        [
            "git",
            "--git-dir",
            str(cluster.store.bare("central")),
            "for-each-ref",
            f"refs/sessions/{sid}/",
        ],
        capture_output=True,
        text=True,
        check=True,
    )
    return found.stdout.strip()


def test_deleting_a_session_removes_its_files_and_ref_on_its_host(cluster, web, api):
    sid = new_session(api)
    home = Session.objects.get(id=sid).host
    _turn(api, sid, "write f.txt one")
    worktree, git_dir = cluster.roots[home] / sid, cluster.roots[home] / ".snapshots" / f"{sid}.git"
    assert worktree.is_dir() and git_dir.is_dir() and _store_ref(cluster, sid)
    outside = cluster.roots[home].parent / "outside.txt"
    outside.write_text("not the session's\n")
    (worktree / "link").symlink_to(outside)  # a link the agent made: never followed

    assert api.delete(f"/api/sessions/{sid}/").status_code == 204
    gone = lambda: not worktree.exists() and not git_dir.exists()  # noqa: E731
    wait_until(gone, 30, "the home host to remove the files", 0.1)
    wait_until(lambda: not _store_ref(cluster, sid), 30, "the store's ref to go", 0.1)
    assert outside.read_text() == "not the session's\n"
    assert not web.exists()


def test_a_host_call_materialises_under_the_session_row_lock(api, monkeypatch):
    """A run beginning on the host at the same moment waits for the row (``begin`` takes it)
    until the files are there; a session a run holds is left to that run's own claim."""
    sid = new_session(api)
    seen: list[str] = []

    def on_claim(session: Session) -> None:
        def other() -> None:
            try:
                with transaction.atomic():
                    Session.objects.select_for_update(nowait=True).get(id=sid)
                seen.append("free")
            except OperationalError:
                seen.append("locked")
            finally:
                connections.close_all()

        thread = threading.Thread(target=other)
        thread.start()
        thread.join()

    def call() -> None:  # an upload's materialisation, as the host receives it
        payload = {"id": uuid.uuid4().hex, "name": "materialize", "session": sid, "user": None}
        host_calls.answer({**payload, "kwargs": {}, "deadline": time.time() + 60})

    monkeypatch.setattr(host_calls.rehome, "on_claim", on_claim)
    call()
    assert seen == ["locked"]
    Session.objects.filter(id=sid).update(
        busy_run_id="r-holder", lease_expires_at=timezone.now() + timedelta(seconds=60)
    )
    call()
    assert seen == ["locked"]  # busy: not materialised by the call


def test_a_service_s_json_answer_comes_back_with_the_reply(api, monkeypatch, settings):
    """``call_json``: what a service such as an apply answers (a JSON object) is the reply's
    ``result`` from the home host, and the service's own answer here."""
    sid = new_session(api)

    def echo(*, session: Session, user=None, x: int) -> dict:  # noqa: ANN001
        return {"session": session.id, "x": x}

    monkeypatch.setitem(host_calls.CALLS, "echo", (echo, frozenset({"x"})))
    assert host_calls.call_json("echo", session=Session.objects.get(id=sid), x=1) == {
        "session": sid,
        "x": 1,
    }
    call_id = uuid.uuid4().hex
    payload = {"id": call_id, "name": "echo", "session": sid, "user": None, "kwargs": {"x": 2}}
    host_calls.answer({**payload, "deadline": time.time() + 60})
    broker = redis.Redis.from_url(settings.REDIS_URL)
    reply = json.loads(broker.lpop(f"agentplat:host-call:{call_id}:reply"))
    assert reply == {"ok": True, "result": {"session": sid, "x": 2}}


def test_a_host_s_own_failure_is_a_json_503_not_a_500(api, monkeypatch):
    """A service that raises something no error of the API names, on the host: its reply
    says so and the web answers a JSON 503 (it was a RuntimeError, a 500 page)."""
    sid = new_session(api)

    def broken(*, session: Session, user=None) -> Session:  # noqa: ANN001, ARG001
        raise KeyError("a bug on the host")

    monkeypatch.setitem(host_calls.CALLS, "broken", (broken, frozenset()))
    call_id = uuid.uuid4().hex
    payload = {"id": call_id, "name": "broken", "session": sid, "user": None, "kwargs": {}}
    reply = host_calls._run({**payload, "deadline": time.time() + 60})
    assert reply == {"error": {"kind": "server", "message": "KeyError"}}
    with pytest.raises(host_calls.HostUnavailable) as raised:
        host_calls._raise_reply(reply)
    assert raised.value.status_code == 503 and "KeyError" in raised.value.message


def test_apply_of_a_fork_s_call_on_another_host_and_the_admin_s_moves(cluster, web, api, owner):
    """An apply (its source a fork on the other host: its trees fetched from the central
    store) and the admin's revert preview, revert and unrevert are done on the home host."""
    sid = new_session(api)
    home = Session.objects.get(id=sid).host
    other = next(h for h in HOSTS if h != home)
    _turn(api, sid, "write f.txt one")
    Host.objects.filter(name=home).update(draining=True)  # the fork is made on the other host
    fork = api.post(f"/api/sessions/{sid}/fork/", {}, format="json").json()["id"]
    wait_until(lambda: Session.objects.filter(id=fork, status="idle").exists(), 60, "fork", 0.1)
    Host.objects.filter(name=home).update(draining=False)
    assert Session.objects.get(id=fork).host == other
    _turn(api, fork, "write g.txt two\nwrite h.txt three")
    part = next(
        p
        for p in Part.objects.filter(session_id=fork, type="tool").order_by("id")
        if (p.state or {}).get("input", {}).get("path") == "g.txt"
    )

    applied = api.post(f"/api/sessions/{sid}/apply/", {"part_id": part.id}, format="json")
    assert applied.status_code == 200, applied.json()
    assert applied.json()["paths"] == ["g.txt"]
    assert cluster.files(home, sid) == {"f.txt": "one", "g.txt": "two"}

    owner.is_staff = owner.is_superuser = True
    owner.save()
    admin = Client()
    admin.force_login(owner)
    first = Message.objects.filter(session_id=sid, role="user").order_by("id").first()
    base = {"action": "revert_action", "_selected_action": [sid], "boundary": first.id}
    preview = admin.post("/admin/sessions_app/session/", {**base, "preview": "1"})
    assert 'id="revert-plan"' in preview.content.decode() and "g.txt" in preview.content.decode()
    admin.post("/admin/sessions_app/session/", {**base, "apply": "1"})
    assert cluster.files(home, sid) == {}
    admin.post(
        "/admin/sessions_app/session/", {"action": "unrevert_action", "_selected_action": [sid]}
    )
    assert cluster.files(home, sid) == {"f.txt": "one", "g.txt": "two"}
    assert not web.exists()


def test_a_clone_s_work_is_pushed_from_its_home_host(cluster, web, api, settings):
    """The push builds its commits on the cloned commit, which only the home host's store
    holds: a web that holds no worktree sends it there (host call "push")."""
    settings.GIT_ALLOWED_HOSTS = ["127.0.0.1"]
    url = cluster.store.make_repo("origin", {"README.md": "hello\n"})
    made = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    assert made.status_code == 201, made.json()
    sid = made.json()["id"]
    wait_until(lambda: Session.objects.get(id=sid).status == "idle", 60, "the clone", every=0.1)
    home = Session.objects.get(id=sid).host
    _turn(api, sid, "Add a file\nwrite new.txt pushed")
    credential = api.post(
        "/api/credentials/",
        {"name": "push", "host": "127.0.0.1", "port": int(cluster.store.base_url.rsplit(":", 1)[1]),
         "kind": "token", "secret": cluster.store.token},
        format="json",
    ).json()  # fmt: skip
    pushed = api.post(
        f"/api/sessions/{sid}/push/",
        {"branch": "agent/work", "credential_id": credential["id"]},
        format="json",
    )
    assert pushed.status_code == 200, pushed.json()
    assert cluster.store.head("origin", "agent/work") == pushed.json()["commit"]
    tree = cluster.store.read_tree("origin", "agent/work")
    assert tree == {"README.md": b"hello\n", "new.txt": b"pushed"}
    assert cluster.files(home, sid) == {"README.md": "hello\n", "new.txt": "pushed"}
    assert not web.exists()
