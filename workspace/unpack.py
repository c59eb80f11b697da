"""An uploaded archive, or a folder dropped on the page, unpacked into a new session's worktree
(``services/repositories.fill_from_upload``). Everything in it is the uploader's choice:
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
  refuse early, but are never trusted alone); ``max_files`` files and links, and as many
  directories; a zip member over ``ZIP_RATIO_FLOOR`` expanded at more than
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
"""

from __future__ import annotations

import contextlib
import gzip
import lzma
import os
import re
import shutil
import stat
import struct
import tarfile
import tempfile
import time
import zipfile
import zlib
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from .worktree_files import NAME_MAX, PATH_MAX

CHUNK = 1024 * 1024  # read and written at a time; the deadline is checked at each
ZIP_RATIO_MAX = 200  # expanded bytes per compressed byte of one zip member ...
ZIP_RATIO_FLOOR = 1024 * 1024  # ... once it is past this many bytes expanded
HEADER_MAX = 1024 * 1024  # one tar header with its long name and pax records
LINK_HOPS = 40  # links followed in one resolution, as Linux's MAXSYMLINKS
SPOOL_SLACK = 16 * 1024 * 1024  # a non-seekable zip may be this much larger than max_bytes

_now = time.monotonic  # tests move this clock
_DRIVE = re.compile(r"[A-Za-z]:")
_SLACK = 2 * tarfile.RECORDSIZE + tarfile.BLOCKSIZE  # tarfile's read-ahead and padding
_OPEN_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NEW_FILE = os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_NOCTTY | os.O_CLOEXEC
_DIR, _FILE, _LINK = "directory", "file", "link"
_TAR_SPECIAL = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}
_ZIP_SPECIAL = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}
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


@dataclass(frozen=True)
class Unpacked:
    """What was unpacked: ``files`` files and links (directories aside), ``bytes`` of file
    content."""

    files: int
    bytes: int


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
    with _unpacking(dest, "archive", "archive entry", max_bytes, max_files, deadline) as tree:
        with contextlib.ExitStack() as stack:
            with _reading("archive"):
                head, source, seekable = _peek(source)
            if not head:
                raise ArchiveRefused(f"The file {_show(name)} is empty.")
            kind = _kind(head, name)
            if kind is None:
                raise ArchiveRefused(
                    f"The file {_show(name)} is not a .zip, .tar or .tar.gz archive."
                )
            if kind == "zip":
                if not seekable:
                    source = stack.enter_context(_spool(source, tree))
                _unpack_zip(tree, source)
            else:
                if kind == "tar.gz":
                    with _reading("archive"):
                        source = stack.enter_context(gzip.GzipFile(fileobj=source, mode="rb"))
                _unpack_tar(tree, source)
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
    with _unpacking(dest, "folder", "uploaded file", max_bytes, max_files, deadline) as tree:
        for name, content in files:
            tree.tick()
            size = getattr(content, "size", None)
            tree.add_file(name, content, executable=False, size=size if type(size) is int else None)
        return tree.done()


