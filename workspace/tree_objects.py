"""Git objects written in the store without git (a loose object is its zlib'd bytes under its
id), and trees composed there from a base tree and some entries (``compose_entries``): what a
revert (``trees.compose``) and a snapshot from the journal (``journal_track``) write. Only the
trees on the changed paths are read (one ``cat-file --batch``) and written."""

from __future__ import annotations

import hashlib
import os
import zlib
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Protocol

from . import git_output
from .git_dirs import TMP_PREFIX

Entries = dict[bytes, tuple[bytes, bytes]]  # a tree's body: {name: (mode, raw id)}


class Store(Protocol):
    """What is used here of a ``snapshots.Snapshots``: its git dir and a git that must
    succeed."""

    git_dir: Path

    def check(
        self, args: Sequence[str], *, input: bytes | None = None, index: str | None = None
    ) -> bytes: ...


def write_object(snap: Store, kind: str, body: bytes) -> str:
    """Store an object (a ``tree``, a ``blob``, a ``commit``) as git writes a loose one: its
    id. One the store holds already is freshened, not written again (its id is its
    content)."""
    raw = b"%s %d\0" % (kind.encode("ascii"), len(body)) + body
    hexsha = hashlib.sha1(raw).hexdigest()
    target = snap.git_dir / "objects" / hexsha[:2] / hexsha[2:]
    try:
        # Already there: freshen it, as git does for the objects it would write, so that
        # ``prune_store`` sees a tree a revert is about to name as new, not as old garbage.
        os.utime(target)
    except FileNotFoundError:
        scratch = target.with_name(f"{TMP_PREFIX}{os.getpid()}-{hexsha[2:]}")
        data = zlib.compress(raw)
        try:
            scratch.write_bytes(data)
        except FileNotFoundError:  # the first object of its fan-out folder
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch.write_bytes(data)
        os.replace(scratch, target)
    except OSError:
        pass  # another user's file: freshening is a courtesy to the prune, not a need
    return hexsha


def compose_entries(
    snap: Store,
    base: str,
    wanted: dict[str, tuple[str, str] | None],
    read: dict[str, Entries] | None = None,
) -> str:
    """The tree that is ``base`` with each file of ``wanted`` as given: ``(mode, id)``, or
    None for no file there. Only the trees on those paths are read and written (``read``:
    those of them the caller read already, ``read_trees``; they are changed here)."""
    if not wanted:
        return base
    dirs = ancestors(wanted)
    trees = dict(read or {})
    missing = sorted(d for d in dirs if d not in trees)
    if missing:
        trees.update(read_trees(snap, base, missing))
    for name, entry in wanted.items():
        directory, _, leaf = name.rpartition("/")
        key = leaf.encode("utf-8", "surrogateescape")
        if entry is None:
            trees[directory].pop(key, None)
        else:
            trees[directory][key] = (entry[0].encode(), bytes.fromhex(entry[1]))
    for directory in sorted(dirs, key=lambda d: -d.count("/") - (1 if d else 0)):
        if not directory:
            continue
        parent, _, leaf = directory.rpartition("/")
        key = leaf.encode("utf-8", "surrogateescape")
        if trees[directory]:
            sha = write_tree(snap, trees[directory])
            trees[parent][key] = (b"40000", sha)
        elif trees[parent].get(key, (b"",))[0] == b"40000":
            trees[parent].pop(key)  # emptied; a file of that name (wanted) stays
    return write_tree(snap, trees[""]).hex()


def ancestors(paths: Iterable[str]) -> set[str]:
    """The directories ``paths`` lie in, each with its own ("" the root)."""
    dirs = {""}
    for name in paths:
        parts = name.split("/")[:-1]
        for i in range(1, len(parts) + 1):
            dirs.add("/".join(parts[:i]))
    return dirs


def read_trees(snap: Store, base: str, dirs: list[str]) -> dict[str, Entries]:
    """The entries of each of ``dirs`` in ``base`` (one ``cat-file --batch``); none for a
    directory that is not there, or not a directory there."""
    specs = "".join(f"{base}:{d}\n" if d else f"{base}\n" for d in dirs)
    data = snap.check(["cat-file", "--batch"], input=specs.encode("utf-8", "surrogateescape"))
    result = {}
    for directory, record in zip(dirs, git_output.batch_objects(data, len(dirs)), strict=True):
        tree = record is not None and record[0] == b"tree"
        result[directory] = git_output.parse_tree(record[1]) if tree else {}
    return result


def write_tree(snap: Store, entries: Entries) -> bytes:
    """Store a tree object of ``entries`` (``store.write_object``): its raw id."""
    return bytes.fromhex(write_object(snap, "tree", git_output.tree_body(entries)))
