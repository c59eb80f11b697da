"""A session's index as files on disk, read and claimed without running git.

* ``claim_index``: who may write the index (``index.owner`` beside git's ``index.lock``), and
  when a lock left by a dead writer may be removed.
* ``shared_indexes``: the shared parts of a split index (``core.splitIndex``), which git
  keeps in the git dir, a scratch index's too.
* ``may_hold_gitlinks``: a scan of the index's bytes that tells, with no git process, that an
  index holds no gitlink (``Snapshots._drop_gitlinks`` then asks git for nothing).
"""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

SHARED_INDEX = "sharedindex."
# 0o160000 (a gitlink, a submodule's entry) as an index entry stores its mode: 32 bits, big-end.
GITLINK_MODE = (0o160000).to_bytes(4, "big")


def claim_index(git_dir: Path, stale_after: float = 30.0) -> bool:
    """Make the index of ``git_dir`` ours for a ``track``: ``index.owner`` names this process
    (host and pid). An ``index.lock`` left by a git that died mid-write (its worker
    SIGKILLed) would fail every snapshot from then on, so it is removed — but only when its
    owner is known dead: a process of this host that is gone, this process itself (a git it
    killed on a timeout), or no owner on record and older than ``stale_after`` (left before
    owners were recorded). A lock whose owner may be alive (stopped, or on another host) is
    never removed: False, and the caller snapshots in a scratch index."""
    lock = git_dir / "index.lock"
    owner = git_dir / "index.owner"
    me = f"{socket.gethostname()} {os.getpid()}"
    for _ in range(10):
        try:
            age = time.time() - lock.stat().st_mtime
        except FileNotFoundError:
            break
        try:
            holder = owner.read_text().strip()
        except FileNotFoundError:
            holder = ""
        if holder == me or (holder and _dead(holder)) or (not holder and age > stale_after):
            lock.unlink(missing_ok=True)
            break
        time.sleep(0.1)
    else:
        return False
    owner.write_text(me)
    return True


def _dead(holder: str) -> bool:
    """Whether the process ``holder`` ("host pid", from ``index.owner``) is known gone: only
    a process of this host can be known so."""
    host, _, pid = holder.partition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


def shared_indexes(git_dir: Path) -> list[Path]:
    """The shared parts of split indexes in ``git_dir``."""
    try:
        return [Path(e.path) for e in os.scandir(git_dir) if e.name.startswith(SHARED_INDEX)]
    except FileNotFoundError:
        return []


def may_hold_gitlinks(index: Path, git_dir: Path) -> bool:
    """Whether the index file ``index`` may hold a gitlink: a gitlink's mode bytes are in it
    or in a shared part in ``git_dir`` (each shared part read once per process: it is never
    rewritten, its name is its content's id). False when there is no index."""
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        return False
    return GITLINK_MODE in data or any(
        _has_gitlink_bytes(shared) for shared in shared_indexes(git_dir)
    )


_GITLINK_SEEN: dict[tuple[str, int, int], bool] = {}


def _has_gitlink_bytes(path: Path) -> bool:
    """Whether a shared index part may hold a gitlink (its mode bytes are in it)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _GITLINK_SEEN:
        try:
            _GITLINK_SEEN[key] = GITLINK_MODE in path.read_bytes()
        except FileNotFoundError:
            return False
        if len(_GITLINK_SEEN) > 256:
            _GITLINK_SEEN.pop(next(iter(_GITLINK_SEEN)))
    return _GITLINK_SEEN[key]
