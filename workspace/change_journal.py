"""What changed in a worktree since its last snapshot, as the writers that changed it say so
(issue 43: snapshots without a walk).

Every writer of a worktree knows what it wrote: a shell command's layer is its exact change
set (``layers.Merged.changed``), the file tools write one path, a checkout its files. Each
appends those paths here, and ``Snapshots.track`` gives git's index those paths alone
(``journal_track``) instead of a walk of every file: a step that changes 10 files
of 50,000 costs what 10 files cost.

The journal of a worktree is ``<WORKSPACE_ROOT>/.journals/<worktree name>/paths``, outside
every worktree (no command sees it): appended to, never rewritten in place, each record a
path and a NUL (started anew only once taken whole, past ``REWRITE_BYTES``). How far the
snapshots took it is kept in the session's git dir (``journal``, with the worktree's inode
and the last walk's time), so a git dir made anew trusts nothing of an old journal. It is
trusted only once a walk made it (``walked``); a record of ``WALK`` (``forget``: a writer that
cannot say what it changed, a command that wrote in place), a path inside a nested ``.git``
(a repository in the worktree, taken apart only by the walk; the worktree's own ``.git`` is
never snapshotted and is left out), a ``.gitignore`` (what it lets in may be files no writer
touched), more than ``MAX_PATHS`` paths or ``MAX_BYTES`` of them send the next snapshot
through the walk again.

A writer that wrote without a record would go unseen by the snapshots until the verifier's
walk (``verify``: an idle session's worktree walked at most once per ``VERIFY_SECONDS``)
finds it and records it as a step of its own. Appends are ``O_APPEND`` writes, one per
writer's batch; ``track`` takes what was there when it read (whole records only) and
records how far, so a record appended meanwhile is taken by the next one.
"""

from __future__ import annotations

import contextlib
import os
import time
from dataclasses import dataclass
from pathlib import Path

JOURNALS = ".journals"
WALK = "/"  # a record no worktree path can be: the next snapshot walks
MAX_PATHS = 2_000  # more paths than this: the walk costs less than git's pathspec matching
MAX_BYTES = 128 * 1024  # and no more bytes of them (some git commands take them as arguments)
REWRITE_BYTES = 1 << 20  # a walk starts the journal anew once it holds this much
VERIFY_SECONDS = 600  # the verifier walks an idle session's worktree at most this often
STATE = "journal"  # in the git dir: how far its index took the journal (and the walk's time)


def home(worktree: Path) -> Path:
    """The folder of ``worktree``'s journal (and of its kept usage, ``kept_usage``)."""
    return worktree.parent / JOURNALS / worktree.name


@dataclass(frozen=True)
class Pending:
    """What the journal holds past what the index took: ``paths`` (None: walk), and the
    offset up to which they were read."""

    paths: list[str] | None
    end: int


def record(worktree: Path, paths: list[str]) -> None:
    """Say that ``paths`` (relative to ``worktree``) changed. A worktree with no journal
    walks at its next snapshot anyway: nothing is written for it."""
    if not paths:
        return
    data = b"".join(os.fsencode(p) + b"\0" for p in paths)
    try:
        fd = os.open(home(worktree) / "paths", os.O_WRONLY | os.O_APPEND | os.O_CLOEXEC)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        os.write(fd, data)  # one write: whole records, never mixed with another writer's
    finally:
        os.close(fd)


def forget(worktree: Path) -> None:
    """The next snapshot walks: a writer that cannot say what it changed."""
    record(worktree, [WALK])


