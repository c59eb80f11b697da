"""Issue 13.5: ``manage.py prune_snapshots`` deletes the old objects of the shared store that
no snapshot needs, and never one that a row or a session's git dir still needs."""

from __future__ import annotations

import io
import os
import time
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command

from sessions_app.models import HistoryEvent, Message, Part, Session, Share
from workspace import git_output, snapshots, tree_objects, trees

pytestmark = pytest.mark.django_db

DAY = 86400


def files(root: Path) -> dict[str, bytes]:
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def write(worktree: Path, content: dict[str, str]) -> None:
    for name, text in content.items():
        path = worktree / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def object_files() -> set[Path]:
    store = snapshots.store_path()
    return {p for p in store.glob("??/*") if p.is_file()}


def object_path(sha: str) -> Path:
    return snapshots.store_path() / sha[:2] / sha[2:]


def age_every_object(days: float) -> None:
    old = time.time() - days * DAY
    for path in object_files():
        os.utime(path, (old, old))


def prune(*args: str) -> str:
    out = io.StringIO()
    call_command("prune_snapshots", *args, stdout=out)
    return out.getvalue()


@pytest.fixture
def store(owner):
    """Trees named in every way a row or a git dir names one, and some garbage."""
    a = Session.objects.create(owner=owner)
    snap = snapshots.for_session(a)
    snap.ensure()
    kept: dict[str, tuple[snapshots.Snapshots, dict[str, bytes]]] = {}

    def track(content: dict[str, str]) -> str:
        write(snap.worktree, content)
        tree = snap.track()
        kept[tree] = (snap, files(snap.worktree))
        return tree

    part_tree = track({"a.txt": "one", "dir/sub/common.txt": "common"})
    write(snap.worktree, {"t2.txt": "only in t2"})
    unreferenced = snap.track()  # a step no row names any more (a cleanup deleted it)
    (snap.worktree / "t2.txt").unlink()
    share_tree = track({"a.txt": "shared", "bin.dat": "\x00\x01"})
    revert_tree = track({"dir/sub/common.txt": "revert"})
    history_tree = track({"h.txt": "history"})
    last_tree = track({"a.txt": "last"})
    composed = trees.compose(snap, last_tree, {"h.txt": snapshots.EMPTY_TREE, "zz.txt": part_tree})
    write(snap.worktree, {"pending.txt": "only the index names me"})
    snap._add_all(None)  # a git add whose write-tree never happened (a killed worker)
    pending = snap.git("ls-files", "-s", "pending.txt").split()[1]

    message = Message.objects.create(session=a, role=Message.Role.ASSISTANT)
    Part.objects.create(message=message, session=a, type="step-start", data={"snapshot": part_tree})
    Part.objects.create(message=message, session=a, type="text", data={"snapshot": "not an id"})
    Share.objects.create(session=a, created_by=owner, snapshot=share_tree)
    Session.objects.filter(id=a.id).update(revert={"snapshot": revert_tree, "files": ["x"]})
    HistoryEvent.objects.create(session=a, kind="continue", data={"files_before": history_tree})
    HistoryEvent.objects.create(session=a, kind="revert", data={"files": ["a.txt"]})
    HistoryEvent.objects.create(session=a, kind="fork", data={"snapshot": "f" * 40})  # lost

    b = Session.objects.create(owner=owner)  # a second session on the same store, no rows
    b_snap = snapshots.for_session(b)
    write(b_snap.worktree, {"b.txt": "session b", "a.txt": "one"})
    kept[b_snap.track()] = (b_snap, files(b_snap.worktree))

    garbage = {
        object_path(unreferenced),
        object_path(snap.git("rev-parse", f"{unreferenced}:t2.txt").strip()),
        object_path(composed),
    }
    return {
        "kept": kept,
        "garbage": garbage,
        "pending": pending,
        "snap": snap,
        "composed": composed,
    }


def test_prune_deletes_old_unreachable_objects_and_keeps_every_snapshot(store):
    age_every_object(30)
    fresh = store["snap"].git("hash-object", "-w", "--stdin", input=b"written just now").strip()
    everything = object_files()
    assert store["garbage"] < everything

    report = prune("--dry-run")
    assert "3 unreachable object(s) would free" in report and "nothing deleted" in report
    assert object_files() == everything, "a dry run deletes nothing"

    report = prune()
    assert everything - object_files() == store["garbage"]
    assert "3 unreachable object(s) freed" in report
    assert "1 younger than 14 day(s) kept" in report
    assert object_path(fresh).exists(), "an object younger than N days stays"
    assert object_path(store["pending"]).exists(), "a blob only the index names stays"
    for tree, (snap, content) in store["kept"].items():
        snap.restore(tree)
        assert files(snap.worktree) == content, tree


def test_the_bytes_freed_are_counted(store):
    age_every_object(30)
    sizes = sum(p.stat().st_size for p in store["garbage"])
    assert f"3 unreachable object(s) freed: {sizes} bytes" in prune()


def test_objects_younger_than_the_days_stay(store):
    age_every_object(10)
    everything = object_files()
    assert "0 unreachable object(s) freed" in prune()
    assert object_files() == everything
    assert "3 unreachable object(s) freed" in prune("--days", "7")


def test_a_tree_composed_again_is_fresh_again(store):
    """A revert may compose a tree that exists as old garbage and name it a moment later: it
    is freshened like git freshens what it would write, so a prune in between keeps it."""
    snap, sha = store["snap"], store["composed"]
    age_every_object(30)
    body = snap.check(["cat-file", "tree", sha])
    assert tree_objects.write_tree(snap, git_output.parse_tree(body)).hex() == sha
    assert object_path(sha).stat().st_mtime > time.time() - 60
    assert "2 unreachable object(s) freed" in prune()
    assert object_path(sha).exists()


def test_days_below_one_are_refused(store):
    with pytest.raises(CommandError, match="at least 1"):
        prune("--days", "0")


def test_an_empty_workspace_prunes_nothing(settings, tmp_path):
    settings.WORKSPACE_ROOT = tmp_path / "none"
    assert "0 unreachable object(s) freed: 0 bytes" in prune()


def test_a_stale_half_written_object_file_goes_too(store):
    age_every_object(30)
    fan = snapshots.store_path() / "ab"
    fan.mkdir(exist_ok=True)
    stale, recent = fan / ".tmp-4242-cdef", fan / ".tmp-4243-cdef"
    stale.write_bytes(b"half a tree")
    recent.write_bytes(b"being written now")
    old = time.time() - 30 * DAY
    os.utime(stale, (old, old))
    assert "1 stale temporary file(s)" in prune()
    assert not stale.exists() and recent.exists()
