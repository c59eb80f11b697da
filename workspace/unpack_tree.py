"""The writing of an upload into ``dest`` (``workspace/unpack.py`` states the rules): every
path opened one component at a time from the tree's directory descriptor with
``O_NOFOLLOW``, each file created with ``O_EXCL``, each write checked first
(``unpack_checks``); on any failure ``dest`` is left as it was found."""

from __future__ import annotations

import contextlib
import os
import shutil
import stat
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .unpack_checks import DIR, FILE, LINK, Checks, reading

_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC


@dataclass(frozen=True)
class Unpacked:
    """What was unpacked: ``files`` files and links (directories aside), ``bytes`` of file
    content."""

    files: int
    bytes: int


class Tree(Checks):
    """``dest`` as it fills: its members written as the checks allow."""

    def __init__(
        self, dest: Path, what: str, entry: str, max_bytes: int, max_files: int, deadline: float
    ) -> None:
        super().__init__(dest, what, entry, max_bytes, max_files, deadline)
        self.dest = dest
        self.root = -1
        self.created = False

    # -- lifecycle
    def open(self) -> None:
        try:
            found = os.lstat(self.dest)
        except FileNotFoundError:
            self.dest.parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(self.dest, 0o755)
            self.created = True
        else:
            if not stat.S_ISDIR(found.st_mode):
                raise ValueError(f"{self.dest} is not a directory.")
            with os.scandir(self.dest) as entries:
                if next(entries, None) is not None:
                    raise ValueError(f"{self.dest} is not empty.")
        self.root = os.open(self.dest, _OPEN_DIR)
        if self.created:
            os.fchmod(self.root, 0o755)

    def close(self, *, failed: bool) -> None:
        if self.root >= 0:
            os.close(self.root)
            self.root = -1
        if not failed:
            return
        if self.created:
            shutil.rmtree(self.dest, ignore_errors=True)
            return
        with os.scandir(self.dest) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    shutil.rmtree(entry.path, ignore_errors=True)
                else:
                    with contextlib.suppress(FileNotFoundError):
                        os.unlink(entry.path)

    def done(self) -> Unpacked:
        """The final link check (see the module), then the counts."""
        self.check_links()
        return Unpacked(files=self.files, bytes=self.bytes)

    def _parent(self, parts: tuple[str, ...], name: str) -> int:
        """A descriptor of ``parts``'s parent directory, made (0o755) where missing, opened
        one component at a time without following a link. Refused when an ancestor is a link
        or a file of the tree."""
        known = self.known_ancestors(parts, name)
        fd = os.dup(self.root)
        try:
            for i, component in enumerate(parts[:-1]):
                made = i >= known
                if made:
                    self.count_dir()
                    os.mkdir(component, 0o755, dir_fd=fd)
                    self.kinds[parts[: i + 1]] = DIR
                child = os.open(component, _OPEN_DIR, dir_fd=fd)
                os.close(fd)
                fd = child
                if made:
                    os.fchmod(fd, 0o755)
        except BaseException:
            os.close(fd)
            raise
        return fd

    # -- members
    def add_dir(self, name: str) -> None:
        parts = self.parts(name)
        if not parts or not self._new(parts, name, DIR):
            return
        parent = self._parent(parts, name)
        try:
            self.count_dir()
            os.mkdir(parts[-1], 0o755, dir_fd=parent)
            self.kinds[parts] = DIR
            fd = os.open(parts[-1], _OPEN_DIR, dir_fd=parent)
            os.fchmod(fd, 0o755)
            os.close(fd)
        finally:
            os.close(parent)

    def add_file(
        self,
        name: str,
        stream: BinaryIO,
        *,
        executable: bool,
        size: int | None = None,
        ratio_base: int | None = None,
    ) -> None:
        """``stream``'s bytes as the new regular file ``name``; ``size``: what a header says
        (refused early when over the limit); ``ratio_base``: a zip member's compressed size."""
        parts = self.leaf(name, FILE)
        self.check_size(size)
        parent = self._parent(parts, name)
        try:
            fd = os.open(parts[-1], _NEW_FILE, 0o600, dir_fd=parent)
        finally:
            os.close(parent)
        self.kinds[parts] = FILE
        try:
            self.sizes[parts] = self._copy(stream, fd, name, ratio_base)
            os.fchmod(fd, 0o755 if executable else 0o644)
        finally:
            os.close(fd)

    def _copy(self, stream: BinaryIO, fd: int, name: str, ratio_base: int | None) -> int:
        written = 0
        while True:
            self.tick()
            with reading(self.what):
                chunk = stream.read(self.next_read())
            if not chunk:
                return written
            written += len(chunk)
            self.count_bytes(name, len(chunk), written, ratio_base)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]

    def add_symlink(self, name: str, target: str) -> None:
        parts = self.leaf(name, LINK)
        self.check_target(parts, name, target)
        parent = self._parent(parts, name)
        try:
            os.symlink(target, parts[-1], dir_fd=parent)
        finally:
            os.close(parent)
        self.kinds[parts] = LINK
        self.links["/".join(parts)] = target

    def add_hardlink(self, name: str, target: str) -> None:
        """A second name for a file unpacked before: counted as the bytes it shows (every
        later reader of the worktree, its size limit and each snapshot see a file of that
        size), before the link is made."""
        source = self.hardlink_source(name, target)
        parts = self.leaf(name, FILE)
        size = self.sizes.get(source, 0)
        self.count_bytes(name, size, size, None)
        source_dir = self._parent(source, target)
        try:
            parent = self._parent(parts, name)
            try:
                os.link(
                    source[-1],
                    parts[-1],
                    src_dir_fd=source_dir,
                    dst_dir_fd=parent,
                    follow_symlinks=False,
                )
            finally:
                os.close(parent)
        finally:
            os.close(source_dir)
        self.kinds[parts] = FILE
        self.sizes[parts] = size


@contextlib.contextmanager
def unpacking(
    dest: Path, what: str, entry: str, max_bytes: int, max_files: int, deadline: float
) -> Iterator[Tree]:
    """``dest`` opened as a ``Tree`` for the upload; on any error left as it was found."""
    tree = Tree(dest, what, entry, max_bytes, max_files, deadline)
    tree.open()
    failed = True
    try:
        yield tree
        failed = False
    finally:
        tree.close(failed=failed)
