"""Replicated snapshots (issue 45, step 2; workspace/replication.py, sessions_app/replicas.py):
each step's snapshot, a history move's and a clone's first reach the central bare repository
(the tests' https git server) as ``refs/sessions/<id>/head``, read back here with plain git;
a push that fails costs the run nothing and the next step catches up; the ref never moves
for a stale pusher; with ``SNAPSHOT_REMOTE`` empty nothing is pushed."""

from __future__ import annotations

import subprocess

import pytest

from sessions_app import replicas
from sessions_app.models import Message, Part, Session
from workspace import replication, snapshots

from .conftest import run_turn, wait_until
from .support.git_server import GIT, GitServer, git_server_fixture, reachable_server_fixture  # noqa: F401
from .support.ssh_server import available as ssh_available
from .support.ssh_server import ssh_git_server_fixture  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def central(server: GitServer, settings) -> GitServer:  # noqa: ANN001
    """The central store: a bare repository on the https server, the deployment set to it."""
    server.make_repo("central", {"README": "the central store\n"})
    settings.SNAPSHOT_REMOTE = server.url("central")
    settings.SNAPSHOT_REMOTE_TOKEN = server.token
    return server


def _remote(server: GitServer, sid: str, what: str = "^{tree}") -> str:
    bare = str(server.bare("central"))
    out = subprocess.run(
        [GIT, "-C", bare, "rev-parse", "-q", "--verify", f"{replication.ref(sid)}{what}"],
        capture_output=True,
        text=True,
        env={"PATH": "/usr/bin:/bin", "GIT_CONFIG_NOSYSTEM": "1"},
    )
    return out.stdout.strip()


def _last_snapshot(sid: str) -> str:
    finish = Part.objects.filter(session_id=sid, type=Part.Type.STEP_FINISH).order_by("-id")[0]
    return finish.data["snapshot"]


def _worktree_files(sid: str) -> dict[str, bytes]:
    root = Session.objects.get(id=sid).worktree
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in root.rglob("*")
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def test_each_step_s_snapshot_is_the_sessions_ref_in_the_central_store(api, sid, central):
    run_turn(api, sid, "write a.txt A1")
    first = _remote(central, sid)
    run_turn(api, sid, "write b.txt B1")
    session = Session.objects.get(id=sid)
    assert _remote(central, sid) == _last_snapshot(sid) == session.replicated_snapshot != first
    assert _remote(central, sid, "") == session.replicated_commit
    assert session.replicated_at is not None
    assert central.read_tree("central", replication.ref(sid)) == {"a.txt": b"A1", "b.txt": b"B1"}
    # Only the session's ref: the store's branch is untouched, nothing else was written.
    assert central.head("central", "main")


def test_a_revert_is_replicated(api, sid, central):
    run_turn(api, sid, "write a.txt A1")
    run_turn(api, sid, "write b.txt B1")
    second = Message.objects.filter(session_id=sid, role="user").order_by("id")[1]
    answer = api.post(f"/api/sessions/{sid}/revert/", {"message_id": second.id}, format="json")
    assert answer.status_code == 200
    assert central.read_tree("central", replication.ref(sid)) == {"a.txt": b"A1"}
    assert api.post(f"/api/sessions/{sid}/unrevert/").status_code == 200
    assert central.read_tree("central", replication.ref(sid)) == _worktree_files(sid)
    assert Session.objects.get(id=sid).replicated_snapshot == _remote(central, sid)


def test_a_failed_push_leaves_the_run_completed_and_the_next_step_catches_up(
    api, sid, central, settings, caplog
):
    run_turn(api, sid, "write a.txt A1")
    replicated = Session.objects.get(id=sid).replicated_snapshot
    url = settings.SNAPSHOT_REMOTE
    settings.SNAPSHOT_REMOTE = "https://127.0.0.1:9/central.git"  # nothing listens there
    run_turn(api, sid, "write b.txt B1")  # completed (run_turn checks it)
    assert Session.objects.get(id=sid).replicated_snapshot == replicated == _remote(central, sid)
    assert "not replicated" in caplog.text
    settings.SNAPSHOT_REMOTE = url
    run_turn(api, sid, "write c.txt C1")
    assert central.read_tree("central", replication.ref(sid)) == {
        "a.txt": b"A1",
        "b.txt": b"B1",
        "c.txt": b"C1",
    }


