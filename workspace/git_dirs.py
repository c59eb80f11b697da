"""A snapshot git dir on disk, written directly rather than by git: its layout (what
``git init`` and five ``git config`` calls would write, six processes saved per new session
or fork), its ``info/exclude``, and the links of its objects to the shared store.

``Snapshots.ensure`` and ``Snapshots.adopt_objects_of`` (``snapshots.py``) call these.
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterable
from pathlib import Path

TMP_PREFIX = ".tmp-"  # a file written under a temporary name, then renamed (git's: tmp_obj_)
# ``info/attributes`` wins over every ``.gitattributes`` of the worktree: a snapshot holds each
# file's bytes as they are, and a restore writes them back as they were. A worktree's
# attributes would otherwise convert line endings (a revert changing them), re-encode
# (``working-tree-encoding=UTF-32`` on a file without a byte order mark made every ``git add``
# die: a session no snapshot could be taken of) or name a filter.
ATTRIBUTES = "* -text -eol -working-tree-encoding -filter -ident\n"

GIT_CONFIG = """[core]
\trepositoryformatversion = 0
\tfilemode = true
\tbare = false
\tautocrlf = false
\tquotepath = false
\tuntrackedCache = true
[gc]
\tauto = 0
"""


def make_git_dir(
    git_dir: Path, worktree: Path, objects: Path | None, exclude: Iterable[str]
) -> None:
    """Make the git dir if it is missing, and the worktree. HEAD comes last, so a git dir
    interrupted half-way is made again. ``objects``: the shared store that ``objects`` links
    to. ``exclude``: the patterns of ``info/exclude`` besides ``.git``.

    Safe when several threads or processes make it at once (a page's first requests of a
    session that has none yet): each step tolerates another's, and every file is written
    under a name of its own and renamed into place, so git never reads one half-written."""
    worktree.mkdir(parents=True, exist_ok=True)
    if (git_dir / "HEAD").exists():
        write_exclude(git_dir, exclude)
        return
    git_dir.mkdir(parents=True, exist_ok=True)
    own = git_dir / "objects"
    if objects is not None and not own.exists():
        # One content-addressed store for every session: a fork's trees are already
        # there, so forking files costs nothing per object (objects are immutable).
        objects.mkdir(parents=True, exist_ok=True)
        with contextlib.suppress(FileExistsError):  # another request made it meanwhile
            own.symlink_to(os.path.relpath(objects, git_dir), True)
    for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
        (git_dir / sub).mkdir(parents=True, exist_ok=True)
    write_exclude(git_dir, exclude)
    _write(git_dir / "config", GIT_CONFIG)
    _write(git_dir / "HEAD", "ref: refs/heads/main\n")


def _write(path: Path, text: str) -> None:
    """``text`` into ``path``, whole or not at all: under a name of this thread's, then
    renamed."""
    scratch = path.with_name(f"{path.name}{TMP_PREFIX}{os.getpid()}-{threading.get_ident()}")
    scratch.write_text(text)
    os.replace(scratch, path)


def write_exclude(git_dir: Path, exclude: Iterable[str]) -> None:
    """``info/exclude``: the worktree's own ``.git``, and ``exclude`` (``SNAPSHOT_EXCLUDE``).
    Rewritten only when the setting changed (git's untracked cache is keyed on this file).
    And ``info/attributes`` (``ATTRIBUTES``)."""
    _write_if_changed(
        git_dir / "info" / "exclude", "".join(f"{line}\n" for line in (".git", *exclude))
    )
    _write_if_changed(git_dir / "info" / "attributes", ATTRIBUTES)


def _write_if_changed(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except (FileNotFoundError, UnicodeDecodeError):
        pass
    path.parent.mkdir(parents=True, exist_ok=True)
    _write(path, text)


def add_alternate(objects: Path, other_git_dir: Path) -> None:
    """A session made before the shared store kept its objects in its own git dir
    (``other_git_dir``): list them as an alternate of the store ``objects``, so a fork of it
    can read its trees."""
    own = other_git_dir / "objects"
    if not own.is_dir() or own.is_symlink():
        return
    alternates = objects / "info" / "alternates"
    alternates.parent.mkdir(parents=True, exist_ok=True)
    known = alternates.read_text().split() if alternates.exists() else []
    if str(own.resolve()) not in known:
        with alternates.open("a") as fh:
            fh.write(f"{own.resolve()}\n")
