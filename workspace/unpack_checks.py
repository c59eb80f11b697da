"""The rules an upload is held to as it is unpacked (``workspace/unpack.py`` states them):
member names, link targets, the counts, the bytes, the zip ratio and the deadline, each
refused with one sentence for the user (``ArchiveRefused``). Nothing here writes: the tree
being written (``unpack_tree.Tree``) asks these checks before each write."""

from __future__ import annotations

import contextlib
import lzma
import os
import re
import struct
import tarfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path

from .worktree_files import NAME_MAX, PATH_MAX

CHUNK = 1024 * 1024  # read and written at a time; the deadline is checked at each
ZIP_RATIO_MAX = 200  # expanded bytes per compressed byte of one zip member ...
ZIP_RATIO_FLOOR = 1024 * 1024  # ... once it is past this many bytes expanded
LINK_HOPS = 40  # links followed in one resolution, as Linux's MAXSYMLINKS

_now = time.monotonic  # tests move this clock
_DRIVE = re.compile(r"[A-Za-z]:")
DIR, FILE, LINK = "directory", "file", "link"
# What reading a damaged archive raises (zipfile, tarfile, gzip, zlib, bz2, lzma, struct).
# Only calls that read the upload are wrapped: a failing write is the server's error.
_UNREADABLE = (
    zipfile.BadZipFile,
    zipfile.LargeZipFile,
    tarfile.TarError,
    zlib.error,
    lzma.LZMAError,
    struct.error,
    EOFError,
    OSError,
    ValueError,
    RuntimeError,
    NotImplementedError,
)


class ArchiveRefused(Exception):
    """A refused archive: str(exc) is one sentence for the user (shown in a 400)."""


class Checks:
    """What the upload into ``dest`` holds so far: what each path is (``kinds``), the links
    (for the final check), the counts, and the limits they are held to."""

    def __init__(
        self, dest: Path, what: str, entry: str, max_bytes: int, max_files: int, deadline: float
    ) -> None:
        self.what = what  # "archive", "folder"
        self.entry = entry  # "archive entry", "uploaded file"
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.deadline = deadline
        self.started = _now()
        self.kinds: dict[tuple[str, ...], str] = {}
        self.links: dict[str, str] = {}  # "a/b/link": its target
        self.sizes: dict[tuple[str, ...], int] = {}  # each file's bytes, for its hard links
        self.files = self.dirs = self.bytes = 0
        # Room for a relative path: the worktree's own path counts against PATH_MAX.
        self.room = PATH_MAX - 1 - len(os.fsencode(str(dest))) - 1

    # -- time and sentences
    def tick(self) -> None:
        if _now() > self.deadline:
            seconds = round(max(0.0, self.deadline - self.started), 1)
            raise ArchiveRefused(f"Unpacking the {self.what} took longer than {seconds:g} s.")

    def says(self, name: str, why: str) -> str:
        return f"The {self.entry} {show(name)} {why}."

    def refused(self, name: str, why: str) -> ArchiveRefused:
        return ArchiveRefused(self.says(name, why))

    # -- names
    def parts(self, name: str) -> tuple[str, ...]:
        """The components of the member name ``name`` (``()``: the tree itself)."""
        if not name:
            raise ArchiveRefused(f"The {self.what} has an entry with an empty name.")
        if "\0" in name:
            raise self.refused(name, "has a NUL byte in its name")
        if "\\" in name:
            raise self.refused(name, "has a backslash in its name (a Windows path)")
        if name.startswith("/") or _DRIVE.match(name):
            raise self.refused(name, "is an absolute path")
        parts = tuple(p for p in name.split("/") if p not in ("", "."))
        if ".." in parts:
            raise self.refused(name, "has a '..' in its path")
        try:
            sizes = [len(os.fsencode(p)) for p in parts]
        except UnicodeEncodeError:
            raise self.refused(name, "has a name that is not valid text") from None
        if any(size > NAME_MAX for size in sizes):
            raise self.refused(name, f"has a name component longer than {NAME_MAX} bytes")
        if sum(sizes) + len(sizes) > self.room:
            raise self.refused(name, "has a path too long for the worktree")
        return parts

    def _new(self, parts: tuple[str, ...], name: str, kind: str) -> bool:
        """False when ``parts`` is a directory already and ``kind`` is one too."""
        have = self.kinds.get(parts)
        if have is None:
            return True
        if have == DIR and kind == DIR:
            return False
        raise self.refused(
            name, "is in the archive twice" if self.what == "archive" else "is uploaded twice"
        )

    def leaf(self, name: str, kind: str) -> tuple[str, ...]:
        """The parts of a new file or link ``name``, counted."""
        parts = self.parts(name)
        if not parts:
            raise self.refused(name, "names the folder itself, not a file")
        self.count_file()
        self._new(parts, name, kind)
        return parts

    def known_ancestors(self, parts: tuple[str, ...], name: str) -> int:
        """How many of ``parts``'s leading components are directories of the tree already
        (the rest are made). Refused when the nearest known one is a link or a file: no
        write goes through either."""
        known = len(parts) - 1
        while known > 0 and parts[:known] not in self.kinds:
            known -= 1
        if known > 0:
            have = self.kinds[parts[:known]]
            if have != DIR:
                where = show("/".join(parts[:known]))
                if have == LINK:
                    raise self.refused(
                        name, f"is inside the symbolic link {where}; links are not followed"
                    )
                raise self.refused(name, f"is inside the file {where}")
        return known

    # -- links
    def check_target(self, parts: tuple[str, ...], name: str, target: str) -> None:
        """A symbolic link's target: relative, and staying in the tree lexically."""
        if not target or "\0" in target:
            raise self.refused(name, "is a symbolic link with an empty target or a NUL byte")
        outside = (
            f"is a symbolic link to {show(target)}, outside the folder; only relative "
            "links that stay inside are kept"
        )
        if "\\" in target or target.startswith("/") or _DRIVE.match(target):
            raise self.refused(name, outside)
        try:
            size = len(os.fsencode(target))
        except UnicodeEncodeError:
            raise self.refused(name, "is a symbolic link whose target is not valid text") from None
        if size >= PATH_MAX:
            raise self.refused(name, f"is a symbolic link longer than {PATH_MAX - 1} bytes")
        if escapes(list(parts[:-1]), target, {}, self.tick):
            raise self.refused(name, outside)

    def hardlink_source(self, name: str, target: str) -> tuple[str, ...]:
        """The parts of a hard link's ``target``: a regular file unpacked before it."""
        try:
            source = self.parts(target)
        except ArchiveRefused:
            source = ()
        if not source or self.kinds.get(source) != FILE:
            raise self.refused(
                name, f"is a hard link to {show(target)}, not to a file unpacked before it"
            )
        return source

    def check_links(self) -> None:
        """The final link check: every link's target, following the tree's other links as
        the kernel would, stays in the tree."""
        for path, target in self.links.items():
            self.tick()
            if escapes(path.split("/")[:-1], target, self.links, self.tick):
                raise self.refused(
                    path,
                    f"is a symbolic link to {show(target)}, which leads "
                    "out of the folder through another link",
                )

    # -- counts and bytes
    def count_file(self) -> None:
        self.files += 1
        if 0 < self.max_files < self.files:
            raise ArchiveRefused(f"The {self.what} holds more than {self.max_files:,} files.")

    def count_dir(self) -> None:
        self.dirs += 1
        if 0 < self.max_files < self.dirs:
            raise ArchiveRefused(f"The {self.what} holds more than {self.max_files:,} folders.")

    def too_big(self) -> ArchiveRefused:
        return ArchiveRefused(f"The {self.what} holds more than {self.max_bytes:,} bytes.")

    def check_size(self, size: int | None) -> None:
        """A file's size as its header says it (None: not said), refused early."""
        if size is not None and 0 < self.max_bytes < self.bytes + size:
            raise self.too_big()

    def next_read(self) -> int:
        """How much of a file to read next: a chunk, or one byte past what may still come."""
        if self.max_bytes > 0:
            return min(CHUNK, self.max_bytes - self.bytes + 1)
        return CHUNK

    def count_bytes(self, name: str, size: int, written: int, ratio_base: int | None) -> None:
        """``size`` more bytes of file content, ``written`` of the file ``name`` with them;
        ``ratio_base``: a zip member's compressed size."""
        if 0 < self.max_bytes < self.bytes + size:
            raise self.too_big()
        if ratio_base is not None and written > max(ZIP_RATIO_FLOOR, ZIP_RATIO_MAX * ratio_base):
            raise self.refused(name, f"expands more than {ZIP_RATIO_MAX} times (a zip bomb)")
        self.bytes += size


