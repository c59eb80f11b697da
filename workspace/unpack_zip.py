"""A zip unpacked into a ``Tree`` through its central directory, whose entries are counted
before ``zipfile`` loads them; each member's expansion ratio bounded (``ZIP_RATIO_MAX``),
encrypted members refused. ``zipfile`` needs a seekable file: an upload is one, anything
else is first spooled to a temporary file (``spooled``)."""

from __future__ import annotations

import contextlib
import os
import stat
import struct
import tempfile
import zipfile
from collections.abc import Iterator
from typing import BinaryIO

from .unpack_checks import CHUNK, ZIP_RATIO_FLOOR, ZIP_RATIO_MAX, ArchiveRefused, reading
from .unpack_tree import Tree
from .worktree_files import PATH_MAX

SPOOL_SLACK = 16 * 1024 * 1024  # a non-seekable zip may be this much larger than max_bytes
_SPECIAL = {
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFIFO: "a FIFO",
    stat.S_IFSOCK: "a socket",
}


def unpack_into(tree: Tree, fp: BinaryIO) -> None:
    """The members of the zip ``fp`` (seekable) written into ``tree``, once their count and
    the sizes their headers claim are within the limits."""
    entries = 2 * tree.max_files  # files, and as many directories
    with reading("archive"):
        _count_zip_entries(fp, entries, tree)
        archive = zipfile.ZipFile(fp)
    with archive:
        infos = archive.infolist()
        if 0 < entries < len(infos):
            raise ArchiveRefused(f"The archive holds more than {tree.max_files:,} files.")
        if 0 < tree.max_bytes < sum(info.file_size for info in infos):
            raise tree.too_big()
        for info in infos:
            tree.tick()
            _zip_member(tree, archive, info)


def _zip_member(tree: Tree, archive: zipfile.ZipFile, info: zipfile.ZipInfo) -> None:
    name = info.orig_filename  # zipfile's ``filename`` is cut at a NUL
    tree.parts(name)  # the name is refused before anything else
    if info.flag_bits & 0x1:
        raise tree.refused(name, "is encrypted")
    mode = info.external_attr >> 16 if info.create_system == 3 else 0  # 3: Unix
    kind = stat.S_IFMT(mode)
    if name.endswith("/") or kind == stat.S_IFDIR:
        tree.add_dir(name)
    elif kind == stat.S_IFLNK:  # Info-ZIP: the target is the member's data
        with reading("archive"), archive.open(info) as stream:
            target = stream.read(PATH_MAX + 1)
        if len(target) > PATH_MAX:
            raise tree.refused(name, f"is a symbolic link longer than {PATH_MAX - 1} bytes")
        tree.add_symlink(name, os.fsdecode(target))
    elif kind in (0, stat.S_IFREG):
        if info.file_size > max(ZIP_RATIO_FLOOR, ZIP_RATIO_MAX * info.compress_size):
            raise tree.refused(name, f"expands more than {ZIP_RATIO_MAX} times (a zip bomb)")
        with reading("archive"):
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
        what = _SPECIAL.get(kind, "a special entry")
        raise tree.refused(name, f"is {what}; only files, folders and links are unpacked")


def _count_zip_entries(fp: BinaryIO, limit: int, tree: Tree) -> None:
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


@contextlib.contextmanager
def spooled(source: BinaryIO, tree: Tree) -> Iterator[BinaryIO]:
    """A non-seekable zip copied to a temporary file (on disk past 8 MiB)."""
    cap = tree.max_bytes + SPOOL_SLACK if tree.max_bytes > 0 else 0
    with tempfile.SpooledTemporaryFile(max_size=8 * CHUNK) as spool:
        total = 0
        while True:
            tree.tick()
            with reading(tree.what):
                chunk = source.read(CHUNK)
            if not chunk:
                break
            total += len(chunk)
            if 0 < cap < total:
                raise ArchiveRefused(f"The archive is larger than {cap:,} bytes.")
            spool.write(chunk)
        spool.seek(0)
        yield spool
