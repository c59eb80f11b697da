"""What a worktree holds, counted as its limits count it (``WORKTREE_MAX_BYTES``,
``WORKTREE_MAX_ENTRIES``): every entry beneath it, links never followed, unreadable
directories skipped."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path


def walk(root: Path) -> Iterator[tuple[str, os.DirEntry]]:
    """Every entry beneath ``root`` (path relative to it, entry), links never followed."""
    stack = [""]
    while stack:
        relative = stack.pop()
        try:
            with os.scandir(os.path.join(root, relative)) as entries:
                for entry in entries:
                    name = os.path.join(relative, entry.name)
                    try:
                        if entry.is_dir(follow_symlinks=False):
                            stack.append(name)
                    except OSError:
                        continue
                    yield name, entry
        except OSError:
            continue


def worktree_usage(root: Path) -> tuple[int, int]:
    """(bytes of the worktree's files as ``ls -l`` counts them, entries: files, directories,
    links and others, each an inode and a directory slot)."""
    total, count, _ = usage(root)
    return total, count


def usage(root: Path) -> tuple[int, int, list[str]]:
    """``worktree_usage``, and the special files found on the way (FIFOs, sockets, devices:
    neither a file, a directory nor a link), told by the directory entry's type alone: no
    special file is ever opened or stat'ed through."""
    total = count = 0
    special: list[str] = []
    for name, entry in walk(root):
        count += 1
        try:
            if entry.is_dir(follow_symlinks=False):
                continue
            if not (entry.is_file(follow_symlinks=False) or entry.is_symlink()):
                special.append(name)
                continue
            total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total, count, special


def remove_special(root: Path, names: list[str]) -> list[str]:
    """Unlink the special files ``names`` (relative to ``root``) that still are special files
    (an unlink never opens one); the names removed."""
    removed = []
    for name in names:
        path = os.path.join(root, name)
        try:
            mode = os.lstat(path).st_mode
            if not (stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode)):
                os.unlink(path)
                removed.append(name)
        except OSError:
            continue
    return removed


def worktree_bytes(root: Path) -> int:
    """Bytes the worktree's files take (as ``ls -l`` counts them; links not followed)."""
    return worktree_usage(root)[0]


def own_copies(root: Path) -> int:
    """Give every regular file beneath ``root`` that has another name (a hard link: a fork's
    file shared with its source) a copy of its own, renamed over it: for a command that
    writes into the worktree in place (no overlay layer, ``layers``). The files copied."""
    copied = 0
    for name, entry in walk(root):
        try:
            info = entry.stat(follow_symlinks=False)
        except OSError:
            continue
        if not stat.S_ISREG(info.st_mode) or info.st_nlink < 2:
            continue
        path = os.path.join(root, name)
        scratch = f"{path}.agentplat-own"
        try:
            shutil.copy2(path, scratch, follow_symlinks=False)
            os.replace(scratch, path)
            copied += 1
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(scratch)
    return copied


def open_up(root: Path) -> None:
    """Give the owner (the server: the command ran as its user) every right on every
    directory beneath ``root`` again: a command may leave one it cannot list or write
    (``chmod 0``), which nothing could then delete nor restore. Only once the command's
    processes are gone: no link can be swapped in meanwhile (and none is followed)."""
    stack = [str(root)]
    while stack:
        path = stack.pop()
        try:
            mode = os.lstat(path).st_mode
            if stat.S_ISDIR(mode) and mode & 0o700 != 0o700:
                os.chmod(path, stat.S_IMODE(mode) | 0o700)
            with os.scandir(path) as entries:
                stack.extend(e.path for e in entries if e.is_dir(follow_symlinks=False))
        except OSError:
            continue