@contextlib.contextmanager
def reading(what: str) -> Iterator[None]:
    """A damaged upload's error, as a refusal."""
    try:
        yield
    except _UNREADABLE as exc:
        detail = str(exc).strip().rstrip(".")[:200] or type(exc).__name__
        raise ArchiveRefused(f"The {what} could not be read ({detail}).") from exc


def escapes(
    start: list[str] | tuple[str, ...],
    target: str,
    links: dict[str, str],
    tick: Callable[[], None],
) -> bool:
    """True when ``target``, resolved from the directory ``start`` (its components), leaves
    the tree. ``links`` (``"a/b": target``): the tree's links, followed as the kernel would
    (at most ``LINK_HOPS``: past that the kernel gives ELOOP, which leads nowhere); empty:
    lexically."""
    stack: list[str] = []  # each entry the whole path so far ("a", "a/b", ...)
    for component in start:
        stack.append(f"{stack[-1]}/{component}" if stack else component)
    pending = target.split("/")
    pending.reverse()  # popped from the end
    hops = steps = 0
    while pending:
        component = pending.pop()
        steps += 1
        if steps % 4096 == 0:
            tick()
        if component in ("", "."):
            continue
        if component == "..":
            if not stack:
                return True
            stack.pop()
            continue
        path = f"{stack[-1]}/{component}" if stack else component
        if path not in links:
            stack.append(path)
            continue
        hops += 1
        if hops > LINK_HOPS:
            return False
        followed = links[path]
        if followed.startswith("/"):
            return True
        pending.extend(reversed(followed.split("/")))
    return False


def show(name: str) -> str:
    """``name`` quoted for a sentence, cut at 120 characters."""
    return repr(name if len(name) <= 120 else name[:117] + "...")
