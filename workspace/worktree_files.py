"""Worktree files, opened by descriptor (docs/semantics.md §11.2).

Everything under a worktree is the agent's, and any name in it may be a link, a FIFO or a
socket, or become one between two system calls (``renameat2(RENAME_EXCHANGE)`` in the
sandbox swaps a file and a link atomically, as often as it likes). Checking a path and then
opening it by name loses that race: the open follows whatever is there by then. So no path
under a worktree reaches the kernel whole. Every function here walks it one component at a
time from the worktree's directory descriptor, each component opened relative to its parent's
descriptor with ``O_NOFOLLOW`` (a link, wherever it is, is refused, never followed) and the
leaf with ``O_NONBLOCK`` (a FIFO opens at once instead of waiting for a writer); what was
opened is then checked with ``fstat``: the check looks at what is read or written, not at what
a name meant a moment before. Directories are walked the same way, by descriptor.

The kernel refuses a path component over ``NAME_MAX`` bytes and a path over ``PATH_MAX``
bytes with ENAMETOOLONG, an OSError: such a name reached the filesystem as a 500 (issue 12).
They are refused here first, with a sentence, so no caller has to know the errno.

Errors: ``PathRefused`` (a ValueError) for a name that is not served, whatever is on disk;
``FileNotFoundError``, ``NotADirectoryError``, ``IsADirectoryError`` as the kernel gives
them."""

from __future__ import annotations

import contextlib
import errno
import os
import secrets
import stat
from pathlib import Path
from typing import Any

from . import change_journal, kept_usage

NAME_MAX = 255  # bytes in one path component (ext4, xfs, btrfs, tmpfs)
PATH_MAX = 4096  # bytes in a whole path, the terminating NUL included

# An intermediate component: a directory, never through a link.
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# A leaf: never through a link; O_NONBLOCK so that a FIFO opens without waiting for its other
# end (it is refused after fstat); O_NOCTTY so that a terminal never becomes ours.
_LEAF = os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
_LINK = "The path goes through a symbolic link; links are not followed."
_SPECIAL = "The path names a FIFO, socket or device, not a file."


class PathRefused(ValueError):
    """A path the worktree does not serve. ``reason``: ``name`` (NUL, over-long),
    ``absolute``, ``parent`` ('..'), ``link`` (a symlink on the way or at the end) or
    ``special`` (a FIFO, socket or device)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


def check_lengths(parts: tuple[str, ...] | list[str]) -> None:
    """ValueError when a component or the joined relative path is longer than the kernel
    takes."""
    for part in parts:
        if len(os.fsencode(part)) > NAME_MAX:
            raise PathRefused("name", f"A path component is longer than {NAME_MAX} bytes.")
    if len(os.fsencode("/".join(parts))) >= PATH_MAX:
        raise PathRefused("name", f"The path is longer than {PATH_MAX - 1} bytes.")


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


def parts_of(root: Path, relative: str) -> tuple[str, ...]:
    """The components of ``relative`` under ``root`` (empty and '.' segments dropped; ``()``
    is the worktree itself). PathRefused for NUL, an absolute path, '..', or a name longer
    than the kernel takes (the worktree's own prefix counted)."""
    if "\0" in relative:
        raise PathRefused("name", "NUL is refused in paths.")
    if os.path.isabs(relative):
        raise PathRefused("absolute", "Absolute paths are refused.")
    parts = tuple(p for p in relative.split("/") if p not in ("", "."))
    if ".." in parts:
        raise PathRefused("parent", "'..' is refused in paths.")
    check_lengths(parts)
    # Names are opened one by one, but git and the sandbox see the whole path.
    if parts and len(os.fsencode(str(root))) + 1 + len(os.fsencode("/".join(parts))) >= PATH_MAX:
        raise PathRefused("name", f"The path is longer than {PATH_MAX - 1} bytes.")
    return parts


# -- opening, one component at a time ---------------------------------------------------------
def _open_root(root: Path) -> int:
    # The worktree's own path is the server's (WORKSPACE_ROOT/…), not the agent's.
    return os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)


def _open_at(dir_fd: int, name: str, flags: int) -> int:
    try:
        return os.open(name, flags, 0o644, dir_fd=dir_fd)
    except OSError as exc:
        if exc.errno == errno.ELOOP:  # O_NOFOLLOW met a link
            raise PathRefused("link", _LINK) from exc
        if exc.errno == errno.ENXIO:  # a FIFO without a reader, a socket
            raise PathRefused("special", _SPECIAL) from exc
        if exc.errno == errno.ENOTDIR and _is_link(dir_fd, name):
            # O_DIRECTORY met a link (or a file: then it is just not a directory).
            raise PathRefused("link", _LINK) from exc
        raise


