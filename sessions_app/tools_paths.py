"""Paths that clients (and the agent's tools) name inside a session worktree.

The kernel refuses a path component over ``NAME_MAX`` bytes and a path over ``PATH_MAX``
bytes with ENAMETOOLONG, an OSError that ``Path.is_dir()`` and friends do not swallow: such a
name reached the filesystem as a 500 (issue 12). They are refused here first, with a sentence,
so no caller has to know the errno."""

from __future__ import annotations

import os
from pathlib import Path

NAME_MAX = 255  # bytes in one path component (ext4, xfs, btrfs, tmpfs)
PATH_MAX = 4096  # bytes in a whole path, the terminating NUL included


def check_lengths(parts: tuple[str, ...] | list[str]) -> None:
    """ValueError when a component or the joined relative path is longer than the kernel
    takes."""
    for part in parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise ValueError(f"A path component is longer than {NAME_MAX} bytes.")
    if len(os.fsencode("/".join(parts))) >= PATH_MAX:
        raise ValueError(f"The path is longer than {PATH_MAX - 1} bytes.")


def plain_relative(path: str) -> str:
    """``path`` when it is a plain relative path (``a/b.txt``: no leading '/', no '.', '..'
    or empty segments, no NUL, within the kernel's lengths); ValueError otherwise. For
    arguments handed to git, which answers names outside the tree with an error, not a
    refusal of its own."""
    if not path or "\0" in path:
        raise ValueError("The path must be a non-empty relative path.")
    parts = path.split("/")
    if path.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise ValueError("The path must be relative, without '.', '..' or empty segments.")
    check_lengths(parts)
    return path


def resolve_inside(root: Path, relative: str) -> Path:
    """``relative`` under ``root``; ValueError for absolute paths, '..', over-long names or
    symlinks out."""
    relative = (
        (relative or "").strip().strip("/") if not os.path.isabs(relative or "") else relative
    )
    if os.path.isabs(relative):
        raise ValueError("Absolute paths are refused.")
    if "\0" in relative:
        raise ValueError("NUL is refused in paths.")
    parts = Path(relative).parts if relative else ()
    if ".." in parts:
        raise ValueError("'..' is refused in paths.")
    check_lengths(parts)
    base = root.resolve()
    target = base.joinpath(*parts)
    # The worktree's own prefix counts against PATH_MAX too.
    if len(os.fsencode(str(target))) >= PATH_MAX:
        raise ValueError(f"The path is longer than {PATH_MAX - 1} bytes.")
    real = Path(os.path.realpath(target))
    if real != base and base not in real.parents:
        raise ValueError("The path leads outside the worktree.")
    return target
