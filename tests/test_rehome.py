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

from core import mode
from runs_app.execution import runtime, sweeper
from sessions_app import hosts, rehome
from sessions_app.models import Host, Session
from sessions_app.rehome import Plan
from sessions_app.repositories import fill
from workspace import replication, snapshots

from .conftest import run_turn, submitted
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
        # No home without a shared disk: the files are made here, so is the home.
        ("https://store/c.git", "", "", False, True, Plan.MOVE),
        ("https://store/c.git", "t1", "", False, False, Plan.MOVE),
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


def test_the_sweep_moves_idle_sessions_of_dead_hosts_to_live_ones(owner, settings):
    """Issue 45, step 4, in the background: a live worker's sweep re-homes the idle sessions
    of hosts whose beat lapsed (or that have no row), the fewest sessions first, bounded per
    sweep; busy ones, live hosts' ones and homeless ones stay."""
    _host("a")
    _host("b")
    _host("drains", draining=True)
    _host("dead", age=_stale(settings))
    Session.objects.create(owner=owner, host="a")
    orphans = [Session.objects.create(owner=owner, host="dead") for _ in range(4)]
    gone = Session.objects.create(owner=owner, host="no-row-at-all")
    busy = Session.objects.create(owner=owner, host="dead", busy_run_id="run_1")
    homeless = Session.objects.create(owner=owner, host="")
    draining = Session.objects.create(owner=owner, host="drains")
    first = rehome.sweep_dead(limit=3)
    assert len(first) == 3
    rest = rehome.sweep_dead(limit=3)
    assert len(rest) == 2 and not rehome.sweep_dead()
    moved = {sid: (old, new) for sid, old, new in first + rest}
    assert set(moved) == {s.id for s in orphans} | {gone.id}
    homes = [Session.objects.get(id=s.id).host for s in [*orphans, gone]]
    assert sorted(homes) == ["a", "a", "b", "b", "b"]  # b (empty) first, then both even
    assert Session.objects.get(id=busy.id).host == "dead"  # its run resumes by the lease
    assert Session.objects.get(id=homeless.id).host == ""
    assert Session.objects.get(id=draining.id).host == "drains"  # live: drain_host's to move


def test_the_workers_sweep_re_homes_and_a_dead_hosts_run_goes_to_the_default_queue(
    owner, settings, monkeypatch
):
    """The sweep (sweeper.sweep_once) moves the idle session and re-enqueues the expired
    run of the dead host's busy one: to the default queue (any live worker, which re-homes it
    on its claim), not the dead host's own queue."""
    settings.WORKER_HOST = "here"
    settings.RUN_EXECUTOR = "celery"
    sent: list[tuple[str, str | None]] = []
    monkeypatch.setattr(
        runtime.mode,
        "send_task",
        lambda name, args, task_id=None, queue=None: sent.append((args[0], queue)),
    )
    _host("dead", age=_stale(settings))
    idle = Session.objects.create(owner=owner, host="dead")
    run = submitted(owner, "say hi")
    expired = timezone.now() - timedelta(seconds=1)
    Session.objects.filter(id=run.session_id).update(
        host="dead", busy_run_id=run.id, lease_expires_at=expired
    )
    sweeper.sweep_once()  # beats for "here" first: a live host to move to
    assert Session.objects.get(id=idle.id).host == "here"
    assert Session.objects.get(id=run.session_id).host == "dead"  # moved by its claim
    assert sent == [(run.id, None)]
    # Once the claim moved it, its next runs go to the new home's queue.
    Session.objects.filter(id=run.session_id).update(host="here")
    runtime.enqueue(run.id)
    assert sent[-1] == (run.id, mode.host_queue("here"))


def test_a_session_back_on_a_host_with_an_older_copy_gets_the_replicated_files(
    api,
    sid,
    central,  # noqa: F811
    settings,
    tmp_path,
):
    """A host that held the session before it lived elsewhere (drained, or stopped past its
    lease) has a stale copy: the claim replaces it with the last replicated snapshot."""
    run_turn(api, sid, "write a.txt A1")
    session = Session.objects.get(id=sid)
    kept = tmp_path / "kept"
    places = {"wt": session.worktree, "git": session.snapshot_dir, "store": snapshots.store_path()}
    for name, path in places.items():
        shutil.copytree(path, kept / name, symlinks=True)
    run_turn(api, sid, "write a.txt A2\nwrite b.txt B2")  # as if on another host
    held = central.read_tree("central", replication.ref(sid))
    assert held["a.txt"] == b"A2"
    for name, path in places.items():  # this host as it was when the session left it
        shutil.rmtree(path)
        shutil.copytree(kept / name, path, symlinks=True)
    assert _worktree_files(sid) == {"a.txt": b"A1"}
    _host("elsewhere", age=_stale(settings))
    Session.objects.filter(id=sid).update(host="elsewhere")
    run_turn(api, sid, "say back")
    assert _worktree_files(sid) == held
    assert not [p for p in session.worktree.parent.iterdir() if p.name.startswith(".stale-")]
    run_turn(api, sid, "write c.txt C1")  # and it goes on from there
    assert central.read_tree("central", replication.ref(sid)) == {**held, "c.txt": b"C1"}


def test_the_home_hosts_copy_with_a_step_not_replicated_yet_is_kept(
    api,
    sid,
    central,  # noqa: F811
    settings,
):
    """A failed push leaves the home host ahead of the store: its copy is not stale."""
    run_turn(api, sid, "write a.txt A1")
    settings.SNAPSHOT_REMOTE = central.url("nowhere")  # this step's push fails
    run_turn(api, sid, "write a.txt A2")
    settings.SNAPSHOT_REMOTE = central.url("central")
    session = Session.objects.get(id=sid)
    assert not rehome.lacks_files(session)
    run_turn(api, sid, "say still here")
    assert _worktree_files(sid) == {"a.txt": b"A2"}
