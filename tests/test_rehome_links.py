"""Issue 45, step 4: a session re-homed on a host that holds another session of the same tree
gets its files by hard link (workspace/linked_rehome.py): the same inodes, and a write in
either reaches neither; with the shell writing into the worktree (no layers) it gets copies.
Also from a kept checkout of the tree (workspace/shared_checkouts.py). The central store is
the tests' https git server; the runs are real turns through the API."""

from __future__ import annotations

import shutil
from datetime import timedelta
from pathlib import Path

import pytest
from django.utils import timezone

from sessions_app.models import Host, Session
from workspace import linked_rehome, replication, sandbox, shared_checkouts, snapshots

from .conftest import new_session, run_turn
from .support.git_server import GitServer, git_server_fixture, reachable_server_fixture  # noqa: F401
from .support.shell import shell_on
from .test_cow_fork import fingerprint
from .test_replication import central  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

FILES = "write a.txt alpha\nwrite sub/b.txt beta\nwrite sub/deep/c.txt gamma"


def _same_tree_pair(api) -> tuple[Session, Session]:  # noqa: ANN001
    """Two sessions whose last replicated snapshot is one tree."""
    first, second = new_session(api), new_session(api)
    run_turn(api, first, FILES)
    run_turn(api, second, FILES)
    a, b = Session.objects.get(id=first), Session.objects.get(id=second)
    assert a.replicated_snapshot and a.replicated_snapshot == b.replicated_snapshot
    return a, b


def _lose(session: Session, settings) -> None:  # noqa: ANN001
    """Its home died; this host never had its files (the objects stay: the other session's)."""
    when = timezone.now() - timedelta(seconds=settings.RUN_LEASE_SECONDS * 3)
    Host.objects.get_or_create(name="lost", defaults={"last_heartbeat": when, "started_at": when})
    Session.objects.filter(id=session.id).update(host="lost")
    shutil.rmtree(session.worktree)
    shutil.rmtree(session.snapshot_dir)


def _inodes(root: Path) -> dict[str, int]:
    return {k: v[0] for k, v in fingerprint(root).items()}


def _contents(root: Path) -> dict[str, str]:
    return {k: v[1] for k, v in fingerprint(root).items()}


@pytest.fixture(params=["auto", "off"])
def overlay(request, settings) -> str:  # noqa: ANN001
    shell_on(settings)
    settings.AGENT_SHELL_OVERLAY = request.param
    return request.param


def test_a_session_re_homed_beside_one_of_the_same_tree_shares_its_files(
    api,
    central,  # noqa: F811
    settings,
    overlay,
):
    kept, moved = _same_tree_pair(api)
    assert _inodes(kept.worktree).keys() == {"a.txt", "sub/b.txt", "sub/deep/c.txt"}
    before = fingerprint(kept.worktree)
    _lose(moved, settings)
    run_turn(api, moved.id, "say back on a new host")
    assert Session.objects.get(id=moved.id).host == settings.WORKER_HOST
    assert _contents(moved.worktree) == _contents(kept.worktree)
    if overlay == "auto" and sandbox.uses_layers(moved.worktree):
        assert _inodes(moved.worktree) == _inodes(kept.worktree), "linked, not copied"
    else:
        shared = set(_inodes(moved.worktree).values()) & set(_inodes(kept.worktree).values())
        assert not shared, "without layers a re-homed session has copies of its own"
    # A write in either reaches neither: each change is a new file of its own worktree.
    run_turn(api, moved.id, "write a.txt changed where it moved\nshell echo more >> sub/b.txt")
    assert fingerprint(kept.worktree) == before
    moved_now = fingerprint(moved.worktree)
    run_turn(api, kept.id, "write sub/deep/c.txt changed where it stayed")
    assert fingerprint(moved.worktree) == moved_now
    assert (moved.worktree / "a.txt").read_text() == "changed where it moved"
    assert (moved.worktree / "sub/deep/c.txt").read_text() == "gamma"
    # The next snapshot of the re-homed session builds on the linked one.
    assert replication.enabled()
    assert (
        Session.objects.get(id=moved.id).replicated_snapshot == snapshots.for_session(moved).peek()
    )


def test_a_kept_checkout_of_the_tree_serves_when_no_session_has_it(
    api,
    central,  # noqa: F811
    settings,
):
    shell_on(settings)
    settings.SHARED_CHECKOUT_KEEP_DAYS = 1
    sid = new_session(api)
    run_turn(api, sid, FILES)
    session = Session.objects.get(id=sid)
    if not sandbox.uses_layers(session.worktree):
        pytest.skip("the shell writes into the worktree here: nothing is shared")
    tree = session.replicated_snapshot
    # A kept checkout of the tree (as a clone leaves one), made from a copy of the files.
    entry = shared_checkouts.root() / tree
    shutil.copytree(session.worktree, entry / "files")
    index = str(entry / "index")  # whole, as a clone's (a split one is never kept)
    snapshots.for_session(session).git(
        "-c", "core.splitIndex=false", "read-tree", tree, index=index
    )
    kept = _inodes(entry / "files")
    _lose(session, settings)
    snap = snapshots.for_session(session)
    snap.ensure()
    session.worktree.mkdir(exist_ok=True)
    assert linked_rehome.materialize(snap, tree) == 3
    assert _inodes(session.worktree) == kept
    assert snap.peek() == tree
