"""Issue 13.5: every git call of the snapshots goes through one runner, with a timeout, and
nothing but SnapshotError comes out of it."""

from __future__ import annotations

import ast
import inspect
import os
import shutil
import signal
import stat
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conftest import wait_until
from workspace import snapshots, trees
from workspace.snapshots import SnapshotError, Snapshots

REAL_GIT = shutil.which("git")


@pytest.fixture
def snap(tmp_path: Path) -> Snapshots:
    worktree = tmp_path / "wt"
    worktree.mkdir()
    return Snapshots(git_dir=tmp_path / "snap.git", worktree=worktree)


def fake_git(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, script: str) -> Path:
    """A ``git`` first on PATH: ``script`` (sh) runs first, then the real git."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    git = bin_dir / "git"
    git.write_text(f'#!/bin/sh\n{script}\nexec "{REAL_GIT}" "$@"\n')
    git.chmod(git.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv("PATH", f"{bin_dir}{os.pathsep}{os.environ['PATH']}")
    return bin_dir


def gone(pid: int) -> bool:
    """The process has ended (a zombie waiting for init to reap it counts as ended)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_no_subprocess_call_is_left_outside_the_runner():
    tree = ast.parse(inspect.getsource(snapshots))
    runner = next(  # its body, not the ``@overload`` lines that type its two answers
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.FunctionDef) and node.name == "_run" and not node.decorator_list
    )
    inside = {id(node) for node in ast.walk(runner)}
    outside = [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Name) and node.id == "subprocess" and id(node) not in inside
    ]
    # The module imports it once; "from subprocess import run" would hide a call from this.
    imports = [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.Import) and any(a.name == "subprocess" for a in node.names)
    ]
    assert len(imports) == 1 and outside == [], f"subprocess used outside _run, lines {outside}"
    assert not [
        node
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module in ("subprocess", "os")
    ]
    spawners = ("system", "popen", "spawnl", "spawnv", "spawnlp", "spawnvp", "execv", "fork")
    assert not [
        node.lineno
        for node in ast.walk(tree)
        if isinstance(node, ast.Attribute)
        and isinstance(node.value, ast.Name)
        and node.value.id == "os"
        and node.attr in spawners
    ]


@pytest.mark.parametrize(
    "operation",
    [
        lambda s, tree: s.track(),
        lambda s, tree: s.read_blob(tree, "a.txt"),
        lambda s, tree: s.checkout(tree, ["a.txt"]),
        lambda s, tree: s.diff_stat(tree, snapshots.EMPTY_TREE),
        lambda s, tree: trees.compose(s, tree, {"a.txt": snapshots.EMPTY_TREE}),
        lambda s, tree: list(s.stream(["diff-tree", "-p", snapshots.EMPTY_TREE, tree])),
    ],
    ids=["track", "read_blob", "checkout", "diff_stat", "compose", "stream"],
)
def test_a_hanging_git_is_killed_and_raises_snapshot_error(
    snap, tmp_path, monkeypatch, settings, operation
):
    (snap.worktree / "a.txt").write_text("a")
    tree = snap.track()
    pids = tmp_path / "pids"
    # It and a child of its own hang; both must be gone when the call returns.
    # Git's own PATH leads nowhere (no child git, no shell command): the sleep by its path.
    sleep = shutil.which("sleep")
    fake_git(tmp_path, monkeypatch, f"echo $$ >> {pids}\n{sleep} 20 &\necho $! >> {pids}\nwait")
    settings.SNAPSHOT_GIT_TIMEOUT_SECONDS = 0.5
    started = time.monotonic()
    with pytest.raises(SnapshotError, match="no answer after 0.5s"):
        operation(snap, tree)
    assert time.monotonic() - started < 5
    hung = [int(pid) for pid in pids.read_text().split()]
    wait_until(lambda: all(gone(pid) for pid in hung), 5, "the git and its child killed")


