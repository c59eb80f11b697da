"""A worktree's size as its limits count it (``worktree_usage``: bytes and entries), kept
beside its journal (``change_journal.home``) and moved by each writer by what it added, so a
shell command or a file tool checks its bound without a walk of the whole worktree (issue
43: the walk cost a run in a 40,000-file worktree 8.7 times what it cost in a small one).

A command over a layer adds what its layer adds (``layers.Layer.usage``), a file tool the
bytes and entries it wrote. A writer that cannot say what it added (a checkout of a history
move, a fork) ``forget``s the figure: the next reader walks once and keeps it again, as does
a command that wrote in place (no layer), which is walked after anyway. The figure names the
worktree it was made for (its device and inode), so one made anew under the same name walks.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

from .change_journal import home, identity
from .worktree_usage import worktree_usage

USAGE = "usage"


def known(worktree: Path) -> tuple[int, int]:
    """The worktree's (bytes, entries): the kept figure, or a walk that keeps it."""
    kept = read(worktree)
    if kept is None:
        kept = worktree_usage(worktree)
        write(worktree, kept)
    return kept


def read(worktree: Path) -> tuple[int, int] | None:
    try:
        size, entries, made_for = (home(worktree) / USAGE).read_text().split()
        if made_for != identity(worktree):
            return None
        return int(size), int(entries)
    except (OSError, ValueError):
        return None


def write(worktree: Path, usage: tuple[int, int]) -> None:
    folder = home(worktree)
    with contextlib.suppress(OSError):
        folder.mkdir(parents=True, exist_ok=True)
        scratch = folder / f".{USAGE}.{os.getpid()}"
        scratch.write_text(f"{usage[0]} {usage[1]} {identity(worktree)}")
        os.replace(scratch, folder / USAGE)


def add(worktree: Path, size: int, entries: int) -> None:
    """A writer added ``size`` bytes and ``entries`` entries (either may be negative)."""
    if not (size or entries):
        return
    with _locked(worktree):
        kept = read(worktree)
        if kept is not None:
            write(worktree, (max(0, kept[0] + size), max(0, kept[1] + entries)))


def forget(worktree: Path) -> None:
    """The next reader walks (a writer that cannot say what it added)."""
    with contextlib.suppress(OSError):
        os.unlink(home(worktree) / USAGE)


@contextlib.contextmanager
def _locked(worktree: Path):  # noqa: ANN202 - a context manager
    """One writer of the figure at a time (tool calls of one step may run side by side)."""
    try:
        fd = os.open(home(worktree) / f"{USAGE}.lock", os.O_WRONLY | os.O_CREAT | os.O_CLOEXEC)
    except OSError:
        yield
        return
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)
