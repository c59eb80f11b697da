"""The worktree's files as the snapshots handle them by path, without git, never following a
link: the size of a regular file (``regular_size``), a file that makes git take a directory
as one (``first_file``), and the writes of ``Snapshots.checkout`` (``write_file``,
``remove_file``).

A checkout writes each file whole from its blob: whatever stands at its path (a link, a
directory, a file where a directory must be) is removed first, and a deleted file takes its
emptied directories with it, so the cost follows the files written, not the size of the
worktree. (The API's reads and writes of worktree files, which race the agent, open them by
descriptor instead: ``worktree_files``.)
"""

from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from .git_names import git_refuses


def regular_size(path: Path) -> int:
    """The size of the regular file at ``path`` (a link is not followed); -1 for anything
    else, or nothing."""
    try:
        info = os.lstat(path)
    except OSError:
        return -1
    return info.st_size if stat.S_ISREG(info.st_mode) else -1


def present(worktree: Path, relative: str, known: dict[str, bool]) -> bool:
    """Whether ``relative`` names an entry of ``worktree`` reached through directories alone
    (beneath a link, git sees nothing either). ``known``: the directories found so far, a
    cache for the next call (``{"": True}`` to start)."""
    parent = relative.rpartition("/")[0]
    return real_dir(worktree, parent, known) and os.path.lexists(worktree / relative)


def real_dir(root: Path, relative: str, known: dict[str, bool]) -> bool:
    """Whether ``root / relative`` is a directory reached through directories alone (no link
    is followed to look beneath it)."""
    if relative not in known:
        parent = relative.rpartition("/")[0]
        if real_dir(root, parent, known):
            try:
                known[relative] = stat.S_ISDIR(os.lstat(root / relative).st_mode)
            except OSError:
                known[relative] = False
        else:
            known[relative] = False
    return known[relative]


def first_file(worktree: Path, directory: str) -> str | None:
    """A file (or link) of ``directory``, outside any ``.git``: the worktree path that makes
    git take the directory as one. Found without following a link."""
    pending = [directory]
    while pending:
        current = pending.pop()
        try:
            entries = sorted(os.scandir(worktree / current), key=lambda e: e.name)
        except OSError:  # gone, or a link now: nothing to take from it
            continue
        for entry in entries:
            name = f"{current}/{entry.name}"
            if git_refuses(name):
                continue  # ``.git`` itself among them
            if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                return name
            if entry.is_dir(follow_symlinks=False):
                pending.append(name)
    return None


def write_file(worktree: Path, name: str, mode: str, body: bytes) -> None:
    """Write ``name`` as a blob of ``mode`` (``100644``, ``100755`` or ``120000``, a link)."""
    path = worktree / name
    for parent in reversed(path.relative_to(worktree).parents):
        step = worktree / parent
        if step.is_symlink() or (step.exists() and not step.is_dir()):
            step.unlink()  # a file or link stands where a directory must be
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.is_dir():
        shutil.rmtree(path)
    if mode == "120000":
        os.symlink(os.fsdecode(body), path)
        return
    path.write_bytes(body)
    os.chmod(path, 0o755 if mode == "100755" else 0o644)


def remove_file(worktree: Path, name: str) -> None:
    """Delete the file (or link) ``name``, if there is one, and the directories it leaves
    empty (up to the worktree)."""
    path = worktree / name
    if path.is_symlink() or path.is_file():
        path.unlink()
        _prune_empty_dirs(worktree, path.parent)


def _prune_empty_dirs(worktree: Path, directory: Path) -> None:
    root = worktree.resolve()
    while directory.resolve() != root and directory.is_dir() and not any(directory.iterdir()):
        directory.rmdir()
        directory = directory.parent
