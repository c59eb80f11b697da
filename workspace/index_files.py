"""A session's index as files on disk, read and claimed without running git.

* ``holding_index``: one writer of the index at a time, whatever the process or thread: an
  exclusive ``flock`` on ``index.writer``, held for a whole ``track`` and by the git
  processes it starts (``writer_fd``), so a git left running by a killed worker holds it too.
* ``claim_index``: who may write the index (``index.owner`` beside git's ``index.lock``), and
  when a lock left by a dead writer may be removed.
* ``shared_indexes``: the shared parts of a split index (``core.splitIndex``), which git
  keeps in the git dir, a scratch index's too.
* ``may_hold_gitlinks``: a scan of the index's bytes that tells, with no git process, that an
  index holds no gitlink (``snapshot_add._drop_gitlinks`` then asks git for nothing).
* ``written_as`` / ``remember_tree``: the tree id this process's last ``write-tree`` gave for
  the index, while the index holds the same bytes (``Snapshots._track`` then starts no
  ``write-tree`` for an unchanged worktree: one git process fewer for each run's start).
"""

from __future__ import annotations

import contextlib
import fcntl
import hashlib
import os
import socket
import struct
import threading
import time
from collections import OrderedDict
from collections.abc import Iterator
from pathlib import Path

SHARED_INDEX = "sharedindex."
TREES_KEPT = 4096  # git dirs whose index's tree this process remembers (the oldest forgotten)
# 0o160000 (a gitlink, a submodule's entry) as an index entry stores its mode: 32 bits, big-end.
GITLINK_MODE = (0o160000).to_bytes(4, "big")


_held = threading.local()  # .fds: {git dir: the fd of its ``index.writer`` this thread holds}


@contextlib.contextmanager
def holding_index(git_dir: Path, wait: float) -> Iterator[bool]:
    """Hold the index of ``git_dir`` for writing, waiting at most ``wait`` seconds: True when
    held. The session's index has writers that may overlap: a step's snapshot still running
    in the thread of a run that was cancelled when the next run starts, a worker that was
    stopped past its lease and goes on. Two ``git add`` on one index fail on each other's
    ``index.lock`` or, worse, one removes the other's lock as stale and the index is written
    twice at once. The lock is the kernel's (``flock``): a writer that dies lets go of it, and
    nothing in the worktree can hold it. Re-entrant within a thread."""
    fds = _held.__dict__.setdefault("fds", {})
    key = str(git_dir)
    if key in fds:
        yield True
        return
    fd = os.open(git_dir / "index.writer", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
    try:
        if not _lock_within(fd, wait):
            yield False
            return
        fds[key] = fd
        try:
            yield True
        finally:
            del fds[key]
    finally:
        os.close(fd)  # the lock goes with the last descriptor of it (a git still running keeps it)


def _lock_within(fd: int, wait: float) -> bool:
    deadline = time.monotonic() + wait
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return True
        except BlockingIOError:
            if time.monotonic() >= deadline:
                return False
        time.sleep(0.02)


def writer_fd(git_dir: Path) -> int | None:
    """The descriptor of the index lock this thread holds for ``git_dir``, for the git
    processes it starts to inherit: a git that outlives its worker (SIGKILLed mid-``add``)
    keeps the index held until it ends."""
    return getattr(_held, "fds", {}).get(str(git_dir))


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
    try:
        if owner.read_text() == me:
            return True  # ours already (the last snapshot's): no write, no page to flush
    except FileNotFoundError:
        pass
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


_trees: OrderedDict[str, tuple[bytes, str]] = OrderedDict()
_trees_lock = threading.Lock()


def _identity(index: Path) -> bytes | None:
    """The digest of ``index``'s bytes, or None when there is none. The tree is a function of
    them (the entries, and the shared part of a split index by its id): no file system's
    timestamps or inode numbers are trusted for it (a worktree root on NFS). The index that
    a snapshot rewrites is the split index's small part, so this reads kilobytes."""
    try:
        data = index.read_bytes()
    except OSError:
        return None
    return hashlib.blake2b(data, digest_size=20).digest()


def remember_tree(git_dir: Path, tree: str) -> None:
    """``git write-tree`` has just given ``tree`` for the index of ``git_dir`` (held by the
    caller: ``holding_index``), and left the index as it now is."""
    identity = _identity(git_dir / "index")
    with _trees_lock:
        _trees.pop(str(git_dir), None)
        if identity is not None:
            _trees[str(git_dir)] = (identity, tree)
            while len(_trees) > TREES_KEPT:
                _trees.popitem(last=False)


def written_as(git_dir: Path) -> str | None:
    """The tree of the index of ``git_dir`` when the index holds what it held when a
    ``write-tree`` of this process gave that tree (the same bytes: ``write-tree`` would give
    the same id). None otherwise."""
    identity = _identity(git_dir / "index")
    with _trees_lock:
        known = _trees.get(str(git_dir))
    if identity is None or known is None or known[0] != identity:
        return None
    return known[1]


def staged_entries(index: Path) -> dict[str, tuple[str, str]]:
    """``{path: (mode, id)}`` of the stage-0 entries of the index file ``index`` (versions 2
    to 4, not split), read without git: what ``ls-files --stage`` would print of a small
    scratch index, one git process fewer for each snapshot from the journal. {} for none."""
    try:
        data = index.read_bytes()
    except FileNotFoundError:
        return {}
    if data[:4] != b"DIRC":
        raise ValueError("not an index file")
    version, count = struct.unpack(">II", data[4:12])
    found: dict[str, tuple[str, str]] = {}
    pos, previous = 12, b""
    for _ in range(count):
        mode = struct.unpack(">I", data[pos + 24 : pos + 28])[0]
        sha = data[pos + 40 : pos + 60].hex()
        flags = struct.unpack(">H", data[pos + 60 : pos + 62])[0]
        start = pos + 62 + (2 if version >= 3 and flags & 0x4000 else 0)
        if version >= 4:
            strip, start = _varint(data, start)
            end = data.index(b"\0", start)
            name = previous[: len(previous) - strip] + data[start:end]
            pos = end + 1
        else:
            end = data.index(b"\0", start)
            name = data[start:end]
            pos += (end - pos + 8) // 8 * 8  # the entry, NUL-padded to a multiple of 8
        previous = name
        if (flags >> 12) & 3 == 0:
            found[name.decode("utf-8", "surrogateescape")] = (f"{mode:o}", sha)
    return found


def _varint(data: bytes, pos: int) -> tuple[int, int]:
    """Git's offset varint (index v4's path prefix): the value and the position after it."""
    byte = data[pos]
    value, pos = byte & 127, pos + 1
    while byte & 128:
        byte = data[pos]
        value, pos = ((value + 1) << 7) | (byte & 127), pos + 1
    return value, pos
