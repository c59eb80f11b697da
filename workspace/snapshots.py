"""Worktree snapshots: git trees in a git directory of the session's own.

``GIT_DIR=<WORKSPACE_ROOT>/.snapshots/<session>.git GIT_WORK_TREE=<worktree>``, so a ``.git``
that the worktree itself contains is never used or changed (it is excluded).

* ``track()`` = add + write-tree: content-addressed, so an unchanged worktree gives the same
  tree id and costs no new objects; git's stat cache keeps it fast on large worktrees.
* ``patch(a, b)`` = the files that differ between two trees.
* ``restore(tree)`` = the exact tree: changed files rewritten, missing ones brought back,
  files that are not in it deleted.
* ``compose(base, sources)`` builds, in a scratch index, the tree that is ``base`` with some
  files taken from other trees, without touching the worktree; ``checkout(tree, files)``
  then writes only those files. Revert is built on these two, so its cost follows the files
  it changes, not the size of the worktree.

Every git process starts in one place, ``Snapshots._run``: with a timeout
(``SNAPSHOT_GIT_TIMEOUT_SECONDS``), and nothing but ``SnapshotError`` ever comes out of it.
The worktree is hostile (SEMANTICS 11.1): the runner gives git an environment of its own (no
system or global config, no replace objects, nothing of the server's) and overrides
(``GIT_OVERRIDES``) that switch off hooks, fsmonitor, submodules and protocols, and it leaves
git no way to start a child git or a shell (``PATH`` and ``GIT_EXEC_PATH`` lead nowhere). A
repository nested in the worktree is never a submodule here: its files are snapshotted as
plain files, its ``.git`` left out (``_add_all``), so no git ever runs inside it.
``prune_store`` deletes the objects of the shared store that no snapshot needs any more
(``manage.py prune_snapshots``).

At size: ``seed`` starts a cloned session from the clone's own packs and index (its first
snapshot a stat walk, not a hash of every file); the index is version 4 and split
(``SCALE_OVERRIDES``); ``SNAPSHOT_EXCLUDE`` (``info/exclude``) keeps what package managers
and interpreters rebuild out of every snapshot.

No lock per git directory: the session's index has one writer at a time by construction. The
loop ``track``s while it holds the busy lock; the history moves (revert, unrevert, a run's
branch start) write while they hold the session row with no run holding the busy lock, and a
run cannot take the busy lock while the row is held; a fork writes only its new git dir.
Readers beside the loop (diffs, previews, shares) use ``peek`` (a scratch index) or read
objects only, which are immutable.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
import shutil
import signal
import socket
import stat as stat_module
import subprocess
import tempfile
import time
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .git_names import git_refuses


def _dead(holder: str) -> bool:
    """Whether the process ``holder`` ("host pid", from ``index.owner``) is known gone: only
    a process of this host can be known so."""
    host, _, pid = holder.partition(" ")
    if host != socket.gethostname() or not pid.isdigit():
        return False
    try:
        os.kill(int(pid), 0)
    except ProcessLookupError:
        return True
    except PermissionError:
        return False
    return False


class SnapshotError(RuntimeError):
    pass


class MissingObjectError(SnapshotError):
    """Git was asked for an object the store does not hold (a lost object, or an id that
    never was one): the caller answers "not found"."""


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"
OBJECT_ID = re.compile(r"[0-9a-f]{40}")
TMP_PREFIX = ".tmp-"  # a tree object ``_write_tree_object`` is writing (git's own: tmp_obj_)

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

# A worktree of many files (tens of thousands): what git itself offers, given on every command
# line so that git dirs made before these settings get them too.
# * ``index.version=4``: paths prefix-compressed, a third smaller index to read and write (a
#   new index; ``seed`` converts a clone's). ``feature.manyFiles`` is this and the untracked
#   cache (already in ``GIT_CONFIG``) in git 2.39.
# * ``core.splitIndex``: the index is a shared part (``sharedindex.<id>`` in the git dir,
#   rewritten when a fifth of the entries changed) and a small part that a step rewrites, so a
#   step writes and hashes kilobytes, not the whole index.
# * ``core.preloadIndex`` (git's default, stated): the stat walk on every core.
# The untracked cache speeds the walks of ``status`` and ``ls-files``; ``git add`` walks every
# directory whatever it holds (git's ``validate_untracked_cache`` refuses a walk that collects
# ignored paths), which is most of what a step's snapshot costs past the stat walk.
# No fsmonitor: git 2.39's builtin daemon exists on macOS and Windows only, and a hook-based
# one would run a program (``core.fsmonitor=false`` above). A scratch index (``peek``) is
# written whole (``core.splitIndex=false`` for it): it would otherwise leave shared parts of
# its own in the git dir.
SCALE_OVERRIDES = ("index.version=4", "core.splitIndex=true", "core.preloadIndex=true")
SCALE_FLAGS = tuple(a for o in SCALE_OVERRIDES for a in ("-c", o))
SCRATCH_FLAGS = ("-c", "core.splitIndex=false")
SHARED_INDEX = "sharedindex."
PACK_NAME = re.compile(r"pack-[0-9a-f]{40,64}\.(?:pack|idx|rev)")

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
# 0o160000 (a gitlink, a submodule's entry) as an index entry stores its mode: 32 bits, big-end.
GITLINK_MODE = (0o160000).to_bytes(4, "big")
NESTED_DEPTH_MAX = 32  # repositories nested in nested repositories, taken apart level by level
MISSING = re.compile(
    r"bad object|unable to read|could not read|not a valid object|missing (?:blob|tree)"
    r"|not a tree object|invalid object",
    re.IGNORECASE,
)


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

    def _env(self, index: str | None = None) -> dict[str, str]:
        """Git's whole environment: nothing of the server's (its secrets, its ``GIT_*``)."""
        env = {
            # No child git (a submodule's ``status``), no helper, no shell command found: git
            # prepends its exec path to PATH, and /dev/null holds nothing anyone can add to.
            "PATH": os.devnull,
            "GIT_EXEC_PATH": os.devnull,
            "LC_ALL": "C",  # git's messages as ``_check`` reads them
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

    def _run(
        self,
        args: Sequence[str],
        *,
        input: bytes | None = None,
        index: str | None = None,
        timeout: float | None = None,
    ) -> GitResult:
        """The one place a git process starts. A non-zero exit is returned for the caller to
        judge (``_add_all`` and ``read_blob`` expect some); a git that cannot start, or that
        has not answered after ``timeout`` (default ``SNAPSHOT_GIT_TIMEOUT_SECONDS``), is a
        ``SnapshotError``: the engine catches that one, so a broken or hung git costs a
        snapshot, never the run's worker. Anything else (a Celery time limit, ^C) goes on up
        after the process is killed."""
        limit = settings.SNAPSHOT_GIT_TIMEOUT_SECONDS if timeout is None else timeout
        git = shutil.which("git")  # looked up on the server's PATH: git's own PATH is empty
        if git is None:
            raise SnapshotError(f"git {args[0]}: git is not installed")
        try:
            proc = subprocess.Popen(
                [git, *GIT_FLAGS, *SCALE_FLAGS, *(SCRATCH_FLAGS if index else ()), *args],
                cwd=self.worktree,
                env=self._env(index),
                stdin=subprocess.PIPE if input is not None else subprocess.DEVNULL,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                # Its own process group, so a kill reaches whatever git started too: a child
                # left holding the pipes would keep ``communicate`` waiting past the timeout.
                start_new_session=True,
            )
        except OSError as exc:  # no git, no worktree, an argument list over the kernel's limit
            raise SnapshotError(f"git {args[0]}: {exc}") from exc
        with proc:  # on the way out: the pipes closed, the process reaped
            try:
                out, err = proc.communicate(input, timeout=limit)
            except BaseException as exc:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(proc.pid, signal.SIGKILL)
                if isinstance(exc, subprocess.TimeoutExpired):
                    raise SnapshotError(f"git {args[0]}: no answer after {limit:g}s") from None
                raise
        return GitResult(proc.returncode, out, err.decode(errors="replace").strip())

    def _check(
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
            error = MissingObjectError if MISSING.search(result.stderr) else SnapshotError
            raise error(f"git {args[0]}: {result.stderr or f'exit code {result.code}'}")
        return result.stdout

    def _git(self, *args: str, input: bytes | None = None, index: str | None = None) -> str:
        return self._check(args, input=input, index=index).decode("utf-8", "surrogateescape")

    def ensure(self) -> None:
        """Make the git dir if it is missing: written directly (what ``git init`` and five
        ``git config`` calls would write), which saves six processes per new session or fork.
        HEAD comes last, so a git dir interrupted half-way is made again."""
        self.worktree.mkdir(parents=True, exist_ok=True)
        if (self.git_dir / "HEAD").exists():
            self._write_exclude()
            return
        self.git_dir.mkdir(parents=True, exist_ok=True)
        objects = self.git_dir / "objects"
        if self.objects is not None and not objects.exists():
            # One content-addressed store for every session: a fork's trees are already
            # there, so forking files costs nothing per object (objects are immutable).
            self.objects.mkdir(parents=True, exist_ok=True)
            objects.symlink_to(os.path.relpath(self.objects, self.git_dir), True)
        for sub in ("objects/info", "objects/pack", "refs/heads", "refs/tags", "info"):
            (self.git_dir / sub).mkdir(parents=True, exist_ok=True)
        self._write_exclude()
        (self.git_dir / "config").write_text(GIT_CONFIG)
        (self.git_dir / "HEAD").write_text("ref: refs/heads/main\n")

    def _write_exclude(self) -> None:
        """``info/exclude``: the worktree's own ``.git``, and ``SNAPSHOT_EXCLUDE``. Rewritten
        only when the setting changed (git's untracked cache is keyed on this file)."""
        text = "".join(f"{line}\n" for line in (".git", *settings.SNAPSHOT_EXCLUDE))
        path = self.git_dir / "info" / "exclude"
        try:
            if path.read_text() == text:
                return
        except (FileNotFoundError, UnicodeDecodeError):
            pass
        path.parent.mkdir(parents=True, exist_ok=True)
        scratch = path.with_name(f"exclude{TMP_PREFIX}{os.getpid()}")
        scratch.write_text(text)
        os.replace(scratch, path)

    def seed(self, index: Path, packs: Iterable[Path]) -> None:
        """Start from a clone git just made in the worktree: its packs (``.pack``, ``.idx``,
        ``.rev``) copied into the object store and its index copied as this git dir's, so the
        next ``track`` is a stat walk that finds every file as the clone wrote it, not a hash
        of every file.

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
        self.ensure()
        self._copy_packs(packs)
        target = self.git_dir / "index"
        scratch = self.git_dir / f"index{TMP_PREFIX}seed"
        try:
            _copy_regular(Path(index), scratch)
        except OSError:
            scratch.unlink(missing_ok=True)
            return
        try:
            if not self._seedable(str(scratch)):
                return
            self._git("update-index", "--index-version", "4", index=str(scratch))
            # Its tree, as the last snapshot's: git checks that the store holds every object
            # the index names (a pack not given, a shallow clone's: refused, as a tree naming
            # a missing blob would be), and the first ``track`` then checks the sizes of only
            # what changed since the clone; the large files are taken out here.
            result = self._run(["write-tree"], index=str(scratch))
            if result.code != 0:
                return
            tree = result.stdout.decode().strip()
            limit = settings.SNAPSHOT_MAX_FILE_BYTES
            large = self._large_blobs(tree, limit) if limit else []
            if large:
                self._remove(large, str(scratch))
                tree = self._git("write-tree", index=str(scratch)).strip()
            os.replace(scratch, target)
            (self.git_dir / "last-tree").write_text(tree)
        finally:
            scratch.unlink(missing_ok=True)

    def _copy_packs(self, packs: Iterable[Path]) -> None:
        """A clone's pack files into the store, ``.idx`` last (see ``seed``)."""
        store = (self.objects if self.objects is not None else self.git_dir / "objects") / "pack"
        store.mkdir(parents=True, exist_ok=True)
        order = {".pack": 0, ".rev": 1, ".idx": 2}
        wanted = sorted(
            (p for p in map(Path, packs) if PACK_NAME.fullmatch(p.name)),
            key=lambda p: (order[p.suffix], p.name),
        )
        for pack in wanted:
            if not (store / pack.name).exists():
                _copy_regular(pack, store / pack.name)

    def _seedable(self, index: str) -> bool:
        """Whether the index at ``index`` (a clone's) may become this git dir's: see ``seed``.
        Drops its entries that ``SNAPSHOT_EXCLUDE`` names."""
        listed = self._run(["ls-files", "--stage", "-z"], index=index)
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
        exclude = self.git_dir / "info" / "exclude"
        excluded = self._check(
            ["ls-files", "--cached", "--ignored", f"--exclude-from={exclude}", "-z"], index=index
        )
        self._remove(
            [n for n in excluded.decode("utf-8", "surrogateescape").split("\0") if n], index
        )
        return True

    def _remove(self, names: list[str], index: str) -> None:
        """Take ``names`` out of the index at ``index`` (any number: read from stdin)."""
        if names:
            self._check(
                ["update-index", "--force-remove", "-z", "--stdin"],
                input=b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in names),
                index=index,
            )

    # -- the three operations --------------------------------------------------------------
    def track(self, *, index: str | None = None) -> str:
        """Snapshot the worktree: its tree id. Only the loop (and the history moves, which run
        while no loop does) call this: it updates the session's index. Readers use ``peek``.
        ``index``: a scratch index to use instead."""
        self.ensure()
        if index is None and not self._claim_index():
            # A git of another live process holds the session's index (a worker that was
            # stopped mid-snapshot and lost its run): its lock is never removed from under
            # it; this snapshot is made in a scratch copy of the index instead.
            return self.peek()
        self._add_all(index)
        tree = self._git("write-tree", index=index).strip()
        last = self._last_tree()
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        if tree != last:
            if limit:
                # Only the files that changed since the last snapshot can have grown; on the
                # first, the tree's blob sizes say which may be large (git reads them from the
                # store: a stat per file costs more than the whole snapshot of a fresh clone).
                candidates = self.patch(last, tree) if last else self._large_blobs(tree, limit)
                large = [name for name in candidates if _regular_size(self.worktree / name) > limit]
                if large:
                    # Large files stay out of snapshots (reported by ``skipped``), never silently.
                    self._git("update-index", "--force-remove", "--", *large, index=index)
                    tree = self._git("write-tree", index=index).strip()
            if index is None:
                (self.git_dir / "last-tree").write_text(tree)
        return tree

    def _add_all(self, index: str | None) -> None:
        """``git add --all``, with the repositories nested in the worktree taken as plain
        directories (rule 2.3 and 11.1).

        Git's own walk records a directory holding a repository as a gitlink, and the next
        ``add`` runs ``git status`` inside it: that repository's config, its fsmonitor, its
        filters, all the agent's. So no gitlink is ever left in the index: one found after an
        ``add`` is dropped and one of its files is put in its place (``_seed``); a directory
        with a file in the index is a directory to git, whose walk then goes into it like any
        other (its ``.git`` excluded by ``info/exclude``). Before the ``add``, an index made
        before this rule (or read from an old tree) loses its gitlinks the same way."""
        self._drop_gitlinks(index)
        self._add(["."], index)
        for _ in range(NESTED_DEPTH_MAX):
            nested = self._drop_gitlinks(index)
            seeds = {name: seed for name in nested if (seed := self._seed(name))}
            if not seeds:
                return
            added = self._run(["update-index", "--add", "--", *seeds.values()], index=index)
            if added.code != 0:
                # A seed git will not take (a link swapped in on the way) leaves its directory
                # out of this snapshot: never a gitlink in.
                return
            self._add(list(seeds), index)  # the rest of their files
        self._drop_gitlinks(index)

    def _drop_gitlinks(self, index: str | None) -> list[str]:
        """Remove the index's gitlinks: their paths. Costs one read of the index file when
        there is none (its mode bytes are not in it); git lists them when there may be.

        A split index (``core.splitIndex``) keeps most entries in a shared part, always in
        the git dir (a scratch index's too): those are read as well, each once per process
        (a shared part is never rewritten: its name is its content's id)."""
        try:
            data = Path(index or self.git_dir / "index").read_bytes()
        except FileNotFoundError:
            return []
        if GITLINK_MODE not in data and not any(
            _has_gitlink_bytes(shared) for shared in self._shared_indexes()
        ):
            return []
        out = self._git("ls-files", "--stage", "-z", index=index)
        links = [
            entry.partition("\t")[2]
            for entry in out.split("\0")
            if entry.startswith("160000 ") and "\t" in entry
        ]
        if links:
            # A new shared part, written without them: the one read above would otherwise
            # keep their bytes and send every later snapshot through ``ls-files``.
            self._git(
                "-c",
                "splitIndex.maxPercentChange=0",
                "update-index",
                "--force-remove",
                "--",
                *links,
                index=index,
            )
        return links

    def _shared_indexes(self) -> list[Path]:
        try:
            return [
                Path(e.path) for e in os.scandir(self.git_dir) if e.name.startswith(SHARED_INDEX)
            ]
        except FileNotFoundError:
            return []

    def _seed(self, directory: str) -> str | None:
        """A file (or link) of ``directory``, outside any ``.git``: the worktree path that
        makes git take the directory as one. Found without following a link."""
        pending = [directory]
        while pending:
            current = pending.pop()
            try:
                entries = sorted(os.scandir(self.worktree / current), key=lambda e: e.name)
            except OSError:  # gone, or a link now: nothing to take from it
                continue
            for entry in entries:
                name = f"{current}/{entry.name}"
                if git_refuses(name):
                    continue  # ``.git`` itself among them
                if entry.is_symlink() or entry.is_file(follow_symlinks=False):
                    return name
                if entry.is_dir(follow_symlinks=False):
                    pending.append(name)
        return None

    def _add(self, paths: Sequence[str], index: str | None) -> None:
        """``git add --all`` of ``paths``, going on past the files git refuses to index
        (``.GIT/config``, ``git~1``, see ``git_names``): tools refuse to write those, but a
        shell or the user may make them, and one such file must not stop every snapshot of
        the session (it stays out, and ``skipped`` reports it). Any other failure is an
        error."""
        result = self._run(["add", "--all", "--ignore-errors", "--", *paths], index=index)
        if result.code == 0:
            return
        errors = result.stderr.splitlines()
        unexpected = [
            line
            for line in errors
            if not line.startswith(("error: invalid path ", "error: unable to add "))
        ]
        if result.code != 1 or unexpected:
            raise SnapshotError(f"git add: {' '.join(unexpected or errors).strip()}")

    def _claim_index(self, stale_after: float = 30.0) -> bool:
        """Make the session's index ours for a ``track``: ``index.owner`` names this process
        (host and pid). An ``index.lock`` left by a git that died mid-write (its worker
        SIGKILLed) would fail every snapshot from then on, so it is removed — but only when
        its owner is known dead: a process of this host that is gone, this process itself
        (a git it killed on a timeout), or no owner on record and older than
        ``stale_after`` (left before owners were recorded). A lock whose owner may be alive
        (stopped, or on another host) is never removed: False, and the caller snapshots in
        a scratch index."""
        lock = self.git_dir / "index.lock"
        owner = self.git_dir / "index.owner"
        me = f"{socket.gethostname()} {os.getpid()}"
        for _ in range(10):
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                break
            try:
                holder = owner.read_text().strip()
            except FileNotFoundError:
                holder = ""
            if holder == me or (holder and _dead(holder)) or (not holder and age > stale_after):
                lock.unlink(missing_ok=True)
                break
            time.sleep(0.1)
        else:
            return False
        owner.write_text(me)
        return True

    def peek(self) -> str:
        """The worktree's tree now, for a reader that may run beside the loop (the diff view):
        the same tree ``track`` would give, made in a scratch copy of the index, so the
        session's own index (and its lock) is never touched."""
        self.ensure()
        with tempfile.TemporaryDirectory(prefix="peek-") as scratch_dir:
            scratch = os.path.join(scratch_dir, "index")
            # The stat cache (fast), with the index's own mtime: git takes an entry written in
            # the index's second as "racily clean" and hashes it again; a newer mtime on the
            # copy would make a same-size change within that second look unchanged.
            with contextlib.suppress(FileNotFoundError):
                shutil.copy2(self.git_dir / "index", scratch)
            return self.track(index=scratch)

    def _last_tree(self) -> str:
        try:
            return (self.git_dir / "last-tree").read_text().strip()
        except FileNotFoundError:
            return ""

    def _large_blobs(self, tree: str, limit: int) -> list[str]:
        """The paths of ``tree`` whose blobs are over ``limit`` bytes."""
        found = []
        for record in filter(None, self._git("ls-tree", "-r", "-l", "-z", tree).split("\0")):
            meta, _, name = record.partition("\t")
            size = meta.split()[-1]
            if size.isdigit() and int(size) > limit:
                found.append(name)
        return found

    def _all_files(self, tree: str) -> list[str]:
        return [f for f in self._git("ls-tree", "-r", "--name-only", "-z", tree).split("\0") if f]

    def skipped(self) -> list[dict[str, str]]:
        """Files of the worktree that snapshots do not cover, and why: ``invalid-name`` (git
        refuses it), ``large`` (over ``SNAPSHOT_MAX_FILE_BYTES``), ``excluded``
        (``SNAPSHOT_EXCLUDE``), ``ignored`` (the worktree's ``.gitignore``)."""
        self.ensure()
        result = []
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        others = self._git("ls-files", "--others", "-z", "--", ".")
        for name in filter(None, others.split("\0")):
            path = self.worktree / name
            if git_refuses(name):
                result.append({"path": name, "reason": "invalid-name"})
            elif limit and path.is_file() and path.stat().st_size > limit:
                result.append({"path": name, "reason": "large"})
        ignored = self._git(
            "ls-files", "--others", "--ignored", "--exclude-standard", "--directory", "-z"
        )
        names = [n for n in ignored.split("\0") if n and n.rstrip("/") != ".git"]
        excluded = self._excluded(names)
        for name in names:
            result.append({"path": name, "reason": "excluded" if name in excluded else "ignored"})
        return sorted(result, key=lambda r: r["path"])

    def _excluded(self, names: list[str]) -> set[str]:
        """Those of ``names`` (ignored paths) that ``info/exclude`` (``SNAPSHOT_EXCLUDE``),
        not a ``.gitignore``, leaves out: git says which pattern matched, and where from."""
        if not names or not settings.SNAPSHOT_EXCLUDE:
            return set()
        # check-ignore takes no literal pathspecs: a name that would read as pathspec magic
        # (a leading ":") is left out of the question, and reported "ignored".
        asked = [n for n in names if not n.startswith(":")]
        out = self._run(
            ["--no-literal-pathspecs", "check-ignore", "--verbose", "--no-index", "--stdin", "-z"],
            input=b"".join(n.encode("utf-8", "surrogateescape") + b"\0" for n in asked),
        ).stdout.split(b"\0")
        exclude = str(self.git_dir / "info" / "exclude").encode("utf-8", "surrogateescape")
        found = set()
        for i in range(0, len(out) - 3, 4):  # source, line, pattern, path
            if out[i] == exclude:
                found.add(out[i + 3].decode("utf-8", "surrogateescape"))
        return found

    def patch(self, tree: str, other: str | None = None) -> list[str]:
        """Files that differ between ``tree`` and ``other`` (default: the worktree now)."""
        self.ensure()
        if other is None:
            other = self.track()
        if other == tree:
            return []
        out = self._git("diff-tree", "-r", "--name-only", "-z", "--no-renames", tree, other)
        return sorted(f for f in out.split("\0") if f)

    def restore(self, tree: str) -> None:
        """Make the worktree exactly ``tree`` (rule 2.2)."""
        self.ensure()
        current = self.track()
        if current == tree:
            return
        self.checkout(tree, self.patch(current, tree))

    def materialize(self, tree: str) -> None:
        """Fill an empty worktree with ``tree`` (a fork's files): the index is read from the
        tree and git writes the files, so the next ``track`` finds nothing to hash."""
        self.ensure()
        if tree == EMPTY_TREE:
            return
        self._git("read-tree", tree)
        # ``-u``: the index gets each file's stat data as it is written, so the next ``track``
        # is a stat walk, not a hash of every file the fork wrote.
        self._git("checkout-index", "--all", "--force", "-u")
        (self.git_dir / "last-tree").write_text(tree)

    def list_tree(self, tree: str) -> list[dict[str, object]]:
        """The files of ``tree`` with their sizes (a pinned share's file list)."""
        self.ensure()
        out = self._git("ls-tree", "-r", "-l", "-z", tree)
        files = []
        for entry in filter(None, out.split("\0")):
            meta, _, name = entry.partition("\t")
            _mode, kind, _sha, size = meta.split()
            if kind == "blob":
                files.append({"path": name, "size": int(size) if size.isdigit() else 0})
        return sorted(files, key=lambda f: f["path"])

    def blobs(self, tree: str) -> list[tuple[str, int, str, int]]:
        """``(path, mode, id, size)`` of every blob of ``tree`` (files, executables, symbolic
        links), by path: what an archive of it holds."""
        if tree == EMPTY_TREE:
            return []
        self.ensure()
        found = []
        for record in filter(None, self._git("ls-tree", "-r", "-l", "-z", tree).split("\0")):
            meta, _, name = record.partition("\t")
            mode, kind, sha, size = meta.split()
            if kind == "blob":
                found.append((name, int(mode, 8), sha, int(size)))
        return sorted(found)

    def full_diff(self, tree: str, other: str) -> str:
        """The whole unified diff from ``tree`` to ``other``, binary files included (what
        ``git apply`` takes)."""
        if tree == other:
            return ""
        self.ensure()
        return self._git(
            "diff-tree",
            "-r",
            "-p",
            "--binary",
            "--full-index",
            "--no-renames",
            "--no-color",
            tree,
            other,
        )

    def format_patch(self, base: str, tip: str) -> str:
        """The commits ``base..tip`` (written with ``write_object``) as a mailbox (what
        ``git am`` takes)."""
        self.ensure()
        return self._git(
            "format-patch",
            "--stdout",
            "--binary",
            "--full-index",
            "--no-signature",
            f"{base}..{tip}",
        )

    def blame(self, commit: str, path: str) -> list[tuple[int, int, str]]:
        """``git blame`` of ``path`` at ``commit`` (a chain written with ``write_object``):
        ``(start, end, commit)`` for each run of lines (1-based, ``end`` included), in line
        order; what ``--incremental`` gives, without the lines themselves. ``--no-follow``:
        a file a commit adds is its own, never another one's renamed."""
        self.ensure()
        out = self._git("blame", "--incremental", "--no-follow", commit, "--", path)
        groups, in_group = [], False
        for line in out.split("\n"):
            if not in_group:
                fields = line.split(" ")
                if len(fields) == 4 and OBJECT_ID.fullmatch(fields[0]):
                    start, count = int(fields[2]), int(fields[3])
                    groups.append((start, start + count - 1, fields[0]))
                    in_group = True
            elif line.startswith("filename "):  # the last header line of a group
                in_group = False
        return sorted(groups)

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
        own = other.git_dir / "objects"
        if self.objects is None or not own.is_dir() or own.is_symlink():
            return
        alternates = self.objects / "info" / "alternates"
        alternates.parent.mkdir(parents=True, exist_ok=True)
        known = alternates.read_text().split() if alternates.exists() else []
        if str(own.resolve()) not in known:
            with alternates.open("a") as fh:
                fh.write(f"{own.resolve()}\n")

    # -- building blocks of revert -------------------------------------------------------------
    def exists_in(self, tree: str, files: list[str]) -> set[str]:
        if not files:
            return set()
        out = self._git("ls-tree", "-r", "--name-only", "-z", tree, "--", *files)
        return set(filter(None, out.split("\0")))

    def checkout(self, tree: str, files: list[str]) -> None:
        """Write ``files`` as they are in ``tree``; delete those that are not in it.

        Reads the blobs in one ``cat-file --batch`` and writes the files directly, so the
        cost follows the number of files, not the size of the worktree's index (the next
        ``track`` picks the new contents up). Every blob is read before the first file is
        touched, so a git that fails (a missing or corrupt object) leaves the worktree as it
        was."""
        if not files:
            return
        entries = self._entries(tree, files)
        names = sorted(entries)
        bodies: dict[str, bytes] = {}
        if names:
            shas = "\n".join(entries[n][1] for n in names) + "\n"
            data, offset = self._check(["cat-file", "--batch"], input=shas.encode()), 0
            for name in names:
                header_end = data.index(b"\n", offset)
                header = data[offset:header_end].split()
                if len(header) != 3:  # "<sha> missing": the store lost an object
                    raise SnapshotError(f"git cat-file: {name} ({entries[name][1]}) is missing")
                size = int(header[2])
                bodies[name] = data[header_end + 1 : header_end + 1 + size]
                offset = header_end + 1 + size + 1
        for name in files:
            if name not in entries:
                path = self.worktree / name
                if path.is_symlink() or path.is_file():
                    path.unlink()
                    self._prune_empty_dirs(path.parent)
        for name in names:
            self._write(name, entries[name][0], bodies[name])

    def _entries(self, tree: str, files: list[str]) -> dict[str, tuple[str, str]]:
        out = self._git("ls-tree", "-r", "-z", tree, "--", *files)
        entries = {}
        for entry in filter(None, out.split("\0")):
            meta, _, name = entry.partition("\t")
            mode, kind, sha = meta.split()
            if kind == "blob":
                entries[name] = (mode, sha)
        return entries

    def _write(self, name: str, mode: str, body: bytes) -> None:
        path = self.worktree / name
        for parent in reversed(path.relative_to(self.worktree).parents):
            step = self.worktree / parent
            if step.is_symlink() or (step.exists() and not step.is_dir()):
                step.unlink()  # a file or link stands where a directory must be
        path.parent.mkdir(parents=True, exist_ok=True)
        if path.is_symlink() or path.is_file():
            path.unlink()
        elif path.is_dir():
            shutil.rmtree(path)
        if mode == "120000":
            os.symlink(os.fsdecode(body), path)
            return
        path.write_bytes(body)
        os.chmod(path, 0o755 if mode == "100755" else 0o644)

    def _prune_empty_dirs(self, directory: Path) -> None:
        root = self.worktree.resolve()
        while directory.resolve() != root and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent

    def compose(self, base: str, sources: dict[str, str]) -> str:
        """The tree that is ``base`` with each file of ``sources`` as it is in its tree
        (absent there → absent here). Only the trees on the changed paths are read and
        written, so the cost follows the files changed, not the worktree; the worktree and
        the index are not touched."""
        if not sources:
            return base
        wanted: dict[str, tuple[str, str] | None] = {}
        by_tree: dict[str, list[str]] = {}
        for name, tree in sources.items():
            by_tree.setdefault(tree, []).append(name)
        for tree, names in by_tree.items():
            entries = self._entries(tree, names)
            for name in names:
                wanted[name] = entries.get(name)
        dirs = {""}
        for name in wanted:
            parts = name.split("/")[:-1]
            for i in range(1, len(parts) + 1):
                dirs.add("/".join(parts[:i]))
        trees = self._read_trees(base, sorted(dirs))
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
                sha = self._write_tree_object(trees[directory])
                trees[parent][key] = (b"40000", sha)
            else:
                trees[parent].pop(key, None)
        return self._write_tree_object(trees[""]).hex()

    def _read_trees(self, base: str, dirs: list[str]) -> dict[str, dict[bytes, tuple]]:
        specs = "".join(f"{base}:{d}\n" if d else f"{base}\n" for d in dirs)
        data = self._check(["cat-file", "--batch"], input=specs.encode("utf-8", "surrogateescape"))
        offset, result = 0, {}
        for directory in dirs:
            header_end = data.index(b"\n", offset)
            header = data[offset:header_end].split()
            entries: dict[bytes, tuple] = {}
            if header[-1] == b"missing":
                offset = header_end + 1
            else:
                size = int(header[2])
                body = data[header_end + 1 : header_end + 1 + size]
                offset = header_end + 1 + size + 1
                if header[1] == b"tree":
                    entries = _parse_tree(body)
            result[directory] = entries
        return result

    def _write_tree_object(self, entries: dict[bytes, tuple]) -> bytes:
        def order(name: bytes) -> bytes:
            return name + b"/" if entries[name][0] == b"40000" else name

        body = b"".join(
            entries[n][0] + b" " + n + b"\0" + entries[n][1] for n in sorted(entries, key=order)
        )
        return bytes.fromhex(self.write_object("tree", body))

    # -- the object store by id (export, import) ------------------------------------------------
    def write_object(self, kind: str, body: bytes) -> str:
        """Store an object (a ``tree``, a ``blob``, a ``commit``) as git writes a loose one: its
        id. One the store holds already is freshened, not written again (its id is its
        content)."""
        raw = b"%s %d\0" % (kind.encode("ascii"), len(body)) + body
        hexsha = hashlib.sha1(raw).hexdigest()
        target = self.git_dir / "objects" / hexsha[:2] / hexsha[2:]
        try:
            # Already there: freshen it, as git does for the objects it would write, so that
            # ``prune_store`` sees a tree a revert is about to name as new, not as old garbage.
            os.utime(target)
        except FileNotFoundError:
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch = target.with_name(f"{TMP_PREFIX}{os.getpid()}-{hexsha[2:]}")
            scratch.write_bytes(zlib.compress(raw))
            os.replace(scratch, target)
        except OSError:
            pass  # another user's file: freshening is a courtesy to the prune, not a need
        return hexsha

    def object_info(self, shas: Iterable[str]) -> list[tuple[str, str, int]]:
        """``(id, type, size)`` of each of ``shas`` the store holds (the others left out)."""
        shas = list(shas)
        if not shas:
            return []
        self.ensure()
        out = self._check(["cat-file", "--batch-check"], input=_lines(shas))
        found = []
        for line in out.decode("ascii", "replace").splitlines():
            fields = line.split()
            if len(fields) == 3 and fields[2].isdigit():
                found.append((fields[0], fields[1], int(fields[2])))
        return found

    def objects_named(self, trees: Iterable[str]) -> tuple[set[str], set[str]]:
        """Every object the trees ``trees`` (which the store holds) reach, themselves
        included; and the ids those trees name that the store does not hold."""
        trees = list(trees)
        if not trees:
            return set(), set()
        self.ensure()
        args = ["rev-list", "--objects", "--missing=print", "--stdin"]
        out = self._check(args, input=_lines(trees))
        present, missing = set(), set()
        for line in out.splitlines():
            if line.startswith(b"?"):
                missing.add(line[1:41].decode("ascii", "replace"))
            elif len(line) >= 40:
                present.add(line[:40].decode("ascii", "replace"))
        return present, missing

    def read_objects(self, shas: Sequence[str]) -> dict[str, tuple[str, bytes]]:
        """``{id: (type, body)}`` of ``shas``, which the store must hold (MissingObjectError
        otherwise)."""
        if not shas:
            return {}
        self.ensure()
        data = self._check(["cat-file", "--batch"], input=_lines(shas))
        objects: dict[str, tuple[str, bytes]] = {}
        offset = 0
        for sha in shas:
            header_end = data.index(b"\n", offset)
            header = data[offset:header_end].split()
            if len(header) != 3:  # "<id> missing"
                raise MissingObjectError(f"git cat-file: {sha} is missing")
            start, size = header_end + 1, int(header[2])
            objects[sha] = (header[1].decode("ascii"), data[start : start + size])
            offset = start + size + 1
        return objects

    # -- diffs ----------------------------------------------------------------------------------
    def diff_stat(self, tree: str, other: str) -> list[dict]:
        """Per file from ``tree`` to ``other``: status, line counts, binary files marked."""
        if tree == other:
            return []
        # One diff-tree for both: the raw records (status) then the numstat records.
        out = self._git("diff-tree", "-r", "--no-renames", "--raw", "--numstat", "-z", tree, other)
        fields = out.split("\0")
        states: dict[str, str] = {}
        result = []
        i = 0
        while i < len(fields):
            field = fields[i]
            if field.startswith(":"):
                states[fields[i + 1]] = field.split()[-1]
                i += 2
                continue
            if not field:
                i += 1
                continue
            add, dele, name = field.split("\t", 2)
            binary = add == "-" and dele == "-"
            result.append(
                {
                    "file": name,
                    "status": {"A": "added", "D": "deleted"}.get(states.get(name, "M"), "modified"),
                    "additions": 0 if binary else int(add),
                    "deletions": 0 if binary else int(dele),
                    "binary": binary,
                }
            )
            i += 1
        return sorted(result, key=lambda r: r["file"])

    def diff_text(
        self, tree: str, other: str, *, paths: list[str] | None = None, limit: int = 200_000
    ) -> str:
        """The unified diff from ``tree`` to ``other`` (binary files as one line each),
        of ``paths`` only when given."""
        if tree == other:
            return ""
        args = ["diff-tree", "-r", "-p", "--no-renames", "--no-color", tree, other]
        text = self._git(*args, "--", *paths) if paths else self._git(*args)
        return text if len(text) <= limit else text[:limit] + "\n[diff truncated]\n"

    def merge_trees(self, base: str, ours: str, theirs: str) -> tuple[str, list[str]]:
        """Three-way, in the store (no worktree, no index): ``ours`` with the change from
        ``base`` to ``theirs`` applied, by git's own merge (``merge-tree --write-tree``, on
        three commits made for it: ``base`` the parent of the two others). The resulting
        tree, and the files it left with conflict markers. No rename detection: a file is
        its path; nothing of the trees' ``.gitattributes`` can name a driver that runs
        (no config names one)."""
        ident = "agentplat <agentplat@agentplat.invalid> 0 +0000"

        def commit(tree: str, parent: str | None = None) -> str:
            lines = [f"tree {tree}", *([f"parent {parent}"] if parent else [])]
            body = "\n".join([*lines, f"author {ident}", f"committer {ident}", "", "merge", ""])
            return self.write_object("commit", body.encode())

        root = commit(base)
        result = self._run(
            [
                "-c", "merge.renames=false", "-c", "merge.conflictStyle=merge",
                "merge-tree", "--write-tree", "--name-only", "-z", "--no-messages",
                commit(ours, root), commit(theirs, root),
            ]
        )  # fmt: skip
        if result.code not in (0, 1):
            raise SnapshotError(f"git merge-tree: {result.stderr.strip()}")
        fields = result.stdout.decode("utf-8", "surrogateescape").split("\0")
        tree, conflicts = fields[0].strip(), []
        for name in fields[1:]:
            if not name:
                break
            if name not in conflicts:
                conflicts.append(name)
        if not OBJECT_ID.fullmatch(tree):
            raise SnapshotError("git merge-tree gave no tree")
        return tree, conflicts


