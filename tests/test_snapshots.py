from __future__ import annotations

import os
import subprocess
import time

import pytest
from django.test import override_settings

from workspace import skipped_files, trees
from workspace.change_summary import summary_of
from workspace.snapshots import Snapshots


@pytest.fixture
def snap(tmp_path):
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return Snapshots(git_dir=tmp_path / "snap.git", worktree=worktree)


def files(root):
    return {
        p.relative_to(root).as_posix(): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def test_an_unchanged_worktree_gives_the_same_tree(snap):
    (snap.worktree / "a.txt").write_text("a")
    first = snap.track()
    assert snap.track() == first
    (snap.worktree / "a.txt").write_text("b")
    assert snap.track() != first


def test_an_unchanged_worktree_costs_no_write_tree(snap, monkeypatch):
    """A run's start snapshots a worktree its last step left as it was: ``git add`` finds
    nothing to change and the tree is the one the last ``write-tree`` gave, with no git
    process for it. Any write of the index since (a change found, a restore, another
    process's git) makes the next snapshot ask git again."""
    (snap.worktree / "a.txt").write_text("a")
    # Written a while ago: a file as new as the index is "racily clean" to git, which then
    # hashes it again and writes the index (what a run's start finds is seconds old).
    os.utime(snap.worktree / "a.txt", (time.time() - 10, time.time() - 10))
    first = snap.track()
    started: list[str] = []
    original = Snapshots._run

    def counted(self, args, **kwargs):  # noqa: ANN001, ANN003, ANN202
        started.append(args[0])
        return original(self, args, **kwargs)

    monkeypatch.setattr(Snapshots, "_run", counted)
    assert snap.track() == first
    assert "write-tree" not in started and started.count("add") == 1
    # The same size, the same second: git's stat cache sees it, the index is written again.
    (snap.worktree / "a.txt").write_text("b")
    second = snap.track()
    assert second != first and "write-tree" in started
    # The index rewritten by other means (a restore; git of another process: the same).
    snap.restore(first)
    started.clear()
    assert snap.track() == first and "write-tree" in started
    subprocess.run(
        ["git", f"--git-dir={snap.git_dir}", f"--work-tree={snap.worktree}", "read-tree", second],
        check=True,
    )
    started.clear()
    assert snap.track() == first and "write-tree" in started
    assert Snapshots(git_dir=snap.git_dir, worktree=snap.worktree).track() == first
    # A tree that is not the git dir's last-tree any more is not one the prune keeps: git
    # writes (and freshens) it again.
    (snap.git_dir / "last-tree").write_text(second)
    started.clear()
    assert snap.track() == first and "write-tree" in started


def test_restore_reproduces_a_tree_exactly(snap):
    wt = snap.worktree
    (wt / "keep.txt").write_text("same")
    (wt / "mod.txt").write_text("old\n")
    (wt / "gone.txt").write_text("will be deleted")
    (wt / "deep/er/dir").mkdir(parents=True)
    (wt / "deep/er/dir/ünïcødé 名前.txt").write_text("unicode")
    (wt / ("l" * 200 + ".txt")).write_text("long name")
    (wt / "blob.bin").write_bytes(bytes(range(256)) * 4)
    before = files(wt)
    tree = snap.track()
    (wt / "mod.txt").write_text("new\n")
    (wt / "gone.txt").unlink()
    (wt / "deep/er/dir/ünïcødé 名前.txt").unlink()
    (wt / "blob.bin").write_bytes(b"\x00changed")
    (wt / "new/nested").mkdir(parents=True)
    (wt / "new/nested/created.txt").write_text("created later")
    (wt / "created.txt").write_text("created later")
    snap.track()
    snap.restore(tree)
    assert files(wt) == before
    assert snap.track() == tree


def test_snapshots_never_touch_the_worktrees_own_git(snap):
    wt = snap.worktree
    subprocess.run(["git", "init", "-q"], cwd=wt, check=True)
    (wt / ".git" / "marker").write_text("mine")
    head = (wt / ".git" / "HEAD").read_text()
    (wt / "a.txt").write_text("a")
    tree = snap.track()
    assert ".git" not in snap.git("ls-tree", "-r", "--name-only", tree)
    (wt / "b.txt").write_text("b")
    snap.restore(tree)
    assert (wt / ".git" / "marker").read_text() == "mine"
    assert (wt / ".git" / "HEAD").read_text() == head
    assert not (wt / "b.txt").exists()


def test_patch_and_diff_stat_agree_with_git_numstat(snap):
    wt = snap.worktree
    (wt / "a.txt").write_text("1\n2\n3\n")
    (wt / "del.txt").write_text("x\n")
    old = snap.track()
    (wt / "a.txt").write_text("1\nTWO\n3\n4\n")
    (wt / "del.txt").unlink()
    (wt / "new.bin").write_bytes(b"\x00\x01\x02")
    new = snap.track()
    assert snap.patch(old, new) == ["a.txt", "del.txt", "new.bin"]
    diff = snap.diff_stat(old, new)
    assert diff == [
        {"file": "a.txt", "status": "modified", "additions": 2, "deletions": 1, "binary": False},
        {"file": "del.txt", "status": "deleted", "additions": 0, "deletions": 1, "binary": False},
        {"file": "new.bin", "status": "added", "additions": 0, "deletions": 0, "binary": True},
    ]
    numstat = snap.git("diff-tree", "-r", "--numstat", old, new)
    assert summary_of(diff)["additions"] == sum(
        int(line.split("\t")[0]) for line in numstat.splitlines() if line[0] != "-"
    )
    assert "+TWO" in snap.diff_text(old, new)


def test_compose_takes_files_from_other_trees_without_touching_the_worktree(snap):
    wt = snap.worktree
    (wt / "a.txt").write_text("a1")
    t1 = snap.track()
    (wt / "a.txt").write_text("a2")
    (wt / "b.txt").write_text("b2")
    t2 = snap.track()
    composed = trees.compose(snap, t2, {"a.txt": t1, "b.txt": t1})
    assert files(wt) == {"a.txt": b"a2", "b.txt": b"b2"}
    assert snap.patch(t2, composed) == ["a.txt", "b.txt"]
    snap.checkout(composed, snap.patch(t2, composed))
    assert files(wt) == {"a.txt": b"a1"}
    assert snap.track() == composed, "the composed tree is the one git itself writes"


def test_compose_rewrites_nested_trees_like_git_does(snap):
    wt = snap.worktree
    (wt / "top.txt").write_text("top")
    (wt / "x/y").mkdir(parents=True)
    (wt / "x/y/keep.txt").write_text("keep")
    (wt / "x/y/z.sh").write_text("#!/bin/sh\n")
    (wt / "x/y/z.sh").chmod(0o755)
    old = snap.track()
    (wt / "x/y/z.sh").unlink()
    (wt / "x/y/keep.txt").write_text("changed")
    (wt / "new/deep/er").mkdir(parents=True)
    (wt / "new/deep/er/f.txt").write_text("new")
    (wt / "x-y.txt").write_text("sorts beside the x/ tree")
    now = snap.track()
    changed = snap.patch(now, old)
    composed = trees.compose(snap, now, {name: old for name in changed})
    assert composed == old
    snap.checkout(composed, snap.patch(now, composed))
    assert snap.track() == old
    assert (wt / "x/y/z.sh").stat().st_mode & 0o111


def test_large_and_ignored_files_are_skipped_and_reported(snap, settings):
    settings.SNAPSHOT_MAX_FILE_BYTES = 100
    wt = snap.worktree
    (wt / ".gitignore").write_text("build/\n")
    (wt / "build").mkdir()
    (wt / "build" / "out.o").write_text("ignored")
    (wt / "big.dat").write_bytes(b"x" * 1000)
    (wt / "small.txt").write_text("ok")
    tree = snap.track()
    names = snap.git("ls-tree", "-r", "--name-only", tree).split()
    assert names == [".gitignore", "small.txt"]
    assert skipped_files.skipped(snap) == [
        {"path": "big.dat", "reason": "large"},
        {"path": "build/", "reason": "ignored"},
    ]


def test_peek_gives_the_tree_track_gives_and_leaves_the_index_alone(snap):
    (snap.worktree / "a.txt").write_text("one")
    first = snap.track()
    index = (snap.git_dir / "index").read_bytes()
    (snap.worktree / "a.txt").write_text("two")
    (snap.worktree / "b.txt").write_text("new")
    lock = snap.git_dir / "index.lock"
    lock.write_text("")  # the loop is in the middle of its own git add
    peeked = snap.peek()
    assert (snap.git_dir / "index").read_bytes() == index, "the session's index is untouched"
    assert (snap.git_dir / "last-tree").read_text() == first
    lock.unlink()
    assert snap.track() == peeked


def test_two_snapshots_at_once_take_turns_on_the_index(snap):
    """The chaos test's ``files-as-snapshot`` violation: a step of a cancelled run still
    snapshotting in its thread when the next run's first step snapshots. Two ``git add`` on
    one index failed on each other's ``index.lock`` ("index file smaller than expected"):
    now they take turns on the index (``holding_index``), and every snapshot succeeds."""
    import threading

    for i in range(2000):
        (snap.worktree / f"f{i}.txt").write_text(str(i))
    snap.track()
    errors: list[Exception] = []

    def steps(who: int) -> None:
        for step in range(12):
            (snap.worktree / f"{who}-{step}.txt").write_text("x" * step)
            try:
                tree = snap.track()
                assert snap.git("cat-file", "-p", f"{tree}:{who}-{step}.txt") == "x" * step
            except Exception as exc:  # noqa: BLE001 - every failure is reported below
                errors.append(exc)

    threads = [threading.Thread(target=steps, args=(who,)) for who in range(2)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors, errors[:3]
    assert not (snap.git_dir / "index.lock").exists()
    assert len(snap.git("ls-files", "-z").split("\0")) - 1 == 2000 + 24


def test_a_snapshot_never_writes_an_index_another_process_holds(snap):
    """A worker stopped past its lease holds the index between two git calls (no
    ``index.lock`` to see): the worker that took its run over snapshots in a scratch index
    (the same tree) and leaves the index alone; a fork's ``materialize`` waits, then fails
    cleanly."""
    import subprocess
    import sys

    from workspace.snapshots import SnapshotError

    (snap.worktree / "a.txt").write_text("one")
    snap.track()
    index = (snap.git_dir / "index").read_bytes()
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            "fd = os.open(sys.argv[1], os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "time.sleep(60)\n",
            str(snap.git_dir / "index.writer"),
        ],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        (snap.worktree / "a.txt").write_text("two")
        tree = snap.track()
        assert snap.git("cat-file", "-p", f"{tree}:a.txt") == "two"
        assert (snap.git_dir / "index").read_bytes() == index, "the held index is untouched"
        with override_settings(SNAPSHOT_GIT_TIMEOUT_SECONDS=0.3), pytest.raises(SnapshotError):
            snap.materialize(tree)
    finally:
        holder.kill()
        holder.wait()
    # The holder gone (the kernel let go of its lock), the index is written again.
    assert snap.track() == tree
    assert (snap.git_dir / "index").read_bytes() != index


def test_a_stale_index_lock_from_a_killed_git_does_not_break_snapshots(snap):
    import os
    import time

    (snap.worktree / "a.txt").write_text("one")
    snap.track()
    lock = snap.git_dir / "index.lock"
    lock.write_text("")
    old = time.time() - 120
    os.utime(lock, (old, old))
    (snap.worktree / "a.txt").write_text("two")
    tree = snap.track()
    assert snap.git("cat-file", "-p", f"{tree}:a.txt") == "two"


def test_an_index_lock_is_never_removed_from_under_a_live_owner(snap):
    """Issue 25: a worker stopped (SIGSTOP) in the middle of its ``git add`` still owns the
    index lock when another worker takes its run over; removing the lock then lets the stopped
    git, once continued, rename its lock file over the new owner's index. The lock stays;
    the new worker snapshots in a scratch index (the same tree)."""
    import os
    import socket
    import subprocess
    import time

    (snap.worktree / "a.txt").write_text("one")
    snap.track()
    stopped = subprocess.Popen(["sleep", "30"])
    try:
        lock = snap.git_dir / "index.lock"
        lock.write_text("")
        old = time.time() - 600
        os.utime(lock, (old, old))
        (snap.git_dir / "index.owner").write_text(f"{socket.gethostname()} {stopped.pid}")
        (snap.worktree / "a.txt").write_text("two")
        tree = snap.track()
        assert lock.exists(), "the live owner's lock is left alone"
        assert snap.git("cat-file", "-p", f"{tree}:a.txt") == "two"
    finally:
        stopped.kill()
        stopped.wait()
    # Its owner gone, the lock is known stale: removed, and the index is ours again.
    tree = snap.track()
    assert not lock.exists()
    assert (snap.git_dir / "last-tree").read_text() == tree


def test_a_git_dir_made_by_many_requests_at_once_is_made_whole(tmp_path):
    """A page's first requests of a session without a git dir yet (the files and the files
    not kept, at once: a CI run's 500) each make it: the objects link and the files written
    under one shared scratch name raced. Each step now tolerates another's."""
    import threading

    from workspace import git_dirs

    for round_ in range(5):
        git_dir, worktree, objects = (tmp_path / f"{round_}-{n}" for n in ("git", "wt", "store"))
        start, failures = threading.Barrier(12), []

        def make(
            git_dir=git_dir, worktree=worktree, objects=objects, start=start, failures=failures
        ) -> None:  # noqa: ANN001
            start.wait()
            try:
                git_dirs.make_git_dir(git_dir, worktree, objects, ["*.log"])
            except Exception as exc:  # noqa: BLE001 - what a request would answer 500 with
                failures.append(exc)

        threads = [threading.Thread(target=make) for _ in range(12)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert not failures, failures
        assert (git_dir / "HEAD").read_text() == "ref: refs/heads/main\n"
        assert (git_dir / "config").read_text() == git_dirs.GIT_CONFIG
        assert (git_dir / "info" / "exclude").read_text() == ".git\n*.log\n"
        assert (git_dir / "objects").resolve() == objects.resolve()
        assert not [p.name for p in git_dir.rglob("*") if git_dirs.TMP_PREFIX in p.name]
