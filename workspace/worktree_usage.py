"""What a worktree holds, counted as its limits count it (``WORKTREE_MAX_BYTES``,
``WORKTREE_MAX_ENTRIES``): every entry beneath it, links never followed, unreadable
directories skipped."""

from __future__ import annotations

import os
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
    total = count = 0
    for _, entry in walk(root):
        count += 1
        try:
            if not entry.is_dir(follow_symlinks=False):
                total += entry.stat(follow_symlinks=False).st_size
        except OSError:
            continue
    return total, count


def worktree_bytes(root: Path) -> int:
    """Bytes the worktree's files take (as ``ls -l`` counts them; links not followed)."""
    return worktree_usage(root)[0]