def pending(worktree: Path, git_dir: Path) -> Pending:
    """The paths written since the index of ``git_dir`` last took the journal."""
    taken = _state(worktree, git_dir)
    try:
        with open(home(worktree) / "paths", "rb") as fh:
            fh.seek(taken or 0)
            data = fh.read()
    except (FileNotFoundError, NotADirectoryError):
        return Pending(None, 0)
    if taken is None:
        return Pending(None, 0)
    whole = data.rfind(b"\0") + 1  # a record still being written waits for the next one
    end = taken + whole
    found = {os.fsdecode(p) for p in data[:whole].split(b"\0") if p}
    # The worktree's own .git (a cloned repository's, the agent's git commands): never in a
    # snapshot, so nothing to take; a .git deeper down is a nested repository (below).
    found = {p for p in found if p != ".git" and not p.startswith(".git/")}
    if WALK in found or len(found) > MAX_PATHS or whole > MAX_BYTES:
        return Pending(None, end)
    if any(_in_git_dir(p) or p.rpartition("/")[2] == ".gitignore" for p in found):
        # A nested repository is taken apart by the walk; a changed .gitignore may let in
        # (or leave out) files no writer touched.
        return Pending(None, end)
    return Pending(_outermost(found), end)


def size(worktree: Path) -> int:
    """The journal's length now (a walk that starts now takes everything before it)."""
    try:
        return os.stat(home(worktree) / "paths").st_size
    except OSError:
        return 0


def took(worktree: Path, git_dir: Path, end: int) -> None:
    """The snapshots took the journal up to ``end``; all of it, past ``REWRITE_BYTES``: it
    starts anew (a long run that never walks does not grow it without end)."""
    journal = home(worktree) / "paths"
    if end >= REWRITE_BYTES and size(worktree) == end:
        _write(journal, "")
        end = 0
    _write(git_dir / STATE, f"{end} {identity(worktree)} {last_walk(git_dir)}")


def walked(worktree: Path, git_dir: Path, start: int) -> None:
    """A walk made the index whole as of when the journal was ``start`` long: the journal
    is trusted from there (what was appended during the walk is taken again next time)."""
    folder = home(worktree)
    folder.mkdir(parents=True, exist_ok=True)
    journal = folder / "paths"
    try:
        length = os.stat(journal).st_size
    except FileNotFoundError:
        length = -1
    if length < 0 or (length == start and length >= REWRITE_BYTES):
        _write(journal, "")
        start = 0
    _write(git_dir / STATE, f"{start} {identity(worktree)} {time.time()}")


def last_walk(git_dir: Path) -> float:
    """When the last walk made the index of ``git_dir`` whole (0: never)."""
    try:
        return float((git_dir / STATE).read_text().split()[2])
    except (OSError, ValueError, IndexError):
        return 0.0


def remove(worktree: Path) -> None:
    """The journal of a worktree that is gone."""
    folder = home(worktree)
    for name in ("paths", "usage", "usage.lock"):
        with contextlib.suppress(FileNotFoundError):
            os.unlink(folder / name)
    with contextlib.suppress(OSError):
        folder.rmdir()


def _state(worktree: Path, git_dir: Path) -> int | None:
    """How far the index took the journal; None: it is not to be trusted (no walk made it,
    or the worktree is another one than the walk's, made anew under the same name)."""
    try:
        taken, made_for, _ = (git_dir / STATE).read_text().split()
        return int(taken) if made_for == identity(worktree) else None
    except (OSError, ValueError):
        return None


def identity(worktree: Path) -> str:
    """The worktree directory's device and inode: a worktree made anew is another one."""
    try:
        info = os.stat(worktree)
    except OSError:
        return "-"
    return f"{info.st_dev}:{info.st_ino}"


def _write(path: Path, text: str) -> None:
    scratch = path.with_name(f".{path.name}.{os.getpid()}")
    scratch.write_text(text)
    os.replace(scratch, path)


def _in_git_dir(path: str) -> bool:
    return any(part.lower() == ".git" for part in path.split("/"))


def _outermost(paths: set[str]) -> list[str]:
    """``paths`` without those beneath another of them (a directory taken whole)."""
    kept: list[str] = []
    for path in sorted(paths, key=lambda p: p.split("/")):
        if kept and path.startswith(kept[-1] + "/"):
            continue
        kept.append(path)
    return kept
