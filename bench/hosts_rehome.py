"""Worker hosts (issue 45), the files' side: re-homing a session of 50,000 files, and a file
read from the web's mirror of the central store against one from local disk.

**Re-home** (``sessions_app/rehome.materialize``'s work, timed in this process): a session of
50,000 files of 1 KB in 500 directories (``--quick``: 5,000) replicated to the central store
(the tests' https git server, ``git http-backend`` over TLS on loopback), then materialised on
a host that holds nothing of it, an empty ``WORKSPACE_ROOT``: the fetch of its ref into the
host's store (``replication.fetch``) and the checkout of its tree (``linked_rehome.materialize``,
which finds no same-tree session and checks out, ``Snapshots.materialize``). Beside it, the
physical floors: a plain ``git clone`` of the same tree from the same server (git alone: the
same transfer and checkout, no index of ours), and ``cp -a`` of the worktree on local disk (no
transfer, no git). Then a second session of the same tree re-homed on that host, where the
first now is: the fetch (its objects are there already) and the files by hard link
(``linked_rehome``, issue 45 step 4), against ``cp -al`` (the links alone).

**A file read**: one file of that session read from the web's mirror (``workspace/mirror.py``:
``mirror.ensure`` of the session's tree, then ``read_blob``, a ``git cat-file`` in the
mirror's store), warm (the mirror holds the tree) and right after a new step (the step's
objects fetched first), against reading it from the worktree on local disk (what a web
process that holds worktrees opens) and from the session's own store. Where
``workspace/mirror.py`` is not there, the mirror is a git dir that ``replication.fetch``
filled, read by ``git cat-file`` (the same store read) and the report says so.
"""

from __future__ import annotations

import importlib
import os
import shutil
import statistics
import subprocess
import time
from pathlib import Path
from typing import Any

FILES = 50_000
FILES_QUICK = 5_000
PER_DIR = 100
READS = 100
STEP_READS = 5
GIT = shutil.which("git") or "/usr/bin/git"


def _ms(start: float) -> float:
    return (time.perf_counter() - start) * 1000


def build(root: Path, files: int) -> None:
    for i in range(files):
        directory = root / f"d{i // PER_DIR:04d}"
        if i % PER_DIR == 0:
            directory.mkdir(parents=True, exist_ok=True)
        (directory / f"f{i:05d}.txt").write_text(f"file {i}\n" + "x" * 1000 + "\n")


