"""Starting a cloned session's snapshots from the clone itself: its packs copied into the
object store and its index taken as the git dir's, so the first snapshot of a large
repository is a stat walk, not a hash of every file (``seed``)."""

from __future__ import annotations

import os
import re
import shutil
import stat
from collections.abc import Iterable
from pathlib import Path

from django.conf import settings

from . import change_journal
from .git_dirs import TMP_PREFIX
from .git_names import git_refuses
from .index_files import claim_index, holding_index
from .snapshots import SnapshotError, Snapshots

PACK_NAME = re.compile(r"pack-[0-9a-f]{40,64}\.(?:pack|idx|rev)")


def seed(snap: Snapshots, index: Path, packs: Iterable[Path]) -> None:
    """Start ``snap`` from a clone git just made in its worktree: the packs (``.pack``,
    ``.idx``, ``.rev``) copied into the object store and the index copied as the git dir's,
    so the next ``track`` is a stat walk that finds every file as the clone wrote it, not a
    hash of every file.

    Copies, never links: the worktree's ``.git`` is the agent's to write, and a link would
    let it rewrite objects every session reads. Files are opened without following a link
    and must be regular. Call it before anything (the agent) could have touched the clone:
    the packs are trusted as git's own fetch checked them (every object id verified), which
    is what makes copying them safe for a shared, content-addressed store. A pack of the
    same name is already there (same name, same content) and is left alone; each file is
    written under a temporary name and renamed, ``.idx`` last, so a reader never sees an
    index without its pack.

    The index is checked before it is used: a split index (whose shared part is not here),
    an unmerged entry, a path git would refuse (``..``, ``.git``) or an object the store
    does not hold, and it is dropped (the next ``track`` then hashes every file, slower,
    still right). Entries of ``SNAPSHOT_EXCLUDE`` and files over
    ``SNAPSHOT_MAX_FILE_BYTES`` leave it; gitlinks (submodules) are taken apart by
    ``track`` like any other. It keeps the clone's mtime (git's "racily clean" check needs
    it), is rewritten as index version 4, and its tree becomes the last snapshot's."""
    snap.ensure()
    _copy_packs(snap, packs)
    target = snap.git_dir / "index"
    scratch = snap.git_dir / f"index{TMP_PREFIX}seed"
    try:
        _copy_regular(Path(index), scratch)
    except OSError:
        scratch.unlink(missing_ok=True)
        return
    try:
        if not _seedable(snap, str(scratch)):
            return
        snap.git("update-index", "--index-version", "4", index=str(scratch))
        # Its tree, as the last snapshot's: git checks that the store holds every object
        # the index names (a pack not given, a shallow clone's: refused, as a tree naming
        # a missing blob would be), and the first ``track`` then checks the sizes of only
        # what changed since the clone; the large files are taken out here.
        result = snap.run(["write-tree"], index=str(scratch))
        if result.code != 0:
            return
        tree = result.stdout.decode().strip()
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        large = snap.large_blobs(tree, limit) if limit else []
        if large:
            _remove(snap, large, str(scratch))
            tree = snap.git("write-tree", index=str(scratch)).strip()
        os.replace(scratch, target)
        (snap.git_dir / "last-tree").write_text(tree)
    finally:
        scratch.unlink(missing_ok=True)


def _copy_packs(snap: Snapshots, packs: Iterable[Path]) -> None:
    """A clone's pack files into the store, ``.idx`` last (see ``seed``)."""
    store = (snap.objects if snap.objects is not None else snap.git_dir / "objects") / "pack"
    store.mkdir(parents=True, exist_ok=True)
    order = {".pack": 0, ".rev": 1, ".idx": 2}
    wanted = sorted(
        (p for p in map(Path, packs) if PACK_NAME.fullmatch(p.name)),
        key=lambda p: (order[p.suffix], p.name),
    )
    for pack in wanted:
        if not (store / pack.name).exists():
            _copy_regular(pack, store / pack.name)


def _seedable(snap: Snapshots, index: str) -> bool:
    """Whether the index at ``index`` (a clone's) may become the git dir's: see ``seed``.
    Drops its entries that ``SNAPSHOT_EXCLUDE`` names."""
    listed = snap.run(["ls-files", "--stage", "-z"], index=index)
    if listed.code != 0:
        return False  # a split index, a version git does not read, not an index
    for entry in listed.stdout.split(b"\0"):
        meta, _, name = entry.partition(b"\t")
        if not entry:
            continue
        fields = meta.split()
        if len(fields) != 3 or fields[2] != b"0" or not name:
            return False
        path = name.decode("utf-8", "surrogateescape")
        if path.startswith("/") or git_refuses(path):
            return False
    exclude = snap.git_dir / "info" / "exclude"
    excluded = snap.check(
        ["ls-files", "--cached", "--ignored", f"--exclude-from={exclude}", "-z"], index=index
    )
    _remove(snap, [n for n in excluded.decode("utf-8", "surrogateescape").split("\0") if n], index)
    return True


def _remove(snap: Snapshots, names: list[str], index: str) -> None:
    """Take ``names`` out of the index at ``index`` (any number: read from stdin)."""
    if names:
        snap.check(
            ["update-index", "--force-remove", "-z", "--stdin"],
            input=b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in names),
            index=index,
        )


def _copy_regular(source: Path, target: Path) -> None:
    """Copy ``source`` (a regular file, not reached through a link in its last component)
    to ``target`` through a temporary name, keeping its mtime; never a link."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise OSError(f"{source}: not a regular file")
        scratch = target.with_name(f"{TMP_PREFIX}{os.getpid()}-{target.name}")
        try:
            with open(scratch, "wb") as dst:
                shutil.copyfileobj(src, dst, 1 << 20)
            os.utime(scratch, ns=(info.st_atime_ns, info.st_mtime_ns))
            os.replace(scratch, target)
        except BaseException:
            scratch.unlink(missing_ok=True)
            raise


def adopt(snap: Snapshots, index: str, tree: str) -> None:
    """Make ``index`` (a file in ``snap``'s git dir: a snapshot of the same files taken
    before they were moved into the worktree, ``repositories/fill.py``) the session's index, and
    ``tree`` its last snapshot; the worktree's journal starts from it (its files are the
    index's: a rename of their folder changes none of their stat data)."""
    wait = settings.SNAPSHOT_GIT_TIMEOUT_SECONDS
    start = change_journal.size(snap.worktree)
    with holding_index(snap.git_dir, wait) as held:
        if not held or not claim_index(snap.git_dir):
            raise SnapshotError(f"the index is still in use after {wait:g}s")
        os.replace(index, snap.git_dir / "index")
        (snap.git_dir / "last-tree").write_text(tree)
        change_journal.walked(snap.worktree, snap.git_dir, start)
