"""A tar (a tar.gz once ungzipped) unpacked into a ``Tree``, read front to back as a stream:
each header (long names, pax records) at most ``HEADER_MAX``, each member's data at most
what its header says, the members counted as they come."""

from __future__ import annotations

import tarfile
from typing import BinaryIO

from .unpack_checks import ArchiveRefused, reading
from .unpack_tree import Tree

HEADER_MAX = 1024 * 1024  # one tar header with its long name and pax records
_SLACK = 2 * tarfile.RECORDSIZE + tarfile.BLOCKSIZE  # tarfile's read-ahead and padding
_SPECIAL = {
    tarfile.CHRTYPE: "a character device",
    tarfile.BLKTYPE: "a block device",
    tarfile.FIFOTYPE: "a FIFO",
}


class _Metered:
    """The (decompressed) tar stream as tarfile reads it, at most ``allow``-ed bytes per
    phase: a header (with its long name and pax records) or one member's data. tarfile reads a
    long name or a pax record whole into memory; this bounds it."""

    def __init__(self, raw: BinaryIO, tree: Tree) -> None:
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


def unpack_into(tree: Tree, raw: BinaryIO) -> None:
    """The members of the (decompressed) tar stream ``raw`` written into ``tree``."""
    meter = _Metered(raw, tree)
    header = f"The archive has an entry header over {HEADER_MAX // 1024:,} KiB."
    meter.allow(HEADER_MAX + _SLACK, header)
    with reading("archive"):
        # A stream: read once, front to back; opened here so that its errors are mapped, and
        # closed by the ``with tar`` below.
        tar = tarfile.open(fileobj=meter, mode="r|")  # noqa: SIM115
    seen = 0
    with tar:
        while True:
            tree.tick()
            meter.allow(HEADER_MAX + _SLACK, header)
            with reading("archive"):
                member = tar.next()
            if member is None:
                return
            tar.members.clear()  # tarfile keeps every header; nothing here needs them
            seen += 1
            if tree.max_files > 0 and seen > 2 * tree.max_files:
                raise ArchiveRefused(f"The archive holds more than {tree.max_files:,} files.")
            _tar_member(tree, tar, member, meter)


def _tar_member(tree: Tree, tar: tarfile.TarFile, member: tarfile.TarInfo, meter: _Metered) -> None:
    """One member written by its type; devices and other special types refused."""
    name = member.name
    if member.isdir():
        tree.add_dir(name)
    elif member.isreg():
        meter.allow(member.size + _SLACK, tree.says(name, "holds more than its header says"))
        with reading("archive"):
            stream = tar.extractfile(member)
        if stream is None:  # not reached: a regular member has data
            raise tree.refused(name, "could not be read")
        tree.add_file(name, stream, executable=bool(member.mode & 0o111), size=member.size)
    elif member.issym():
        tree.add_symlink(name, member.linkname)
    elif member.islnk():
        tree.add_hardlink(name, member.linkname)
    else:
        kind = _SPECIAL.get(member.type, "a special entry")
        raise tree.refused(name, f"is {kind}; only files, folders and links are unpacked")