def _fast_tree(snap: Any, files: int) -> str:
    """``files`` files of 1 KB (as ``build`` writes them) straight into ``snap``'s store by
    one ``git fast-import``: the tree's id. No worktree: the host that replicated it is gone."""
    snap.ensure()
    chunks = []
    for i in range(files):
        data = (f"file {i}\n" + "x" * 1000 + "\n").encode()
        chunks.append(b"blob\nmark :%d\ndata %d\n%s\n" % (i + 1, len(data), data))
    chunks.append(b"commit refs/heads/bench\ncommitter b <b@example.invalid> 0 +0000\ndata 0\n")
    for i in range(files):
        chunks.append(b"M 100644 :%d d%04d/f%05d.txt\n" % (i + 1, i // PER_DIR, i))
    git = [GIT, "--git-dir", str(snap.git_dir)]
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "GIT_CONFIG_NOSYSTEM": "1"}
    subprocess.run([*git, "fast-import", "--quiet"], input=b"".join(chunks), env=env, check=True)
    out = subprocess.run([*git, "rev-parse", "refs/heads/bench^{tree}"], env=env, check=True,
                         capture_output=True, text=True)  # fmt: skip
    return out.stdout.strip()


def _layers_on() -> str:
    """The settings under which the shell writes into layers (what linking needs); '' when
    this host has them, else why not."""
    from django.conf import settings

    from workspace import sandbox

    settings.AGENT_SHELL_SANDBOX = "bwrap"
    settings.AGENT_SHELL_OVERLAY = "auto"
    return sandbox.overlay_reason(Path(settings.WORKSPACE_ROOT))


def _host_snap(root: Path, sid: str) -> Any:
    from workspace.snapshots import Snapshots

    return Snapshots(
        git_dir=root / ".snapshots" / f"{sid}.git",
        worktree=root / sid,
        objects=root / ".snapshots" / "objects",
    )


def _rehome(root: Path, sid: str, tree: str) -> dict[str, float]:
    """One re-home of ``sid`` on the host of ``root`` (its settings pointed there): the fetch,
    the materialisation and the files linked."""
    from workspace import linked_rehome, replication

    snap = _host_snap(root, sid)
    start = time.perf_counter()
    snap.ensure()
    replication.fetch(snap, sid)
    fetched = _ms(start)
    snap.worktree.mkdir(parents=True, exist_ok=True)
    second = time.perf_counter()
    linked = linked_rehome.materialize(snap, tree)
    return {"fetch_ms": fetched, "materialize_ms": _ms(second), "linked": linked}


def _floor(args: list[str], env: dict[str, str] | None = None) -> float:
    start = time.perf_counter()
    subprocess.run(args, check=True, env=env, capture_output=True)
    return _ms(start)


def rehome(tmp: Path, server: Any, quick: bool) -> dict[str, Any]:
    """The re-home measurements (see the module); ``server``: the central store's server."""
    from django.conf import settings

    from workspace import replication
    from workspace.snapshots import Snapshots

    files = FILES_QUICK if quick else FILES
    reps = 1  # each is seconds: the floors beside it say what a sample is worth
    source = Snapshots(git_dir=tmp / "home-a.git", worktree=tmp / "home-a")
    started = time.perf_counter()
    tree = _fast_tree(source, files)
    track_ms = _ms(started)
    started = time.perf_counter()
    commit = replication.push(source, "rehome-1", tree, "")
    push_ms = _ms(started)
    replication.push(source, "rehome-2", tree, "")  # a second session of the same tree
    # The floor's repository: the same commit as its one branch, for a plain clone.
    git_env = server.git_env(tmp / "git-home")
    server.make_repo("floor", {"README": "floor\n"})
    push = [GIT, *server.auth_args(), "--git-dir", str(source.git_dir), "push", "-q"]
    subprocess.run([*push, server.url("floor"), f"{commit}:refs/heads/tree"], check=True,
                   env=git_env, capture_output=True)  # fmt: skip
    saved_root = settings.WORKSPACE_ROOT
    rows: dict[str, list[float]] = {k: [] for k in (
        "fetch", "checkout", "rehome", "clone", "cp", "linked_fetch", "linked", "linked_rehome",
        "cp_al")}  # fmt: skip
    layers_reason = ""
    linked_files = 0
    try:
        for rep in range(reps):
            host = tmp / f"host-b-{rep}"
            host.mkdir()
            settings.WORKSPACE_ROOT = str(host)
            layers_reason = _layers_on()
            cold = _rehome(host, "rehome-1", tree)
            rows["fetch"].append(cold["fetch_ms"])
            rows["checkout"].append(cold["materialize_ms"])
            rows["rehome"].append(cold["fetch_ms"] + cold["materialize_ms"])
            warm = _rehome(host, "rehome-2", tree)
            linked_files = int(warm["linked"])
            rows["linked_fetch"].append(warm["fetch_ms"])
            rows["linked"].append(warm["materialize_ms"])
            rows["linked_rehome"].append(warm["fetch_ms"] + warm["materialize_ms"])
            clone = [GIT, *server.auth_args(), "clone", "-q", "--single-branch", "-b", "tree"]
            rows["clone"].append(_floor([*clone, server.url("floor"), str(host / "clone")],
                                        git_env))  # fmt: skip
            materialised = str(host / "rehome-1")
            rows["cp"].append(_floor(["cp", "-a", materialised, str(host / "cp")]))
            rows["cp_al"].append(_floor(["cp", "-al", materialised, str(host / "cpl")]))
    finally:
        settings.WORKSPACE_ROOT = saved_root
    result: dict[str, Any] = {
        "files": files,
        "reps": reps,
        "fast_import_ms": track_ms,
        "first_push_ms": push_ms,
        "layers": layers_reason or "yes",
        "linked_files": linked_files,
    }
    result.update({f"{k}_ms": statistics.median(v) for k, v in rows.items()})
    return result


def _mirror_module() -> Any:
    try:
        return importlib.import_module("workspace.mirror")
    except ImportError:
        return None


def _timed(reads: int, read: Any) -> float:
    """The median of ``reads`` calls of ``read``, in ms."""
    samples = []
    for _ in range(reads):
        start = time.perf_counter()
        read()
        samples.append(_ms(start))
    return statistics.median(samples)


def mirror_read(tmp: Path, server: Any) -> dict[str, Any]:
    """A file read from the mirror vs local disk (see the module), on a session of 100 files
    replicated to the central store."""
    from django.conf import settings

    from workspace import replication
    from workspace.snapshots import Snapshots

    source = Snapshots(git_dir=tmp / "read-a.git", worktree=tmp / "read-a")
    build(source.worktree, 100)
    path = "d0000/f00042.txt"
    tree = source.track()
    commit = replication.push(source, "reader", tree, "")
    mirror = _mirror_module()
    settings.MIRROR_ROOT = str(tmp / "mirror")
    if mirror is not None:
        store = mirror.ensure(["reader"], [tree])

        def from_mirror(t: str) -> bytes | None:
            return mirror.ensure(["reader"], [t]).read_blob(t, path)
    else:
        store = Snapshots(git_dir=tmp / "mirror" / "store.git", worktree=tmp / "mirror" / "e")
        store.ensure()
        replication.fetch(store, "reader", keep=True)

        def from_mirror(t: str) -> bytes | None:
            return store.read_blob(t, path)

    assert from_mirror(tree) == (source.worktree / path).read_bytes()
    local = source.worktree / path
    out: dict[str, Any] = {
        "mirror_module": mirror is not None,
        "reads": READS,
        "disk_ms": _timed(READS, local.read_bytes),
        "own_store_ms": _timed(READS, lambda: source.read_blob(tree, path)),
        "mirror_warm_ms": _timed(READS, lambda: from_mirror(tree)),
    }
    after_step = []
    for step in range(STEP_READS):
        local.write_text(f"step {step}\n")
        tree = source.track()
        commit = replication.push(source, "reader", tree, commit)
        start = time.perf_counter()
        if mirror is None:
            replication.fetch(store, "reader", keep=True)
        got = from_mirror(tree)
        after_step.append(_ms(start))
        assert got == f"step {step}\n".encode()
    out["mirror_after_step_ms"] = statistics.median(after_step)
    return out
