"""Issue 45, step 4: re-homing a session on the host that claims its run (its worktree
materialised from the central store's last replicated snapshot when this host lacks it), and
``manage.py drain_host`` (sessions_app/rehome.py)."""

from __future__ import annotations

import io
import shutil
from datetime import timedelta

import pytest
from django.core.management import call_command
from django.utils import timezone

from sessions_app import hosts, rehome
from sessions_app.models import Host, Session
from sessions_app.rehome import Plan
from sessions_app.repositories import fill
from workspace import replication, snapshots

from .conftest import run_turn
from .support.git_server import GitServer, git_server_fixture, reachable_server_fixture  # noqa: F401
from .test_replication import _worktree_files, central  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)


def _host(name: str, *, age: float = 0.0, draining: bool = False) -> Host:
    when = timezone.now() - timedelta(seconds=age)
    return Host.objects.create(name=name, last_heartbeat=when, started_at=when, draining=draining)


def _stale(settings) -> float:  # noqa: ANN001
    return settings.RUN_LEASE_SECONDS * 3


@pytest.mark.parametrize(
    ("remote", "replicated", "home", "home_live", "missing", "expected"),
    [
        # The central store on, a snapshot there, no worktree here: from the store.
        ("https://store/c.git", "t1", "a", False, True, Plan.MATERIALIZE),
        ("https://store/c.git", "t1", "here", True, True, Plan.MATERIALIZE),  # drained here
        # The worktree is here: nothing to fetch; a dead home moves here.
        ("https://store/c.git", "t1", "a", False, False, Plan.MOVE),
        ("https://store/c.git", "t1", "here", True, False, Plan.STAY),
        ("https://store/c.git", "t1", "a", True, False, Plan.STAY),
        # Never replicated: never an empty worktree from the store; the home may move.
        ("https://store/c.git", "", "a", False, True, Plan.MOVE),
        # No store (a shared volume): only a dead home moves.
        ("", "t1", "a", False, True, Plan.MOVE),
        ("", "t1", "a", True, True, Plan.STAY),
        ("", "t1", "", False, True, Plan.STAY),  # no home: any host, as before
    ],
)
def test_when_a_claim_materialises_or_moves(
    settings, remote, replicated, home, home_live, missing, expected
):
    settings.SNAPSHOT_REMOTE = remote
    session = Session(host=home, replicated_snapshot=replicated)
    assert rehome.plan(session, "here", home_live=home_live, missing=missing) is expected


def test_a_worktree_is_missing_when_absent_or_empty_without_a_snapshot(owner, settings):
    session = Session.objects.create(owner=owner)
    assert rehome.worktree_missing(session)
    session.worktree.mkdir(parents=True)
    assert rehome.worktree_missing(session)
    session.snapshot_dir.mkdir(parents=True)
    (session.snapshot_dir / "last-tree").write_text("t\n")
    assert not rehome.worktree_missing(session)  # emptied by its agent: the host's own
    (session.worktree / "f").write_text("x")
    assert not rehome.worktree_missing(session)


def test_drain_moves_idle_sessions_to_the_least_loaded_live_host(owner, settings):
    _host("a")
    _host("b")
    _host("c")
    _host("dead", age=_stale(settings))
    _host("other-draining", draining=True)
    idle = [Session.objects.create(owner=owner, host="a") for _ in range(3)]
    busy = Session.objects.create(owner=owner, host="a", busy_run_id="run_1")
    Session.objects.create(owner=owner, host="b")
    out = io.StringIO()
    call_command("drain_host", "a", stdout=out)
    text = out.getvalue()
    assert Host.objects.get(name="a").draining
    homes = sorted(Session.objects.get(id=s.id).host for s in idle)
    assert homes == ["b", "c", "c"]  # the fewest first, never the dead or draining ones
    assert Session.objects.get(id=busy.id).host == "a"
    assert f"busy {busy.id}" in text and "3 moved, 1 busy" in text
    # Placement skips the draining host, even with the fewest sessions.
    Session.objects.filter(host="a").delete()
    assert hosts.place() in {"b", "c"}


def test_drain_of_an_unknown_host_says_so(db):
    with pytest.raises(Exception, match="No host named"):
        call_command("drain_host", "nowhere", stdout=io.StringIO())


def _lose_the_worktree(sid: str, settings) -> None:  # noqa: ANN001
    """The session's host is dead and this host never had its files."""
    _host("lost", age=_stale(settings))
    Session.objects.filter(id=sid).update(host="lost")
    session = Session.objects.get(id=sid)
    shutil.rmtree(session.worktree)
    shutil.rmtree(session.snapshot_dir)
    shutil.rmtree(snapshots.store_path())  # nor any object of its snapshots


def test_a_session_whose_host_died_gets_its_files_from_the_central_store(
    api,
    sid,
    central,  # noqa: F811
    settings,
):
    run_turn(api, sid, "write a.txt A1")
    run_turn(api, sid, "write sub/b.bin B1\nwrite a.txt A2")
    held = central.read_tree("central", replication.ref(sid))
    assert held == _worktree_files(sid) and held["a.txt"] == b"A2"
    _lose_the_worktree(sid, settings)
    run_turn(api, sid, "say back again")
    assert _worktree_files(sid) == held  # byte for byte what the last replicated step held
    assert Session.objects.get(id=sid).host == settings.WORKER_HOST
    # The next snapshot builds on the materialised one.
    run_turn(api, sid, "write c.txt C1")
    assert central.read_tree("central", replication.ref(sid)) == {**held, "c.txt": b"C1"}


def test_a_session_never_replicated_is_not_given_files_by_re_homing(
    api,
    sid,
    central,  # noqa: F811
    settings,
):
    run_turn(api, sid, "write a.txt A1")
    Session.objects.filter(id=sid).update(replicated_commit="", replicated_snapshot="")
    _lose_the_worktree(sid, settings)
    run_turn(api, sid, "say hello")  # runs as today, on whatever the worktree holds
    assert _worktree_files(sid) == {}
    assert Session.objects.get(id=sid).host == settings.WORKER_HOST  # the dead home moved


def test_a_clone_whose_home_died_moves_to_the_host_that_runs_its_job(owner, settings):
    _host("lost", age=_stale(settings))
    session = Session.objects.create(
        owner=owner,
        host="lost",
        busy_run_id="prep_1",
        source={"url": "https://127.0.0.1:9/nothing.git", "ref": ""},
    )
    fill.prepare(session.id, "prep_1")  # the clone itself fails: nothing listens there
    assert Session.objects.get(id=session.id).host == settings.WORKER_HOST
