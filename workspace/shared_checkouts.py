"""Sessions cloned from the same commit share the files of one checkout (issue 43, design
point 3): where no process writes a worktree file in place (``layers``, ``linked_fork``), a
file can be shared between worktrees by hard link, whoever owns them.

A checkout is kept per tree id in ``WORKSPACE_ROOT/.checkouts/<tree>/``: ``files/`` (hard
links to the first clone's files, made right after git checked them out, before anything
else could touch them; ``.git`` left out) and ``index`` (that clone's own index, whose stat
data the links share but for their ctime). The next clone of a commit with that tree fills
its new worktree with links to ``files/`` and takes ``index`` as its repository's, instead
of writing every file again (``link_into``); its ``git checkout`` then finds nothing to
write. The kept links cost disk only for files no worktree holds any more.

Nothing writes beneath ``.checkouts`` but this module: an entry appears whole, by rename,
and goes by rename first (``sweep``), so a clone that loses the race links nothing and
checks out as before. A link that fails (a file gone, a link count at its limit) undoes
what was linked and the clone checks out. Only on a host whose shell writes into layers
(``sandbox.uses_layers``, decided by the caller): where commands write into the worktree, a
shared file would be written in place. ``SHARED_CHECKOUT_KEEP_DAYS`` (0: no sharing) says
how long an entry unused stays."""

from __future__ import annotations

import contextlib
import logging
import os
import re
import shutil
import stat
import time
from pathlib import Path

from django.conf import settings

from .git_dirs import TMP_PREFIX

log = logging.getLogger(__name__)

ROOT_NAME = ".checkouts"
TREE_ID = re.compile(r"[0-9a-f]{40}|[0-9a-f]{64}")
SCRATCH_HOURS = 6  # a scratch entry older than this was left by a process that died
SWEEP_SECONDS = 3600  # ``sweep_due``: at most one look an hour per process

_last_sweep: float | None = None


def enabled() -> bool:
    return settings.SHARED_CHECKOUT_KEEP_DAYS > 0


def root() -> Path:
    return Path(settings.WORKSPACE_ROOT) / ROOT_NAME


def link_into(tree: str, clone: Path) -> int:
    """Fill ``clone`` (a repository with nothing checked out: only ``.git``) with links to
    the kept checkout of ``tree`` and take its index: the files linked, 0 when none is kept
    or a link failed (then ``clone`` holds only its ``.git`` again)."""
    entry = root() / tree
    if not enabled() or not TREE_ID.fullmatch(tree) or not (entry / "index").is_file():
        return 0
    try:
        os.utime(entry)  # used now: the sweep keeps it
        linked = _copy_links(entry / "files", clone, skip=".git")
        _copy_file(entry / "index", clone / ".git" / "index")
    except OSError as exc:
        log.info("shared checkout %s not used (%s): checked out instead", tree[:12], exc)
        _empty_but_git(clone)
        return 0
    return linked


def keep(tree: str, clone: Path) -> None:
    """Keep ``clone``'s files (``tree`` just checked out by git, nothing else run in it) for
    the next clone of ``tree``, unless an entry exists; never fails the clone."""
    entry = root() / tree
    index = clone / ".git" / "index"
    if not enabled() or not TREE_ID.fullmatch(tree) or entry.exists() or not index.is_file():
        return
    if any((clone / ".git").glob("sharedindex.*")):
        return  # a split index: its shared part would be missing
    scratch = root() / f"{TMP_PREFIX}{tree}-{os.getpid()}-{time.monotonic_ns()}"
    try:
        (scratch / "files").mkdir(parents=True, mode=0o700)
        _copy_links(clone, scratch / "files", skip=".git")
        _copy_file(index, scratch / "index")
        os.rename(scratch, entry)  # fails when another clone kept one meanwhile
    except OSError as exc:
        if not entry.exists():
            log.warning("shared checkout %s not kept: %s", tree[:12], exc)
    finally:
        shutil.rmtree(scratch, ignore_errors=True)


def sweep_due() -> list[str]:
    """``sweep``, at most once per ``SWEEP_SECONDS`` in a process (the run sweeper calls it
    every half lease)."""
    global _last_sweep
    if _last_sweep is not None and time.monotonic() - _last_sweep < SWEEP_SECONDS:
        return []
    _last_sweep = time.monotonic()
    return sweep()


def sweep(now: float | None = None) -> list[str]:
    """Remove the entries unused for ``SHARED_CHECKOUT_KEEP_DAYS`` (all of them when sharing
    is off) and scratch entries a dead process left: the names removed. Each is renamed
    first, so no clone links from one half removed."""
    now = time.time() if now is None else now
    keep_seconds = settings.SHARED_CHECKOUT_KEEP_DAYS * 86400
    removed = []
    try:
        entries = list(os.scandir(root()))
    except FileNotFoundError:
        return []
    for entry in entries:
        try:
            age = now - entry.stat(follow_symlinks=False).st_mtime
        except OSError:
            continue
        scratch = entry.name.startswith(TMP_PREFIX)
        if (scratch and age > SCRATCH_HOURS * 3600) or (not scratch and age > keep_seconds):
            gone = Path(entry.path) if scratch else root() / f"{TMP_PREFIX}gone-{entry.name}"
            with contextlib.suppress(OSError):
                if not scratch:
                    os.rename(entry.path, gone)
                shutil.rmtree(gone, ignore_errors=True)
                removed.append(entry.name)
    return removed


def _copy_links(source: Path, target: Path, *, skip: str) -> int:
    """``source``'s tree made again in ``target``: directories of its own, a hard link for
    each regular file, a link copied as a link (never followed); ``skip`` left out at the
    top. Anything else (git checks out nothing else) is left out. The files linked."""
    linked = 0
    stack = [""]
    while stack:
        relative = stack.pop()
        with os.scandir(os.path.join(source, relative)) as entries:
            for entry in entries:
                if not relative and entry.name == skip:
                    continue
                name = os.path.join(relative, entry.name)
                mode = entry.stat(follow_symlinks=False).st_mode
                if stat.S_ISDIR(mode):
                    os.mkdir(os.path.join(target, name), 0o755)
                    stack.append(name)
                elif stat.S_ISREG(mode):
                    os.link(entry.path, os.path.join(target, name), follow_symlinks=False)
                    linked += 1
                elif stat.S_ISLNK(mode):
                    os.symlink(os.readlink(entry.path), os.path.join(target, name))
    return linked


def _copy_file(source: Path, target: Path) -> None:
    """A copy of ``source`` (keeping its mtime: git's racy check reads it) renamed in."""
    scratch = target.with_name(f"{TMP_PREFIX}{os.getpid()}-{target.name}")
    try:
        shutil.copy2(source, scratch, follow_symlinks=False)
        os.replace(scratch, target)
    finally:
        scratch.unlink(missing_ok=True)


def _empty_but_git(clone: Path) -> None:
    for entry in os.scandir(clone):
        if entry.name == ".git":
            continue
        if entry.is_dir(follow_symlinks=False):
            shutil.rmtree(entry.path)
        else:
            os.unlink(entry.path)