# -- the tree being written -------------------------------------------------------------------
class _Tree:
    """``dest`` as it fills: what each path is (``kinds``), the links (for the final check),
    the counts, and the limits."""

    def __init__(
        self, dest: Path, what: str, entry: str, max_bytes: int, max_files: int, deadline: float
    ) -> None:
        self.dest = dest
        self.what = what  # "archive", "folder"
        self.entry = entry  # "archive entry", "uploaded file"
        self.max_bytes = max_bytes
        self.max_files = max_files
        self.deadline = deadline
        self.started = _now()
        self.kinds: dict[tuple[str, ...], str] = {}
        self.links: dict[str, str] = {}  # "a/b/link": its target
        self.files = self.dirs = self.bytes = 0
        self.root = -1
        self.created = False
        # Room for a relative path: the worktree's own path counts against PATH_MAX.
        self.room = PATH_MAX - 1 - len(os.fsencode(str(dest))) - 1

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
        for path, target in self.links.items():
            self.tick()
            if _escapes(path.split("/")[:-1], target, self.links, self.tick):
                raise self.refused(
                    path,
                    f"is a symbolic link to {_show(target)}, which leads "
                    "out of the folder through another link",
                )
        return Unpacked(files=self.files, bytes=self.bytes)

    # -- checks
    def tick(self) -> None:
        if _now() > self.deadline:
            seconds = round(max(0.0, self.deadline - self.started), 1)
            raise ArchiveRefused(f"Unpacking the {self.what} took longer than {seconds:g} s.")

    def says(self, name: str, why: str) -> str:
        return f"The {self.entry} {_show(name)} {why}."

    def refused(self, name: str, why: str) -> ArchiveRefused:
        return ArchiveRefused(self.says(name, why))

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

    def _count_file(self) -> None:
        self.files += 1
        if 0 < self.max_files < self.files:
            raise ArchiveRefused(f"The {self.what} holds more than {self.max_files:,} files.")

    def _count_dir(self) -> None:
        self.dirs += 1
        if 0 < self.max_files < self.dirs:
            raise ArchiveRefused(f"The {self.what} holds more than {self.max_files:,} folders.")

    def _too_big(self) -> ArchiveRefused:
        return ArchiveRefused(f"The {self.what} holds more than {self.max_bytes:,} bytes.")

    def _new(self, parts: tuple[str, ...], name: str, kind: str) -> bool:
        """False when ``parts`` is a directory already and ``kind`` is one too."""
        have = self.kinds.get(parts)
        if have is None:
            return True
        if have == _DIR and kind == _DIR:
            return False
        raise self.refused(
            name, "is in the archive twice" if self.what == "archive" else "is uploaded twice"
        )

    def _parent(self, parts: tuple[str, ...], name: str) -> int:
        """A descriptor of ``parts``'s parent directory, made (0o755) where missing, opened
        one component at a time without following a link. Refused when an ancestor is a link
        or a file of the tree."""
        known = len(parts) - 1
        while known > 0 and parts[:known] not in self.kinds:
            known -= 1
        if known > 0:
            have = self.kinds[parts[:known]]
            if have != _DIR:
                where = _show("/".join(parts[:known]))
                if have == _LINK:
                    raise self.refused(
                        name, f"is inside the symbolic link {where}; links are not followed"
                    )
                raise self.refused(name, f"is inside the file {where}")
        fd = os.dup(self.root)
        try:
            for i, component in enumerate(parts[:-1]):
                made = i >= known
                if made:
                    self._count_dir()
                    os.mkdir(component, 0o755, dir_fd=fd)
                    self.kinds[parts[: i + 1]] = _DIR
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
        if not parts or not self._new(parts, name, _DIR):
            return
        parent = self._parent(parts, name)
        try:
            self._count_dir()
            os.mkdir(parts[-1], 0o755, dir_fd=parent)
            self.kinds[parts] = _DIR
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
        parts = self._leaf(name, _FILE)
        if size is not None and 0 < self.max_bytes < self.bytes + size:
            raise self._too_big()
        parent = self._parent(parts, name)
        try:
            fd = os.open(parts[-1], _NEW_FILE, 0o600, dir_fd=parent)
        finally:
            os.close(parent)
        self.kinds[parts] = _FILE
        try:
            self._copy(stream, fd, name, ratio_base)
            os.fchmod(fd, 0o755 if executable else 0o644)
        finally:
            os.close(fd)

    def _copy(self, stream: BinaryIO, fd: int, name: str, ratio_base: int | None) -> None:
        written = 0
        while True:
            self.tick()
            want = CHUNK
            if self.max_bytes > 0:
                want = min(CHUNK, self.max_bytes - self.bytes + 1)
            with _reading(self.what):
                chunk = stream.read(want)
            if not chunk:
                return
            if 0 < self.max_bytes < self.bytes + len(chunk):
                raise self._too_big()
            written += len(chunk)
            if ratio_base is not None and written > max(
                ZIP_RATIO_FLOOR, ZIP_RATIO_MAX * ratio_base
            ):
                raise self.refused(name, f"expands more than {ZIP_RATIO_MAX} times (a zip bomb)")
            self.bytes += len(chunk)
            view = memoryview(chunk)
            while view:
                view = view[os.write(fd, view) :]

    def add_symlink(self, name: str, target: str) -> None:
        parts = self._leaf(name, _LINK)
        self._check_target(parts, name, target)
        parent = self._parent(parts, name)
        try:
            os.symlink(target, parts[-1], dir_fd=parent)
        finally:
            os.close(parent)
        self.kinds[parts] = _LINK
        self.links["/".join(parts)] = target

    def _check_target(self, parts: tuple[str, ...], name: str, target: str) -> None:
        if not target or "\0" in target:
            raise self.refused(name, "is a symbolic link with an empty target or a NUL byte")
        outside = (
            f"is a symbolic link to {_show(target)}, outside the folder; only relative "
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
        if _escapes(list(parts[:-1]), target, {}, self.tick):
            raise self.refused(name, outside)

    def add_hardlink(self, name: str, target: str) -> None:
        try:
            source = self.parts(target)
        except ArchiveRefused:
            source = ()
        if not source or self.kinds.get(source) != _FILE:
            raise self.refused(
                name, f"is a hard link to {_show(target)}, not to a file unpacked before it"
            )
        parts = self._leaf(name, _FILE)
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
        self.kinds[parts] = _FILE

    def _leaf(self, name: str, kind: str) -> tuple[str, ...]:
        """The parts of a new file or link ``name``, counted."""
        parts = self.parts(name)
        if not parts:
            raise self.refused(name, "names the folder itself, not a file")
        self._count_file()
        self._new(parts, name, kind)
        return parts


@contextlib.contextmanager
def _unpacking(
    dest: Path, what: str, entry: str, max_bytes: int, max_files: int, deadline: float
) -> Iterator[_Tree]:
    tree = _Tree(dest, what, entry, max_bytes, max_files, deadline)
    tree.open()
    failed = True
    try:
        yield tree
        failed = False
    finally:
        tree.close(failed=failed)


@contextlib.contextmanager
def _reading(what: str) -> Iterator[None]:
    """A damaged upload's error, as a refusal."""
    try:
        yield
    except _UNREADABLE as exc:
        detail = str(exc).strip().rstrip(".")[:200] or type(exc).__name__
        raise ArchiveRefused(f"The {what} could not be read ({detail}).") from exc


def _escapes(
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


def _show(name: str) -> str:
    return repr(name if len(name) <= 120 else name[:117] + "...")


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


@contextlib.contextmanager
def _spool(source: BinaryIO, tree: _Tree) -> Iterator[BinaryIO]:
    """A non-seekable zip copied to a temporary file (on disk past 8 MiB)."""
    cap = tree.max_bytes + SPOOL_SLACK if tree.max_bytes > 0 else 0
    with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as spool:
        total = 0
        while True:
            tree.tick()
            with _reading(tree.what):
                chunk = source.read(CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if 0 < cap < total:
                raise ArchiveRefused(f"The archive is larger than {cap:,} bytes.")
            spool.write(chunk)
        spool.seek(0)
        yield spool


# -- tar ---------------------------------------------------------------------------------------
class _Metered:
    """The (decompressed) tar stream as tarfile reads it, at most ``allow``-ed bytes per
    phase: a header (with its long name and pax records) or one member's data. tarfile reads a
    long name or a pax record whole into memory; this bounds it."""

    def __init__(self, raw: BinaryIO, tree: _Tree) -> None:
        self.raw = raw
        self.tree = tree
        self.left = 0
        self.refusal = ""

    def allow(self, size: int, refusal: str) -> None:
        self.left = size
        self.refusal = refusal

    def read(self, size: int | None = -1) -> bytes:
        self.tree.tick()
        if size is None or size < 0 or size > self.left + 1:
            size = self.left + 1
        data = self.raw.read(size)
        self.left -= len(data)
        if self.left < 0:
            raise ArchiveRefused(self.refusal)
        return data


def _unpack_tar(tree: _Tree, raw: BinaryIO) -> None:
    meter = _Metered(raw, tree)
    header = f"The archive has an entry header over {HEADER_MAX // 1024:,} KiB."
    meter.allow(HEADER_MAX + _SLACK, header)
    with _reading("archive"):
        # A stream: read once, front to back; opened here so that its errors are mapped, and
        # closed by the ``with tar`` below.
        tar = tarfile.open(fileobj=meter, mode="r|")  # noqa: SIM115
    seen = 0
    with tar:
        while True:
            tree.tick()
            meter.allow(HEADER_MAX + _SLACK, header)
            with _reading("archive"):
                member = tar.next()
            if member is None:
                return
            tar.members.clear()  # tarfile keeps every header; nothing here needs them
            seen += 1
            if tree.max_files > 0 and seen > 2 * tree.max_files:
                raise ArchiveRefused(f"The archive holds more than {tree.max_files:,} files.")
            _tar_member(tree, tar, member, meter)


def _tar_member(
    tree: _Tree, tar: tarfile.TarFile, member: tarfile.TarInfo, meter: _Metered
) -> None:
    name = member.name
    if member.isdir():
        tree.add_dir(name)
    elif member.isreg():
        meter.allow(member.size + _SLACK, tree.says(name, "holds more than its header says"))
        with _reading("archive"):
            stream = tar.extractfile(member)
        if stream is None:  # not reached: a regular member has data
            raise tree.refused(name, "could not be read")
        tree.add_file(name, stream, executable=bool(member.mode & 0o111), size=member.size)
    elif member.issym():
        tree.add_symlink(name, member.linkname)
    elif member.islnk():
        tree.add_hardlink(name, member.linkname)
    else:
        kind = _TAR_SPECIAL.get(member.type, "a special entry")
        raise tree.refused(name, f"is {kind}; only files, folders and links are unpacked")


# -- zip ---------------------------------------------------------------------------------------
def _unpack_zip(tree: _Tree, fp: BinaryIO) -> None:
    entries = 2 * tree.max_files  # files, and as many directories
    with _reading("archive"):
        _count_zip_entries(fp, entries, tree)
        archive = zipfile.ZipFile(fp)
    with archive:
        infos = archive.infolist()
        if 0 < entries < len(infos):
            raise ArchiveRefused(f"The archive holds more than {tree.max_files:,} files.")
        if 0 < tree.max_bytes < sum(info.file_size for info in infos):
            raise tree._too_big()
        for info in infos:
            tree.tick()
            _zip_member(tree, archive, info)


def _zip_member(tree: _Tree, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    name = info.orig_filename  # zipfile's ``filename`` is cut at a NUL
    tree.parts(name)  # the name is refused before anything else
    if info.flag_bits & 0x1:
        raise tree.refused(name, "is encrypted")
    mode = info.external_attr >> 16 if info.create_system == 3 else 0  # 3: Unix
    kind = stat.S_IFMT(mode)
    if name.endswith("/") or kind == stat.S_IFDIR:
        tree.add_dir(name)
    elif kind == stat.S_IFLNK:  # Info-ZIP: the target is the member's data
        with _reading("archive"), archive.open(info) as stream:
            target = stream.read(PATH_MAX + 1)
        if len(target) > PATH_MAX:
            raise tree.refused(name, f"is a symbolic link longer than {PATH_MAX - 1} bytes")
        tree.add_symlink(name, os.fsdecode(target))
    elif kind in (0, stat.S_IFREG):
        if info.file_size > max(ZIP_RATIO_FLOOR, ZIP_RATIO_MAX * info.compress_size):
            raise tree.refused(name, f"expands more than {ZIP_RATIO_MAX} times (a zip bomb)")
        with _reading("archive"):
            stream = archive.open(info)
        with stream:
            tree.add_file(
                name,
                stream,
                executable=bool(mode & 0o111),
                size=info.file_size,
                ratio_base=info.compress_size,
            )
    else:
        what = _ZIP_SPECIAL.get(kind, "a special entry")
        raise tree.refused(name, f"is {what}; only files, folders and links are unpacked")


def _count_zip_entries(fp: BinaryIO, limit: int, tree: _Tree) -> None:
    """ArchiveRefused when the central directory ``zipfile`` will load has more than ``limit``
    entries, counted without loading them (zipfile makes an object of each, 46 bytes apiece
    in the file). The directory is found by zipfile's own reading of the end record (a private
    function, there since Python 2); without it, the count after loading is the only one."""
    end_record = getattr(zipfile, "_EndRecData", None)
    if limit <= 0 or end_record is None:
        return
    endrec = end_record(fp)
    if not endrec:
        return  # zipfile says what is wrong
    size, location = endrec[5], endrec[9]  # _ECD_SIZE, _ECD_LOCATION
    start = location - size - (76 if endrec[0] == b"PK\x06\x06" else 0)  # zip64's records
    if start < 0:
        return
    fp.seek(start)
    count = done = 0
    while done < size:
        head = fp.read(46)
        if len(head) != 46 or head[:4] != b"PK\x01\x02":
            return
        name, extra, comment = struct.unpack("<3H", head[28:34])
        fp.seek(name + extra + comment, os.SEEK_CUR)
        done += 46 + name + extra + comment
        count += 1
        if count > limit:
            raise ArchiveRefused(f"The archive holds more than {tree.max_files:,} files.")
        if count % 4096 == 0:
            tree.tick()
