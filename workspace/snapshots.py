"""Worktree snapshots: git trees in a git directory of the session's own.

``GIT_DIR=<WORKSPACE_ROOT>/.snapshots/<session>.git GIT_WORK_TREE=<worktree>``, so a ``.git``
that the worktree itself contains is never used or changed (it is excluded).

* ``track()`` = add + write-tree: content-addressed, so an unchanged worktree gives the same
  tree id and costs no new objects. ``track(journal=True)`` (a step, a history move) adds
  only the paths the worktree's writers said they changed (``change_journal``): no walk.
* ``patch(a, b)`` = the files that differ between two trees.
* ``restore(tree)`` = the exact tree: changed files rewritten, missing ones brought back,
  files that are not in it deleted.
* ``trees.compose(snap, base, sources)`` builds, in the store, the tree that is ``base`` with
  some files taken from other trees, without touching the worktree; ``checkout(tree, files)``
  then writes only those files. Revert is built on these two, so its cost follows the files
  it changes, not the size of the worktree.

Every git process starts in one place, ``Snapshots._run``: with a timeout
(``SNAPSHOT_GIT_TIMEOUT_SECONDS``), and nothing but ``SnapshotError`` ever comes out of it.
The worktree is hostile (docs/semantics.md §11.1): the runner gives git an environment of its own
(no system or global config, no replace objects, nothing of the server's) and overrides
(``GIT_OVERRIDES``) that switch off hooks, fsmonitor, submodules and protocols, and it leaves
git no way to start a child git or a shell (``PATH`` and ``GIT_EXEC_PATH`` lead nowhere). A
repository nested in the worktree is never a submodule here: its files are snapshotted as
plain files, its ``.git`` left out (``snapshot_add``), so no git ever runs inside it.

At size: ``seeding.seed`` starts a cloned session from the clone's own packs and index (its
first snapshot a stat walk, not a hash of every file); the index is version 4 and split
(``SCALE_OVERRIDES``); ``SNAPSHOT_EXCLUDE`` (``info/exclude``) keeps what package managers
and interpreters rebuild out of every snapshot.

The session's index has one writer at a time: every write of it (``track``, ``materialize``)
holds ``index_files.holding_index``, a kernel lock that the git processes it starts hold too.
The busy lock and the session row order the loop and the history moves, but not the thread of
a cancelled step still snapshotting when the next run starts, nor a worker stopped past its
lease that goes on: without the lock two ``git add`` met on ``index.lock``. A ``track`` that
cannot have the index within ``INDEX_WAIT_SECONDS`` snapshots in a scratch copy (``peek``).
Readers beside the loop (diffs, previews, shares) use ``peek`` or read objects only, which are
immutable; a fork writes only its new git dir.

Around it, in ``workspace``: ``store``, ``trees``, ``tree_reads``, ``skipped_files``,
``seeding`` take a ``Snapshots``; ``journal_track`` (a snapshot from the journal),
``git_output``, ``git_dirs``, ``index_files``, ``worktree_paths`` are called from here.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, overload

from django.conf import settings

from . import (
    change_journal,
    git_dirs,
    git_output,
    git_stream,
    index_files,
    journal_track,
    kept_usage,
    snapshot_add,
    worktree_paths,
)
from .index_files import claim_index, holding_index, writer_fd
from .snapshot_errors import MissingObjectError, SnapshotError

__all__ = ["MissingObjectError", "SnapshotError", "Snapshots"]

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

# A worktree of many files (tens of thousands): what git itself offers, given on every command
# line so that git dirs made before these settings get them too.
# * ``index.version=4``: paths prefix-compressed, a third smaller index to read and write (a
#   new index; ``seeding.seed`` converts a clone's). ``feature.manyFiles`` is this and the
#   untracked cache (already in ``git_dirs.GIT_CONFIG``) in git 2.39.
# * ``core.splitIndex``: the index is a shared part (``sharedindex.<id>`` in the git dir,
#   rewritten when a fifth of the entries changed) and a small part that a step rewrites, so a
#   step writes and hashes kilobytes, not the whole index.
# * ``core.preloadIndex`` (git's default, stated): the stat walk on every core.
# No fsmonitor (git 2.39's builtin daemon exists on macOS and Windows only; a hook would run a
# program): a step's snapshot takes the paths its writers said instead (``change_journal``).
# A scratch index (``peek``) is written whole (``core.splitIndex=false`` for it): it would
# otherwise leave shared parts of its own in the git dir.
# * ``core.trustctime=false``: a file is known changed by its inode, size and mtime, not its
#   ctime, which a new hard link to it changes (a fork sharing it, ``linked_fork``): the
#   source's next snapshot would hash every shared file again. No writer changes a file in
#   place (issue 43): a change is a new file, a new inode.
SCALE_OVERRIDES = (
    "index.version=4",
    "core.splitIndex=true",
    "core.preloadIndex=true",
    "core.trustctime=false",
)
SCALE_FLAGS = tuple(a for o in SCALE_OVERRIDES for a in ("-c", o))
SCRATCH_FLAGS = ("-c", "core.splitIndex=false")

# Given on every git command line: ``-c`` wins over every config file git reads, and git hands
# these on to any git it would start. Nothing the worktree holds is run or followed.
GIT_OVERRIDES = (
    f"core.hooksPath={os.devnull}",
    "core.fsmonitor=false",
    f"core.attributesFile={os.devnull}",
    f"core.excludesFile={os.devnull}",
    "diff.ignoreSubmodules=all",
    "submodule.recurse=false",
    "protocol.allow=never",
    "protocol.file.allow=never",
    "safe.bareRepository=explicit",
    "gc.auto=0",
    "maintenance.auto=false",
)
GIT_FLAGS = ("--no-replace-objects", *(a for o in GIT_OVERRIDES for a in ("-c", o)))
# How long a ``track`` waits for another writer of the index before it snapshots in a scratch
# copy (the wait a stopped worker's hold costs each step of the run that took its place).
INDEX_WAIT_SECONDS = 1.0
_GITS: dict[str, str] = {}  # the server's PATH → the git found on it (the server sets PATH)
MISSING = re.compile(
    r"bad object|unable to read|could not read|not a valid object|missing (?:blob|tree)"
    r"|not a tree object|invalid object",
    re.IGNORECASE,
)


def _failure(what: str, message: str) -> SnapshotError:
    """The error of a git that failed, saying ``message`` (git's own)."""
    error = MissingObjectError if MISSING.search(message) else SnapshotError
    return error(f"{what}: {message}")


@dataclass(frozen=True)
class GitResult:
    """What a git process answered: its exit code, its output and its error text."""

    code: int
    stdout: bytes
    stderr: str


@dataclass(frozen=True)
class Snapshots:
    git_dir: Path
    worktree: Path
    objects: Path | None = None  # a shared object store (``git_dir/objects`` links to it)

    _no_index = property(lambda self: str(self.git_dir / "index.none"))  # an empty index

    def _env(self, index: str | None = None) -> dict[str, str]:
        """Git's whole environment: nothing of the server's (its secrets, its ``GIT_*``)."""
        env = {
            # No child git (a submodule's ``status``), no helper, no shell command found: git
            # prepends its exec path to PATH, and /dev/null holds nothing anyone can add to.
            "PATH": os.devnull,
            "GIT_EXEC_PATH": os.devnull,
            "LC_ALL": "C",  # git's messages as ``check`` reads them
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(self.worktree),
            "GIT_CEILING_DIRECTORIES": str(self.worktree.parent),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_ATTR_NOSYSTEM": "1",
            "GIT_NO_REPLACE_OBJECTS": "1",
            "GIT_TERMINAL_PROMPT": "0",
            "GIT_ALLOW_PROTOCOL": "",
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        if index:
            env["GIT_INDEX_FILE"] = index
        return env

    @overload
    def _run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        index: str | None = None,
        timeout: float | None = None,
        stream: Literal[False] = False,
    ) -> GitResult: ...

    @overload
    def _run(
        self, args: Sequence[str], *, timeout: float | None = None, stream: Literal[True]
    ) -> Iterator[bytes]: ...

    def _run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        index: str | None = None,
        timeout: float | None = None,
        stream: bool = False,
    ) -> GitResult | Iterator[bytes]:
        """The one place a git process starts. A non-zero exit is returned for the caller to
        judge (``_add_all`` and ``read_blob`` expect some); a git that cannot start, or that
        has not answered after ``timeout`` (default ``SNAPSHOT_GIT_TIMEOUT_SECONDS``), is a
        ``SnapshotError``: the engine catches that one, so a broken or hung git costs a
        snapshot, never the run's worker. Anything else (a Celery time limit, ^C) goes on up
        after the process is killed. With ``stream`` (``stream()``), git's stdout is not
        collected: an iterator (``output``) hands it on as git writes it."""
        limit = settings.SNAPSHOT_GIT_TIMEOUT_SECONDS if timeout is None else timeout
        # git on the server's PATH (git's own is empty): looked up once for each PATH.
        git = _GITS.get(path := os.environ.get("PATH", os.defpath)) or shutil.which(
            "git", path=path
        )
        if git is None:
            raise SnapshotError(f"git {args[0]}: git is not installed")
        _GITS[path] = git
        held = writer_fd(self.git_dir) if index is None else None
        try:
            proc = subprocess.Popen(
                [git, *GIT_FLAGS, *SCALE_FLAGS, *(SCRATCH_FLAGS if index else ()), *args],
                cwd=self.worktree,
                env=self._env(index or (self._no_index if git_stream.objects_only(args) else None)),
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Its own process group, so a kill reaches whatever git started too: a child
                # left holding the pipes would keep ``communicate`` waiting past the timeout.
                start_new_session=True,
                pass_fds=() if held is None else (held,),
            )
        except OSError as exc:  # no git, no worktree, an argument list over the kernel's limit
            raise SnapshotError(f"git {args[0]}: {exc}") from exc
        if stream:
            chunks = git_stream.output(proc, f"git {args[0]}", limit, _failure)
            next(chunks)  # started: from here, closing or dropping the iterator kills git
            return chunks
        with proc:  # on the way out: the pipes closed, the process reaped
            done = git_stream.collect(proc, input, limit)
        if done is None:
            raise SnapshotError(f"git {args[0]}: no answer after {limit:g}s")
        return GitResult(proc.returncode, done[0], done[1].decode(errors="replace").strip())

    def run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        index: str | None = None,
        timeout: float | None = None,
    ) -> GitResult:
        """``_run``, for a caller that judges git's exit code itself."""
        return self._run(args, input=input, index=index, timeout=timeout)

    def check(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        index: str | None = None,
        timeout: float | None = None,
    ) -> bytes:
        """``_run`` for the calls that must succeed: a non-zero exit is a ``SnapshotError``
        with git's own message."""
        result = self._run(args, input=input, index=index, timeout=timeout)
        if result.code != 0:
            raise _failure(f"git {args[0]}", result.stderr or f"exit code {result.code}")
        return result.stdout

    def git(self, *args: str, input: bytes | None = None, index: str | None = None) -> str:
        """``check``, its output as text (paths decoded with ``surrogateescape``)."""
        return self.check(args, input=input, index=index).decode("utf-8", "surrogateescape")

    def stream(self, args: Sequence[str], *, timeout: float | None = None) -> Iterator[bytes]:
        """``check`` for an output too large to hold (a download): git's stdout in chunks as
        git writes them. ``timeout`` (default ``SNAPSHOT_GIT_TIMEOUT_SECONDS``) is how long
        git may write nothing, not its whole run: a slow reader holds git back. Closing the
        iterator early (or dropping it) kills git."""
        return self._run(args, timeout=timeout, stream=True)

    def ensure(self) -> None:
        """Make the git dir if it is missing (``git_dirs.make_git_dir``: written directly,
        without git), and keep its ``info/exclude`` in step with ``SNAPSHOT_EXCLUDE``."""
        git_dirs.make_git_dir(self.git_dir, self.worktree, self.objects, settings.SNAPSHOT_EXCLUDE)

    # -- the three operations --------------------------------------------------------------
    def track(self, *, index: str | None = None, journal: bool = False) -> str:
        """Snapshot the worktree: its tree id. Only the loop (and the history moves, which run
        while no loop does) call this: it updates the session's index. Readers use ``peek``.
        ``index``: a scratch index to use instead. ``journal``: only the paths the writers
        said they changed since (``change_journal``), where the journal is trusted; else
        (and by default) a walk of the whole worktree."""
        self.ensure()
        if index is not None:
            return self._track(index, journal)
        with holding_index(self.git_dir, INDEX_WAIT_SECONDS) as held:
            # Another writer has the index (a step of a cancelled run, a worker stopped
            # mid-snapshot), or a git of another live process left its lock: never written
            # from under it; this snapshot is made in a scratch copy of the index instead.
            if held and claim_index(self.git_dir):
                return self._track(None, journal)
        return self.peek(journal=journal)

    def _track(
        self, index: str | None, journal: bool, changes: change_journal.Pending | None = None
    ) -> str:
        changes = changes or change_journal.pending(self.worktree, self.git_dir)
        last = self._last_tree()
        if journal and changes.paths is not None and last:
            if not changes.paths:
                return last
            if journal_track.usable(self, changes.paths):
                tree = journal_track.track_paths(self, last, changes.paths)
                if index is None:
                    (self.git_dir / "last-tree").write_text(tree)
                    change_journal.took(self.worktree, self.git_dir, changes.end)
                return tree
        # A walk of the whole worktree in the index, whatever the journal holds.
        start = change_journal.size(self.worktree)
        self._add_all(index)
        if index is None:  # the session's index is the worktree's (a scratch one: no record)
            change_journal.walked(self.worktree, self.git_dir, start)
        return self._write_tree(index)

    def _write_tree(self, index: str | None) -> str:
        # The index as the last write-tree here left it (``add`` changed nothing): the same
        # tree, no git process — while it is still ``last-tree`` (kept by ``prune_store``).
        known = index_files.written_as(self.git_dir) if index is None else None
        if known and known == self._last_tree():
            return known
        tree = self.git("write-tree", index=index).strip()
        last = self._last_tree()
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        if tree != last:
            if limit:
                # Only the files that changed since the last snapshot can have grown; on the
                # first, the tree's blob sizes say which may be large (git reads them from the
                # store: a stat per file costs more than the whole snapshot of a fresh clone).
                candidates = self.patch(last, tree) if last else self.large_blobs(tree, limit)
                large = [
                    name
                    for name in candidates
                    if worktree_paths.regular_size(self.worktree / name) > limit
                ]
                if large:
                    # Large files stay out of snapshots (reported by ``skipped``), never silently.
                    self.git("update-index", "--force-remove", "--", *large, index=index)
                    tree = self.git("write-tree", index=index).strip()
            if index is None:
                (self.git_dir / "last-tree").write_text(tree)
        if index is None:
            index_files.remember_tree(self.git_dir, tree)
        return tree

    def _add_all(self, index: str | None) -> None:
        snapshot_add.add_all(self, index)  # nested repositories as plain directories

    def peek(self, *, journal: bool = False) -> str:
        """The worktree's tree now, for a reader that may run beside the loop (the diff view):
        the same tree ``track`` would give, made in a scratch copy of the index, so the
        session's own index (and its lock) is never touched."""
        self.ensure()
        # Read before the index is copied (the loop may take the journal in between).
        changes = change_journal.pending(self.worktree, self.git_dir)
        with tempfile.TemporaryDirectory(prefix="peek-") as scratch_dir:
            scratch = os.path.join(scratch_dir, "index")
            # The stat cache (fast), with the index's own mtime: git takes an entry written in
            # the index's second as "racily clean" and hashes it again; a newer mtime on the
            # copy would make a same-size change within that second look unchanged.
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(self.git_dir / "index", scratch)
            return self._track(scratch, journal, changes)

    def _last_tree(self) -> str:
        try:
            return (self.git_dir / "last-tree").read_text().strip()
        except FileNotFoundError:
            return ""

    def large_blobs(self, tree: str, limit: int) -> list[str]:
        """The paths of ``tree`` whose blobs are over ``limit`` bytes."""
        entries = git_output.tree_entries(self.git("ls-tree", "-r", "-l", "-z", tree))
        return [e.path for e in entries if e.size.isdigit() and int(e.size) > limit]

    def _all_files(self, tree: str) -> list[str]:
        return git_output.names(self.git("ls-tree", "-r", "--name-only", "-z", tree))

    def patch(self, tree: str, other: str | None = None) -> list[str]:
        """Files that differ between ``tree`` and ``other`` (default: the worktree now)."""
        self.ensure()
        if other is None:
            other = self.track()
        if other == tree:
            return []
        out = self.git("diff-tree", "-r", "--name-only", "-z", "--no-renames", tree, other)
        return sorted(git_output.names(out))

    def restore(self, tree: str, *, journal: bool = False) -> None:
        """Make the worktree exactly ``tree`` (docs/semantics.md §2.2); ``journal`` as
        ``track``'s."""
        self.ensure()
        current = self.track(journal=journal)
        if current == tree:
            return
        self.checkout(tree, self.patch(current, tree))

    def materialize(self, tree: str) -> None:
        """Fill an empty worktree with ``tree`` (a fork's files): the index is read from the
        tree and git writes the files, so the next ``track`` finds nothing to hash."""
        self.ensure()
        if tree == EMPTY_TREE:
            return
        wait = settings.SNAPSHOT_GIT_TIMEOUT_SECONDS
        start = change_journal.size(self.worktree)
        with holding_index(self.git_dir, wait) as held:
            if not held or not claim_index(self.git_dir):
                raise SnapshotError(f"git read-tree: the index is still in use after {wait:g}s")
            self.git("read-tree", tree)
            # ``-u``: the index gets each file's stat data as it is written, so the next
            # ``track`` is a stat walk, not a hash of every file the fork wrote.
            self.git("checkout-index", "--all", "--force", "-u")
            (self.git_dir / "last-tree").write_text(tree)
            change_journal.walked(self.worktree, self.git_dir, start)  # the index is the worktree's

    def read_blob(self, tree: str, path: str) -> bytes | None:
        """A file's content as it is in ``tree``; None when it is not there."""
        self.ensure()
        # Any refusal (no such tree, no such path, not a blob) reads as "not there"; a git that
        # hangs or cannot start is still a SnapshotError.
        result = self._run(["cat-file", "blob", f"{tree}:{path}"])
        return result.stdout if result.code == 0 else None

    def adopt_objects_of(self, other: Snapshots) -> None:
        """A session made before the shared store kept its objects in its own git dir: make
        them visible to the store, so a fork of it can read its trees."""
        if self.objects is not None:
            git_dirs.add_alternate(self.objects, other.git_dir)

    def checkout(self, tree: str, files: list[str]) -> None:
        """Write ``files`` as they are in ``tree``; delete those that are not in it.

        Reads the blobs in one ``cat-file --batch`` and writes the files directly
        (``worktree_paths``), so the cost follows the number of files, not the size of the
        worktree's index (the next ``track`` picks the new contents up). Every blob is read
        before the first file is touched, so a git that fails (a missing or corrupt object)
        leaves the worktree as it was."""
        if not files:
            return
        entries = self.blob_entries(tree, files)
        names = sorted(entries)
        bodies: dict[str, bytes] = {}
        if names:
            shas = "\n".join(entries[n][1] for n in names) + "\n"
            found = git_output.batch_objects(
                self.check(["cat-file", "--batch"], input=shas.encode()), len(names)
            )
            for name, record in zip(names, found, strict=True):
                if record is None:  # "<sha> missing": the store lost an object
                    raise SnapshotError(f"git cat-file: {name} ({entries[name][1]}) is missing")
                bodies[name] = record[1]
        change_journal.record(self.worktree, files)
        kept_usage.forget(self.worktree)
        for name in files:
            if name not in entries:
                worktree_paths.remove_file(self.worktree, name)
        for name in names:
            worktree_paths.write_file(self.worktree, name, entries[name][0], bodies[name])

    def blob_entries(self, tree: str, files: list[str]) -> dict[str, tuple[str, str]]:
        """``{path: (mode, id)}`` of those of ``files`` that are blobs of ``tree``."""
        return git_output.tree_blobs(self.git("ls-tree", "-r", "-z", tree, "--", *files))

    # -- diffs ----------------------------------------------------------------------------------
    def diff_stat(self, tree: str, other: str) -> list[dict]:
        """Per file from ``tree`` to ``other``: status, line counts, binary files marked."""
        if tree == other:
            return []
        # One diff-tree for both: the raw records (status) then the numstat records.
        args = ("diff-tree", "-r", "--no-renames", "--raw", "--numstat", "-z", tree, other)
        return git_output.diff_stat(self.git(*args))

    def diff_text(
        self, tree: str, other: str, *, paths: list[str] | None = None, limit: int = 200_000
    ) -> str:
        """The unified diff from ``tree`` to ``other`` (binary files as one line each),
        of ``paths`` only when given."""
        if tree == other:
            return ""
        args = ["diff-tree", "-r", "-p", "--no-renames", "--no-color", tree, other]
        text = self.git(*args, "--", *paths) if paths else self.git(*args)
        return text if len(text) <= limit else text[:limit] + "\n[diff truncated]\n"


def store_path() -> Path:
    """The object store every session's git dir links its ``objects`` to."""
    return Path(settings.WORKSPACE_ROOT) / ".snapshots" / "objects"


def for_session(session) -> Snapshots:  # noqa: ANN001 - a sessions_app.models.Session
    return Snapshots(git_dir=session.snapshot_dir, worktree=session.worktree, objects=store_path())