_GITLINK_SEEN: dict[tuple[str, int, int], bool] = {}


def _has_gitlink_bytes(path: Path) -> bool:
    """Whether a shared index part may hold a gitlink (its mode bytes are in it)."""
    try:
        stat = path.stat()
    except FileNotFoundError:
        return False
    key = (str(path), stat.st_size, stat.st_mtime_ns)
    if key not in _GITLINK_SEEN:
        try:
            _GITLINK_SEEN[key] = GITLINK_MODE in path.read_bytes()
        except FileNotFoundError:
            return False
        if len(_GITLINK_SEEN) > 256:
            _GITLINK_SEEN.pop(next(iter(_GITLINK_SEEN)))
    return _GITLINK_SEEN[key]


def _regular_size(path: Path) -> int:
    """The size of the regular file at ``path`` (a link is not followed); -1 for anything
    else, or nothing."""
    try:
        info = os.lstat(path)
    except OSError:
        return -1
    return info.st_size if stat_module.S_ISREG(info.st_mode) else -1


def _copy_regular(source: Path, target: Path) -> None:
    """Copy ``source`` (a regular file, not reached through a link in its last component)
    to ``target`` through a temporary name, keeping its mtime; never a link."""
    fd = os.open(source, os.O_RDONLY | os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as src:
        info = os.fstat(src.fileno())
        if not stat_module.S_ISREG(info.st_mode):
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


def _lines(values: Iterable[str]) -> bytes:
    return "".join(f"{value}\n" for value in values).encode("ascii")


def _parse_tree(body: bytes) -> dict[bytes, tuple[bytes, bytes]]:
    entries, i = {}, 0
    while i < len(body):
        space = body.index(b" ", i)
        nul = body.index(b"\0", space)
        entries[body[space + 1 : nul]] = (body[i:space], body[nul + 1 : nul + 21])
        i = nul + 21
    return entries


def summary_of(diff: list[dict]) -> dict[str, int]:
    return {
        "additions": sum(d["additions"] for d in diff),
        "deletions": sum(d["deletions"] for d in diff),
        "files": len(diff),
    }


def store_path() -> Path:
    """The object store every session's git dir links its ``objects`` to."""
    return Path(settings.WORKSPACE_ROOT) / ".snapshots" / "objects"


def for_session(session) -> Snapshots:  # noqa: ANN001 - a sessions_app.models.Session
    return Snapshots(git_dir=session.snapshot_dir, worktree=session.worktree, objects=store_path())


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
    git (and ``_write_tree_object``) freshen the mtime of an object they would write again.
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
    young = pruned = pruned_bytes = temp_files = 0
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
                young += 1 if is_object else 0
                continue
            if is_object:
                pruned += 1
                pruned_bytes += stat.st_size
            else:
                temp_files += 1
            if not dry_run:
                Path(entry.path).unlink(missing_ok=True)
    return PruneResult(
        named=len(roots),
        missing=len(roots) - len(present),
        reachable=len(reachable),
        young=young,
        pruned=pruned,
        pruned_bytes=pruned_bytes,
        temp_files=temp_files,
        dry_run=dry_run,
    )


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
        for stale in reader._shared_indexes():
            stale.unlink()
        for shared in Snapshots(git_dir=git_dir, worktree=reader.worktree)._shared_indexes():
            (reader.git_dir / shared.name).symlink_to(shared)
        out = reader._check(
            ["ls-files", "--stage", "-z"], index=str(index), timeout=PRUNE_GIT_TIMEOUT_SECONDS
        )
        for entry in out.split(b"\0"):
            fields = entry.split(b" ", 2)  # "<mode> <sha> <stage>\t<path>"
            sha = fields[1].decode("ascii", "replace") if len(fields) == 3 else ""
            if OBJECT_ID.fullmatch(sha):
                named.add(sha)
    return named


def _present(reader: Snapshots, ids: set[str]) -> list[str]:
    """The ids of ``ids`` that the store (or an alternate it lists) holds."""
    if not ids:
        return []
    out = reader._check(
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
    out = reader._check(
        ["rev-list", "--objects", "--missing=print", "--stdin"],
        input="".join(f"{sha}\n" for sha in roots).encode(),
        timeout=PRUNE_GIT_TIMEOUT_SECONDS,
    )
    return {
        line[:40].decode()
        for line in out.splitlines()
        if len(line) >= 40 and not line.startswith(b"?")
    }
