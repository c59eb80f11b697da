"""The shared object store (``snapshots.store_path``), by object id (an object is written as
a loose one by ``tree_objects.write_object``, which freshens one already there): reading what
the store holds (``object_info``, ``objects_named``, ``read_objects``: what an export and an
import move), and deleting what no snapshot needs any more (``prune_store``, ``manage.py
prune_snapshots``).
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from . import git_output
from .git_dirs import TMP_PREFIX
from .git_output import OBJECT_ID
from .index_files import shared_indexes
from .snapshots import MissingObjectError, Snapshots


def object_info(snap: Snapshots, shas: Iterable[str]) -> list[tuple[str, str, int]]:
    """``(id, type, size)`` of each of ``shas`` the store holds (the others left out)."""
    shas = list(shas)
    if not shas:
        return []
    snap.ensure()
    return git_output.batch_check(snap.check(["cat-file", "--batch-check"], input=_lines(shas)))


def objects_named(snap: Snapshots, trees: Iterable[str]) -> tuple[set[str], set[str]]:
    """Every object the trees ``trees`` (which the store holds) reach, themselves
    included; and the ids those trees name that the store does not hold."""
    trees = list(trees)
    if not trees:
        return set(), set()
    snap.ensure()
    args = ["rev-list", "--objects", "--missing=print", "--stdin"]
    return git_output.rev_list_objects(snap.check(args, input=_lines(trees)))


def read_objects(snap: Snapshots, shas: Sequence[str]) -> dict[str, tuple[str, bytes]]:
    """``{id: (type, body)}`` of ``shas``, which the store must hold (MissingObjectError
    otherwise)."""
    if not shas:
        return {}
    snap.ensure()
    data = snap.check(["cat-file", "--batch"], input=_lines(shas))
    objects: dict[str, tuple[str, bytes]] = {}
    for sha, record in zip(shas, git_output.batch_objects(data, len(shas)), strict=True):
        if record is None:  # "<id> missing"
            raise MissingObjectError(f"git cat-file: {sha} is missing")
        objects[sha] = (record[0].decode("ascii"), record[1])
    return objects


def _lines(values: Iterable[str]) -> bytes:
    return "".join(f"{value}\n" for value in values).encode("ascii")


# -- pruning the shared store ---------------------------------------------------------------------
# One walk over the whole store: far longer than any step's git call may take.
PRUNE_GIT_TIMEOUT_SECONDS = 3600.0


@dataclass(frozen=True)
class PruneResult:
    named: int  # distinct object ids that rows and git dirs name
    missing: int  # of those, not in the store (a gitlink's commit, a lost object): nothing to keep
    reachable: int  # objects those reach: kept
    young: int  # unreachable loose objects newer than the cutoff: kept
    pruned: int  # unreachable loose objects older than the cutoff: deleted (dry run: would be)
    pruned_bytes: int
    temp_files: int  # stale half-written object files, deleted alike
    dry_run: bool


@dataclass
class _Sweep:
    """What the walk of the fan-out directories found, and deleted unless a dry run."""

    young: int = 0
    pruned: int = 0
    pruned_bytes: int = 0
    temp_files: int = 0


def prune_store(
    store: Path,
    named: Iterable[str],
    *,
    git_dirs: Iterable[Path],
    cutoff: float,
    dry_run: bool = False,
) -> PruneResult:
    """Delete the loose objects of ``store`` that nothing needs: not reachable from ``named``
    (the trees the database names) nor from any of ``git_dirs`` (its ``last-tree`` and the
    blobs its index names, which the next ``git add`` reuses without writing them again), and
    last written before ``cutoff`` (a Unix time).

    Why a walk of our own rather than ``git prune``: prune only keeps what one repository's
    refs and index reach, so every named tree would first have to become a ref and every
    session's index would be ignored; here the kept set is computed by git (``cat-file
    --batch-check`` then ``rev-list --objects``, in a scratch git dir on the same store) and
    the deletion is a plain walk of the fan-out directories, which also counts what it frees.

    The cutoff is what makes running beside live sessions safe, as it does for ``git prune``:
    an object a step, a revert or a fork is writing right now is newer than the cutoff, and
    git (and ``tree_objects.write_object``) freshen the mtime of an object they would write again.
    The caller takes ``cutoff`` before it reads the database, so every object written after
    that read is young. Packs are never touched (nothing here writes one)."""
    if not store.is_dir():
        return PruneResult(0, 0, 0, 0, 0, 0, 0, dry_run)
    with tempfile.TemporaryDirectory(prefix="prune-snapshots-") as scratch:
        reader = Snapshots(
            git_dir=Path(scratch) / "reader.git", worktree=Path(scratch) / "wt", objects=store
        )
        reader.ensure()
        roots = {name for name in named if OBJECT_ID.fullmatch(name)}
        for git_dir in git_dirs:
            roots |= _named_by_git_dir(reader, git_dir)
        present = _present(reader, roots)
        reachable = _reachable(reader, present)
    swept = _sweep(store, reachable, cutoff, dry_run)
    return PruneResult(
        named=len(roots),
        missing=len(roots) - len(present),
        reachable=len(reachable),
        young=swept.young,
        pruned=swept.pruned,
        pruned_bytes=swept.pruned_bytes,
        temp_files=swept.temp_files,
        dry_run=dry_run,
    )


def _sweep(store: Path, reachable: set[str], cutoff: float, dry_run: bool) -> _Sweep:
    """Walk the fan-out directories of ``store``: the loose objects not in ``reachable`` and
    our half-written files (``TMP_PREFIX``, git's ``tmp_obj_``), deleted when older than
    ``cutoff``, counted when younger."""
    swept = _Sweep()
    for fan in sorted(os.scandir(store), key=lambda e: e.name):
        if len(fan.name) != 2 or not _is_hex(fan.name) or not fan.is_dir(follow_symlinks=False):
            continue  # info/, pack/
        # The fan-out directories stay, even empty: a writer may be about to put a file in one.
        for entry in os.scandir(fan.path):
            is_object = len(entry.name) == 38 and _is_hex(entry.name)
            if is_object and fan.name + entry.name in reachable:
                continue
            if not is_object and not entry.name.startswith((TMP_PREFIX, "tmp_obj_")):
                continue  # not ours to judge
            try:
                stat = entry.stat(follow_symlinks=False)
            except FileNotFoundError:
                continue
            if stat.st_mtime >= cutoff:
                swept.young += 1 if is_object else 0
                continue
            if is_object:
                swept.pruned += 1
                swept.pruned_bytes += stat.st_size
            else:
                swept.temp_files += 1
            if not dry_run:
                Path(entry.path).unlink(missing_ok=True)
    return swept


def _is_hex(name: str) -> bool:
    return all(c in "0123456789abcdef" for c in name)


def _named_by_git_dir(reader: Snapshots, git_dir: Path) -> set[str]:
    """What one session's git dir still needs: its last tree (written before any row names
    it) and every blob its index names (the next ``git add`` reuses those without writing
    them again, so a pruned one would make a tree that names a missing blob)."""
    named: set[str] = set()
    try:
        last = (git_dir / "last-tree").read_text().strip()
    except (FileNotFoundError, NotADirectoryError):
        last = ""
    if OBJECT_ID.fullmatch(last):
        named.add(last)
    index = git_dir / "index"
    if index.is_file():
        # A split index names its shared part, which git looks for in the git dir it runs
        # in: the reader's, which gets a link to each of this git dir's.
        for stale in shared_indexes(reader.git_dir):
            stale.unlink()
        for shared in shared_indexes(git_dir):
            (reader.git_dir / shared.name).symlink_to(shared)
        out = reader.check(
            ["ls-files", "--stage", "-z"], index=str(index), timeout=PRUNE_GIT_TIMEOUT_SECONDS
        )
        named |= git_output.staged_ids(out)
    return named


def _present(reader: Snapshots, ids: set[str]) -> list[str]:
    """The ids of ``ids`` that the store (or an alternate it lists) holds."""
    if not ids:
        return []
    out = reader.check(
        ["cat-file", "--batch-check"],
        input="".join(f"{sha}\n" for sha in sorted(ids)).encode(),
        timeout=PRUNE_GIT_TIMEOUT_SECONDS,
    )
    return [line.split()[0].decode() for line in out.splitlines() if not line.endswith(b"missing")]


def _reachable(reader: Snapshots, roots: list[str]) -> set[str]:
    """Every object reachable from ``roots`` (trees and blobs), the roots included. An object
    a tree names but the store lost is listed by ``--missing=print`` with a ``?``: left out,
    so one lost blob does not stop the prune (it deletes nothing that is there and needed)."""
    if not roots:
        return set()
    out = reader.check(
        ["rev-list", "--objects", "--missing=print", "--stdin"],
        input="".join(f"{sha}\n" for sha in roots).encode(),
        timeout=PRUNE_GIT_TIMEOUT_SECONDS,
    )
    return git_output.rev_list_objects(out)[0]