def _is_link(dir_fd: int, name: str) -> bool:
    """Only for the error's message: nothing is opened by it."""
    try:
        return stat.S_ISLNK(os.stat(name, dir_fd=dir_fd, follow_symlinks=False).st_mode)
    except OSError:
        return False


def open_dir(
    root: Path, parts: tuple[str, ...], *, create: bool = False, made: list[str] | None = None
) -> int:
    """A descriptor (the caller closes it) of the directory ``parts`` under ``root``, opened
    one component at a time from the worktree's, no link followed. ``create``: missing
    directories are made on the way (``mkdirat``), never through a link either; ``made``
    gets the names of those made."""
    fd = _open_root(root)
    try:
        for name in parts:
            if create:
                with contextlib.suppress(FileExistsError):
                    os.mkdir(name, 0o755, dir_fd=fd)
                    if made is not None:
                        made.append(name)
            child = _open_at(fd, name, _DIR)
            os.close(fd)
            fd = child
    except BaseException:
        os.close(fd)
        raise
    return fd


def open_entry(root: Path, parts: tuple[str, ...]) -> tuple[int, os.stat_result]:
    """``parts`` opened for reading, with its ``fstat``: a regular file or a directory (the
    caller closes the descriptor). PathRefused for a link on the way or at the end, and for a
    FIFO, socket or device (opened without blocking, refused after ``fstat``)."""
    if not parts:
        fd = _open_root(root)
    else:
        parent = open_dir(root, parts[:-1])
        try:
            fd = _open_at(parent, parts[-1], os.O_RDONLY | _LEAF)
        finally:
            os.close(parent)
    try:
        found = os.fstat(fd)
        if not (stat.S_ISREG(found.st_mode) or stat.S_ISDIR(found.st_mode)):
            raise PathRefused("special", _SPECIAL)
    except BaseException:
        os.close(fd)
        raise
    return fd, found


def read_link(root: Path, parts: tuple[str, ...]) -> str:
    """The target of the link ``parts`` (``readlinkat`` in its folder, opened as
    ``open_dir`` does: a link on the way is refused, never followed)."""
    parent = open_dir(root, parts[:-1])
    try:
        return os.readlink(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)


def read_file(root: Path, parts: tuple[str, ...], *, limit: int) -> tuple[int, bytes | None]:
    """The size of the regular file ``parts`` and its bytes (None when it holds more than
    ``limit``). IsADirectoryError for a directory."""
    fd, found = open_entry(root, parts)
    with os.fdopen(fd, "rb") as fh:
        if stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if found.st_size > limit:
            return found.st_size, None
        data = fh.read(limit + 1)
    return len(data), data if len(data) <= limit else None


def size_of(root: Path, parts: tuple[str, ...]) -> int:
    """The size of the regular file ``parts``; 0 when nothing is there yet (a file about to be
    written). IsADirectoryError for a directory, PathRefused as ``open_entry``."""
    try:
        fd, found = open_entry(root, parts)
    except (FileNotFoundError, NotADirectoryError):
        return 0
    os.close(fd)
    if stat.S_ISDIR(found.st_mode):
        raise IsADirectoryError(errno.EISDIR, "Is a directory")
    return found.st_size


def replace_file(root: Path, parts: tuple[str, ...], data: bytes, *, append: bool) -> None:
    """Write the regular file ``parts`` as a new file (issue 43: no write in place): ``data``
    (after the old content, with ``append``) into a new file beside it, renamed over it. A
    file the worktree shares with another by hard link (a fork's) is left as it was; the old
    file's mode is kept. Its missing parent directories are made; never through a link.
    The path goes to the worktree's journal, what it adds to its kept usage."""
    change_journal.record(root, ["/".join(parts)])
    made: list[str] = []
    parent = open_dir(root, parts[:-1], create=True, made=made)
    try:
        old, mode = b"", 0o644
        before: os.stat_result | None = None
        try:
            fd = _open_at(parent, parts[-1], os.O_RDONLY | _LEAF)
        except FileNotFoundError:
            fd = -1
        if fd >= 0:
            with os.fdopen(fd, "rb") as fh:
                found = os.fstat(fh.fileno())
                if stat.S_ISDIR(found.st_mode):
                    raise IsADirectoryError(errno.EISDIR, "Is a directory")
                if not stat.S_ISREG(found.st_mode):
                    raise PathRefused("special", _SPECIAL)
                mode = stat.S_IMODE(found.st_mode)
                old = fh.read() if append else b""
                before = found
        scratch = f".agentplat-{secrets.token_hex(8)}.tmp"  # short: any name's length fits
        new = os.open(scratch, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _LEAF, mode, dir_fd=parent)
        try:
            with os.fdopen(new, "wb") as fh:
                fh.write(old + data)
                os.fchmod(fh.fileno(), mode)
            os.rename(scratch, parts[-1], src_dir_fd=parent, dst_dir_fd=parent)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(scratch, dir_fd=parent)
            raise
    finally:
        os.close(parent)
    grown = len(old) + len(data) - (before.st_size if before else 0)
    kept_usage.add(root, grown, len(made) + (0 if before else 1))