def test_a_stale_pusher_never_moves_the_ref(api, sid, central):
    run_turn(api, sid, "write a.txt A1")
    old = Session.objects.get(id=sid)
    run_turn(api, sid, "write b.txt B1")
    tip = _remote(central, sid, "")
    snap = snapshots.for_session(old)
    # A worker that lost its lease pushes nothing at all.
    assert not replicas.replicate(sid, snap, old.replicated_snapshot, still_holds=lambda: False)
    # One that read the row before the owner's last push is refused by the store.
    with pytest.raises(replication.ReplicationRejected):
        replication.push(snap, sid, old.replicated_snapshot, old.replicated_commit)
    assert _remote(central, sid, "") == tip == Session.objects.get(id=sid).replicated_commit


def test_an_unrecorded_push_is_repaired_by_the_owner(api, sid, central):
    run_turn(api, sid, "write a.txt A1")
    # The push reached the store, the row was not written (the worker died in between).
    Session.objects.filter(id=sid).update(replicated_commit="", replicated_snapshot="")
    run_turn(api, sid, "write b.txt B1")
    session = Session.objects.get(id=sid)
    assert session.replicated_commit == _remote(central, sid, "")
    assert central.read_tree("central", replication.ref(sid)) == {"a.txt": b"A1", "b.txt": b"B1"}


def test_a_clones_first_snapshot_is_replicated(api, central):
    url = central.make_repo("project", {"src/app.py": "print('hi')\n"})
    answer = api.post("/api/sessions/", {"repository": {"url": url}}, format="json")
    sid = answer.json()["id"]
    wait_until(lambda: Session.objects.get(id=sid).replicated_snapshot, timeout=60)
    assert central.read_tree("central", replication.ref(sid)) == {"src/app.py": b"print('hi')\n"}


def test_with_snapshot_remote_empty_nothing_is_pushed(api, sid, server, settings):
    server.make_repo("central", {"README": "x\n"})
    settings.SNAPSHOT_REMOTE = ""
    run_turn(api, sid, "write a.txt A1")
    assert not [r for r in server.requests() if "receive-pack" in r[1]]
    assert Session.objects.get(id=sid).replicated_commit == ""
    assert _remote(server, sid) == ""


@pytest.mark.skipif(not ssh_available(), reason="openssh-server is not installed")
def test_over_ssh_with_a_pinned_host_key(api, sid, ssh_git_server, settings, tmp_path):
    server = ssh_git_server
    server.make_repo("central", {"README": "x\n"})
    known = tmp_path / "known_hosts"
    known.write_text(f"{server.host} {server.host_public_key}\n")
    settings.SNAPSHOT_REMOTE = server.url("central")
    settings.SNAPSHOT_REMOTE_SSH_KEY = str(server.key_file)
    settings.SNAPSHOT_REMOTE_KNOWN_HOSTS = str(known)
    run_turn(api, sid, "write a.txt A1")
    bare = str(server.bare("central"))
    head = subprocess.run(
        [GIT, "-C", bare, "rev-parse", f"{replication.ref(sid)}^{{tree}}"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    assert head == Session.objects.get(id=sid).replicated_snapshot == _last_snapshot(sid)
    # Another host key than the pinned one: refused, nothing pushed, the run unharmed.
    other = "AAAAC3NzaC1lZDI1NTE5AAAAIOMqqnkVzrm0SdG6UOoqKLsabgH5C9okWi0dh2l9GKJl"
    known.write_text(f"{server.host} ssh-ed25519 {other}\n")
    run_turn(api, sid, "write b.txt B1")
    assert Session.objects.get(id=sid).replicated_snapshot == head