def test_a_failing_cat_file_batch_raises_snapshot_error(snap, tmp_path, monkeypatch):
    (snap.worktree / "a.txt").write_text("one")
    tree = snap.track()
    (snap.worktree / "a.txt").write_text("two")
    fake_git(
        tmp_path,
        monkeypatch,
        # The runner's own flags come first: the command is found among the arguments.
        'case "$* " in *" cat-file --batch "*) echo "fatal: broken" >&2; exit 128;; esac',
    )
    with pytest.raises(SnapshotError, match="git cat-file: fatal: broken"):
        snap.checkout(tree, ["a.txt"])
    assert (snap.worktree / "a.txt").read_text() == "two"
    with pytest.raises(SnapshotError, match="git cat-file: fatal: broken"):
        trees.compose(snap, tree, {"a.txt": snapshots.EMPTY_TREE})


def blob_file(snap: Snapshots, tree: str, name: str) -> Path:
    sha = snap.git("rev-parse", f"{tree}:{name}").strip()
    return snap.git_dir / "objects" / sha[:2] / sha[2:]


def test_a_corrupt_or_lost_object_fails_checkout_before_any_file_changes(snap):
    wt = snap.worktree
    (wt / "a.txt").write_text("a1")
    (wt / "b.txt").write_text("b1")
    tree = snap.track()
    (wt / "a.txt").write_text("a2")
    (wt / "c.txt").write_text("c2")  # not in the tree: checkout would delete it
    snap.track()
    path = blob_file(snap, tree, "a.txt")
    path.chmod(0o644)
    path.write_bytes(b"not zlib at all")
    with pytest.raises(SnapshotError, match="git cat-file"):
        snap.checkout(tree, ["a.txt", "c.txt"])
    assert (wt / "a.txt").read_text() == "a2" and (wt / "c.txt").read_text() == "c2"
    path.unlink()
    with pytest.raises(SnapshotError, match="a.txt .* is missing"):
        snap.checkout(tree, ["a.txt", "c.txt"])
    assert (wt / "a.txt").read_text() == "a2" and (wt / "c.txt").read_text() == "c2"


def test_no_git_at_all_is_a_snapshot_error(snap, monkeypatch):
    monkeypatch.setenv("PATH", "/nonexistent")
    with pytest.raises(SnapshotError, match="git add"):
        snap.track()


def test_the_runner_returns_a_failure_for_the_caller_to_judge(snap):
    snap.ensure()
    result = snap._run(["cat-file", "-t", "0" * 40])
    assert result.code == 128 and "fatal:" in result.stderr and result.stdout == b""
    with pytest.raises(SnapshotError, match="git cat-file: "):
        snap.git("cat-file", "-t", "0" * 40)
    assert snap.read_blob(snapshots.EMPTY_TREE, "nothing.txt") is None


def test_names_git_refuses_still_stay_out_through_the_runner(snap):
    wt = snap.worktree
    (wt / "ok.txt").write_text("ok")
    (wt / "GIT~1").mkdir()
    (wt / "GIT~1" / "config").write_text("refused by git")
    tree = snap.track()
    assert snap.git("ls-tree", "-r", "--name-only", tree).split() == ["ok.txt"]


def test_a_streamed_git_hands_on_its_output_and_is_killed_when_closed(snap, monkeypatch):
    (snap.worktree / "a.bin").write_bytes(os.urandom(1 << 20))
    tree = snap.track()
    args = ["diff-tree", "-r", "-p", "--binary", snapshots.EMPTY_TREE, tree]
    whole = snap.check(args)
    assert b"".join(snap.stream(args)) == whole
    started: list[subprocess.Popen] = []
    module = SimpleNamespace(**{n: getattr(subprocess, n) for n in dir(subprocess)})
    module.Popen = lambda *a, **k: started.append(subprocess.Popen(*a, **k)) or started[-1]
    monkeypatch.setattr(snapshots, "subprocess", module)
    chunks = snap.stream(args)
    first = next(chunks)
    assert whole.startswith(first) and len(first) < len(whole)
    chunks.close()
    assert started[0].returncode == -signal.SIGKILL, "git, still writing, is killed"
    with pytest.raises(snapshots.MissingObjectError):
        list(snap.stream(["cat-file", "-p", "1" * 40]))