def delete_file(root: Path, parts: tuple[str, ...]) -> None:
    """Unlink the regular file ``parts`` (``unlinkat`` in its parent's descriptor: what is
    removed is a name in the worktree, whatever it is by then). PathRefused for a link on the
    way or at the end, IsADirectoryError for a directory."""
    change_journal.record(root, ["/".join(parts)])
    parent = open_dir(root, parts[:-1])
    try:
        found = os.stat(parts[-1], dir_fd=parent, follow_symlinks=False)
        if stat.S_ISLNK(found.st_mode):
            raise PathRefused("link", _LINK)
        if stat.S_ISDIR(found.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        os.unlink(parts[-1], dir_fd=parent)
    finally:
        os.close(parent)
    kept_usage.add(root, -found.st_size, -1)


# -- listings ---------------------------------------------------------------------------------
def list_dir(root: Path, parts: tuple[str, ...]) -> list[tuple[str, bool]]:
    """``(name, is a directory)`` of each entry of the directory ``parts`` (``.git`` aside),
    sorted; a link is listed as the link it is. NotADirectoryError for a file."""
    fd, found = open_entry(root, parts)
    try:
        if not stat.S_ISDIR(found.st_mode):
            raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
        with os.scandir(fd) as entries:
            return sorted((entry.name, _is_dir(entry)) for entry in entries if entry.name != ".git")
    finally:
        os.close(fd)


def _is_dir(entry: os.DirEntry) -> bool:
    try:
        return entry.is_dir(follow_symlinks=False)
    except OSError:
        return False


def list_tree(
    root: Path, parts: tuple[str, ...], *, limit: int, opened: int | None = None
) -> list[dict[str, Any]]:
    """The files under the directory ``parts`` (``.git`` aside), each ``{"path", "size"}``
    sorted by path, at most ``limit`` of them. Walked depth first by descriptor, each
    subdirectory opened in its parent's with ``O_NOFOLLOW``: a directory swapped for a link
    mid-walk is skipped, never entered; a link is listed as the link it is (its own size).
    One descriptor per level of the current path is open; names too long to serve (the
    worktree's prefix counted, ``PATH_MAX``) are not entered, which bounds the depth.
    ``opened``: the directory's descriptor from ``open_entry`` (closed here).
    NotADirectoryError for a file."""
    if opened is None:
        opened, found = open_entry(root, parts)
    else:
        found = os.fstat(opened)
    fd = opened
    if not stat.S_ISDIR(found.st_mode):
        os.close(fd)
        raise NotADirectoryError(errno.ENOTDIR, "Not a directory")
    room = PATH_MAX - 1 - len(os.fsencode(str(root)))
    entries: list[dict[str, Any]] = []
    frames = [_scan(fd, "/".join(parts), entries)]
    try:
        while frames and len(entries) < limit:
            dir_fd, prefix, subdirs = frames[-1]
            if not subdirs:
                os.close(dir_fd)
                frames.pop()
                continue
            name = subdirs.pop()
            rel = f"{prefix}/{name}" if prefix else name
            if len(os.fsencode(rel)) >= room:
                continue
            try:
                # By name in the descriptor just listed, O_NOFOLLOW: if a link was swapped
                # in since, this fails and the walk goes on without it.
                child = os.open(name, _DIR, dir_fd=dir_fd)
            except OSError:
                continue
            frames.append(_scan(child, rel, entries))
    finally:
        for dir_fd, _prefix, _subdirs in frames:
            os.close(dir_fd)
    return sorted(entries, key=lambda e: e["path"])[:limit]


def _scan(dir_fd: int, prefix: str, entries: list[dict[str, Any]]) -> tuple[int, str, list[str]]:
    """Add the non-directories of ``dir_fd`` to ``entries``: the frame of the walk, its
    subdirectories' names in reverse order (popped in order)."""
    subdirs = []
    try:
        with os.scandir(dir_fd) as found:
            for entry in found:
                if entry.name == ".git":
                    continue
                try:
                    if entry.is_dir(follow_symlinks=False):
                        subdirs.append(entry.name)
                        continue
                    size = entry.stat(follow_symlinks=False).st_size
                except OSError:
                    continue  # gone since it was listed
                rel = f"{prefix}/{entry.name}" if prefix else entry.name
                entries.append({"path": rel, "size": size})
    except OSError:
        pass  # unreadable: listed as empty
    return dir_fd, prefix, sorted(subdirs, reverse=True)
