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
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import tempfile
import time
import zlib
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

from .git_names import git_refuses


class SnapshotError(RuntimeError):
    pass


EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"

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


@dataclass(frozen=True)
class Snapshots:
    git_dir: Path
    worktree: Path
    objects: Path | None = None  # a shared object store (``git_dir/objects`` links to it)

    def _env(self, index: str | None = None) -> dict[str, str]:
        env = {
            **os.environ,
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(self.worktree),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_LITERAL_PATHSPECS": "1",
            "GIT_OPTIONAL_LOCKS": "0",
        }
        env.pop("GIT_INDEX_FILE", None)
        if index:
            env["GIT_INDEX_FILE"] = index
        return env

    def _git(
        self, *args: str, input: bytes | None = None, check: bool = True, index: str | None = None
    ) -> str:
        proc = subprocess.run(
            ["git", *args],
            cwd=self.worktree,
            env=self._env(index),
            input=input,
            capture_output=True,
        )
        if check and proc.returncode != 0:
            raise SnapshotError(f"git {args[0]}: {proc.stderr.decode(errors='replace').strip()}")
        return proc.stdout.decode("utf-8", errors="surrogateescape")

    def ensure(self) -> None:
        """Make the git dir if it is missing: written directly (what ``git init`` and five
        ``git config`` calls would write), which saves six processes per new session or fork.
        HEAD comes last, so a git dir interrupted half-way is made again."""
        self.worktree.mkdir(parents=True, exist_ok=True)
        if (self.git_dir / "HEAD").exists():
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
        (self.git_dir / "info" / "exclude").write_text(".git\n")
        (self.git_dir / "config").write_text(GIT_CONFIG)
        (self.git_dir / "HEAD").write_text("ref: refs/heads/main\n")

    # -- the three operations --------------------------------------------------------------
    def track(self, *, index: str | None = None) -> str:
        """Snapshot the worktree: its tree id. Only the loop (and the history moves, which run
        while no loop does) call this: it updates the session's index. Readers use ``peek``.
        ``index``: a scratch index to use instead."""
        self.ensure()
        if index is None:
            self._clear_stale_lock()
        self._add_all(index)
        tree = self._git("write-tree", index=index).strip()
        last = self._last_tree()
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        if tree != last:
            if limit:
                # Only the files that changed since the last snapshot can have grown.
                candidates = self.patch(last, tree) if last else self._all_files(tree)
                large = [
                    name
                    for name in candidates
                    if (path := self.worktree / name).is_file()
                    and not path.is_symlink()
                    and path.stat().st_size > limit
                ]
                if large:
                    # Large files stay out of snapshots (reported by ``skipped``), never silently.
                    self._git("rm", "--cached", "--quiet", "--", *large, index=index)
                    tree = self._git("write-tree", index=index).strip()
            if index is None:
                (self.git_dir / "last-tree").write_text(tree)
        return tree

    def _add_all(self, index: str | None) -> None:
        """``git add --all``, going on past the files git refuses to index (``.GIT/config``,
        ``git~1``, see ``git_names``): tools refuse to write those, but a shell or the user
        may make them, and one such file must not stop every snapshot of the session (it
        stays out, and ``skipped`` reports it). Any other failure is an error."""
        proc = subprocess.run(
            ["git", "add", "--all", "--ignore-errors", "--", "."],
            cwd=self.worktree,
            env=self._env(index),
            capture_output=True,
        )
        if proc.returncode == 0:
            return
        errors = proc.stderr.decode(errors="replace").splitlines()
        unexpected = [
            line
            for line in errors
            if not line.startswith(("error: invalid path ", "error: unable to add "))
        ]
        if proc.returncode != 1 or unexpected:
            raise SnapshotError(f"git add: {' '.join(unexpected or errors).strip()}")

    def _clear_stale_lock(self, stale_after: float = 30.0) -> None:
        """Only one writer uses the session's index at a time (the loop that holds the busy
        lock, or a history move while none does), so an ``index.lock`` that outlives a short
        wait was left by a git killed mid-write (a worker SIGKILLed): it would fail every
        snapshot of the session from then on."""
        lock = self.git_dir / "index.lock"
        for _ in range(10):
            try:
                age = time.time() - lock.stat().st_mtime
            except FileNotFoundError:
                return
            if age > stale_after:
                lock.unlink(missing_ok=True)
                return
            time.sleep(0.1)

    def peek(self) -> str:
        """The worktree's tree now, for a reader that may run beside the loop (the diff view):
        the same tree ``track`` would give, made in a scratch copy of the index, so the
        session's own index (and its lock) is never touched."""
        self.ensure()
        with tempfile.TemporaryDirectory(prefix="peek-") as scratch_dir:
            scratch = os.path.join(scratch_dir, "index")
            try:
                shutil.copyfile(self.git_dir / "index", scratch)  # the stat cache: fast
            except FileNotFoundError:
                pass
            return self.track(index=scratch)

    def _last_tree(self) -> str:
        try:
            return (self.git_dir / "last-tree").read_text().strip()
        except FileNotFoundError:
            return ""

    def _all_files(self, tree: str) -> list[str]:
        return [f for f in self._git("ls-tree", "-r", "--name-only", "-z", tree).split("\0") if f]

    def skipped(self) -> list[dict[str, str]]:
        """Files of the worktree that snapshots do not cover, and why."""
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
        for name in filter(None, ignored.split("\0")):
            if name.rstrip("/") != ".git":
                result.append({"path": name, "reason": "ignored"})
        return sorted(result, key=lambda r: r["path"])

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
        self._git("checkout-index", "--all", "--force")
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

    def read_blob(self, tree: str, path: str) -> bytes | None:
        """A file's content as it is in ``tree``; None when it is not there."""
        self.ensure()
        proc = subprocess.run(
            ["git", "cat-file", "blob", f"{tree}:{path}"],
            cwd=self.worktree,
            env=self._env(),
            capture_output=True,
        )
        return proc.stdout if proc.returncode == 0 else None

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
        ``track`` picks the new contents up)."""
        if not files:
            return
        entries = self._entries(tree, files)
        for name in files:
            if name not in entries:
                path = self.worktree / name
                if path.is_symlink() or path.is_file():
                    path.unlink()
                    self._prune_empty_dirs(path.parent)
        if not entries:
            return
        names = sorted(entries)
        shas = "\n".join(entries[n][1] for n in names) + "\n"
        proc = subprocess.run(
            ["git", "cat-file", "--batch"],
            cwd=self.worktree,
            env=self._env(),
            input=shas.encode(),
            capture_output=True,
            check=True,
        )
        data, offset = proc.stdout, 0
        for name in names:
            mode = entries[name][0]
            header_end = data.index(b"\n", offset)
            size = int(data[offset:header_end].split()[2])
            body = data[header_end + 1 : header_end + 1 + size]
            offset = header_end + 1 + size + 1
            self._write(name, mode, body)

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
        proc = subprocess.run(
            ["git", "cat-file", "--batch"],
            cwd=self.worktree,
            env=self._env(),
            input=specs.encode("utf-8", "surrogateescape"),
            capture_output=True,
            check=True,
        )
        data, offset, result = proc.stdout, 0, {}
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
        raw = b"tree %d\0" % len(body) + body
        sha = hashlib.sha1(raw).digest()
        hexsha = sha.hex()
        target = self.git_dir / "objects" / hexsha[:2] / hexsha[2:]
        if not target.exists():
            target.parent.mkdir(parents=True, exist_ok=True)
            scratch = target.with_name(f".tmp-{os.getpid()}-{hexsha[2:]}")
            scratch.write_bytes(zlib.compress(raw))
            os.replace(scratch, target)
        return sha

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


def for_session(session) -> Snapshots:  # noqa: ANN001 - a sessions_app.models.Session
    return Snapshots(
        git_dir=session.snapshot_dir,
        worktree=session.worktree,
        objects=Path(settings.WORKSPACE_ROOT) / ".snapshots" / "objects",
    )
