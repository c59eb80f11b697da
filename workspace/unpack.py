"""An uploaded archive, or a folder dropped on the page, unpacked into a new session's worktree
(``repositories/fill.fill_from_upload``). Everything in it is the uploader's choice:
member names, link targets, member types, the sizes headers claim, compression ratios.

* **Names.** Relative paths only. Refused: an empty name, a NUL byte, a backslash (a Windows
  separator: ``..\\x``, ``C:\\x``), an absolute path (``/x``, ``C:x``), a ``..`` component,
  a component or a path longer than the kernel takes. ``.`` and empty components are dropped
  (``./a//b`` is ``a/b``). The same path twice is refused (a directory may be named again).
  Names git refuses are kept (the snapshots handle them), and so is a top-level ``.git``: it
  is the user's repository.
* **Types.** Regular files, directories, symbolic links, and hard links in a tar. A symbolic
  link must be relative and its target must stay in the tree: resolved lexically against the
  link's own directory when the link is met, then once more at the end following the
  archive's other links as the kernel would (``d/up -> ..`` then ``x -> d/up/..`` leaves the
  tree, though each looks inside). A hard link must name a regular file unpacked before it.
  Devices, FIFOs, sockets and any other type are refused.
* **No write follows a link.** A member whose parent path goes through a link (or a file) of
  the tree is refused; and every path is opened one component at a time from the tree's
  directory descriptor with ``O_NOFOLLOW``, each file created with ``O_EXCL``.
* **Modes.** Files 0o755 when the archive gives them any executable bit, else 0o644;
  directories 0o755; never setuid, setgid or sticky. Owners and times are not kept.
* **Limits.** ``max_bytes`` of file content, counted as it is written (the sizes in headers
  refuse early, but are never trusted alone), a hard link counted as its file's bytes again
  (each name is a file of that size to every later reader); ``max_files`` files and links,
  and as many directories; a zip member over ``ZIP_RATIO_FLOOR`` expanded at more than
  ``ZIP_RATIO_MAX``:1; ``deadline`` (a ``time.monotonic()`` value), checked between members
  and at every MiB read. 0 for ``max_bytes`` or ``max_files``: no such limit.
* **Streaming.** A tar (or tar.gz) is read front to back a MiB at a time, each header (long
  names, pax records) at most ``HEADER_MAX``; a zip is read through its central directory,
  whose entries are counted before ``zipfile`` loads them: it needs a seekable file (an
  upload is one; anything else is first spooled to a temporary file).

``ArchiveRefused`` (one sentence for the user) for any of these, and for an archive that
cannot be read. On a refusal or any other error ``dest`` is left as it was found: absent when
it was absent (it is created, with its parents, and removed again), empty when it was an
empty directory. A ``dest`` that is anything else is a ValueError, and left alone.

The parts: ``unpack_checks`` (the rules above, and ``ArchiveRefused``), ``unpack_tree`` (the
writing into ``dest``), ``unpack_tar`` and ``unpack_zip`` (the two formats). Here: the entry
points, and telling an archive's format.
"""

from __future__ import annotations

import contextlib
import gzip
from collections.abc import Iterable
from pathlib import Path
from typing import BinaryIO

from . import unpack_tar, unpack_zip
from .unpack_checks import ArchiveRefused, reading, show
from .unpack_tree import Unpacked, unpacking


def unpack_archive(
    source: BinaryIO,
    dest: Path,
    *,
    name: str,
    max_bytes: int,
    max_files: int,
    deadline: float,
) -> Unpacked:
    """Unpack the archive ``source`` (a .zip, .tar, .tar.gz or .tgz, told by its first bytes,
    by ``name`` for a tar without the POSIX magic or a zip with a prefix) into ``dest``, an
    absent path or an empty directory (see the module). ArchiveRefused for any other file."""
    with unpacking(dest, "archive", "archive entry", max_bytes, max_files, deadline) as tree:
        with contextlib.ExitStack() as stack:
            with reading("archive"):
                head, source, seekable = _peek(source)
            if not head:
                raise ArchiveRefused(f"The file {show(name)} is empty.")
            kind = _kind(head, name)
            if kind is None:
                raise ArchiveRefused(
                    f"The file {show(name)} is not a .zip, .tar or .tar.gz archive."
                )
            if kind == "zip":
                if not seekable:
                    source = stack.enter_context(unpack_zip.spooled(source, tree))
                unpack_zip.unpack_into(tree, source)
            else:
                if kind == "tar.gz":
                    with reading("archive"):
                        source = stack.enter_context(gzip.GzipFile(fileobj=source, mode="rb"))
                unpack_tar.unpack_into(tree, source)
        return tree.done()


def unpack_files(
    files: Iterable[tuple[str, BinaryIO]],
    dest: Path,
    *,
    max_bytes: int,
    max_files: int,
    deadline: float,
) -> Unpacked:
    """Write a folder dropped on the page into ``dest`` (as ``unpack_archive``): each
    ``(relative path as the browser gave it, content)`` pair a regular file of mode 0o644,
    its directories made on the way. The paths are checked as an archive's member names;
    nothing is stripped from them."""
    with unpacking(dest, "folder", "uploaded file", max_bytes, max_files, deadline) as tree:
        for name, content in files:
            tree.tick()
            size = getattr(content, "size", None)
            tree.add_file(name, content, executable=False, size=size if type(size) is int else None)
        return tree.done()


# -- the archive's kind -----------------------------------------------------------------------
def _peek(source: BinaryIO) -> tuple[bytes, BinaryIO, bool]:
    """The first 512 bytes, a reader of the whole ``source``, and whether it is seekable."""
    seekable = bool(getattr(source, "seekable", lambda: False)())
    start = source.tell() if seekable else 0
    head = b""
    while len(head) < 512:
        more = source.read(512 - len(head))
        if not more:
            break
        head += more
    if seekable:
        source.seek(start)
        return head, source, True
    return head, _Prefixed(head, source), False


def _kind(head: bytes, name: str) -> str | None:
    """ "zip", "tar.gz" or "tar" by the magic bytes; by the name for a zip with something in
    front of it (self-extracting) or a tar from before POSIX's magic."""
    if head[:4] in (b"PK\x03\x04", b"PK\x05\x06", b"PK\x07\x08"):
        return "zip"
    if head[:2] == b"\x1f\x8b":
        return "tar.gz"
    if head[257:262] == b"ustar":
        return "tar"
    lower = name.lower()
    if lower.endswith(".zip"):
        return "zip"
    if lower.endswith(".tar"):
        return "tar"
    return None


class _Prefixed:
    """``head`` (already read) then the rest of a non-seekable ``rest``."""

    def __init__(self, head: bytes, rest: BinaryIO) -> None:
        self.head = head
        self.rest = rest

    def read(self, size: int | None = -1) -> bytes:
        if not self.head:
            return self.rest.read(size)
        if size is None or size < 0:
            data, self.head = self.head + self.rest.read(), b""
            return data
        data, self.head = self.head[:size], self.head[size:]
        return data
