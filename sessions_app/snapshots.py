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

import os
import subprocess
import tempfile
from dataclasses import dataclass
from pathlib import Path

from django.conf import settings

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class SnapshotError(RuntimeError):
    pass


@dataclass(frozen=True)
class Snapshots:
    git_dir: Path
    worktree: Path

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
        self.worktree.mkdir(parents=True, exist_ok=True)
        if (self.git_dir / "HEAD").exists():
            return
        self.git_dir.parent.mkdir(parents=True, exist_ok=True)
        self._git("init", "--quiet")
        for key, value in [
            ("core.bare", "false"),
            ("core.autocrlf", "false"),
            ("core.quotepath", "false"),
            ("core.untrackedCache", "true"),
            ("gc.auto", "0"),
        ]:
            self._git("config", key, value)
        (self.git_dir / "info").mkdir(exist_ok=True)
        (self.git_dir / "info" / "exclude").write_text(".git\n")

    # -- the three operations --------------------------------------------------------------
    def track(self) -> str:
        self.ensure()
        self._git("add", "--all", "--", ".")
        tree = self._git("write-tree").strip()
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        if limit and tree != self._last_tree():
            large = self.large_files(tree, limit)
            if large:
                # Large files stay out of snapshots (reported by ``skipped``), never silently.
                self._git("rm", "--cached", "--quiet", "--", *large)
                tree = self._git("write-tree").strip()
            (self.git_dir / "last-tree").write_text(tree)
        return tree

    def _last_tree(self) -> str:
        try:
            return (self.git_dir / "last-tree").read_text().strip()
        except FileNotFoundError:
            return ""

    def large_files(self, tree: str, limit: int) -> list[str]:
        out = self._git("ls-tree", "-r", "-l", "-z", tree)
        large = []
        for entry in out.split("\0"):
            if not entry:
                continue
            meta, _, name = entry.partition("\t")
            size = meta.split()[-1]
            if size.isdigit() and int(size) > limit:
                large.append(name)
        return large

    def skipped(self) -> list[dict[str, str]]:
        """Files of the worktree that snapshots do not cover, and why."""
        self.ensure()
        result = []
        limit = settings.SNAPSHOT_MAX_FILE_BYTES
        others = self._git("ls-files", "--others", "-z", "--", ".")
        for name in filter(None, others.split("\0")):
            path = self.worktree / name
            if limit and path.is_file() and path.stat().st_size > limit:
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

    # -- building blocks of revert -------------------------------------------------------------
    def exists_in(self, tree: str, files: list[str]) -> set[str]:
        if not files:
            return set()
        out = self._git("ls-tree", "-r", "--name-only", "-z", tree, "--", *files)
        return set(filter(None, out.split("\0")))

    def checkout(self, tree: str, files: list[str]) -> None:
        """Write ``files`` as they are in ``tree``; delete those that are not in it."""
        if not files:
            return
        present = self.exists_in(tree, files)
        for name in files:
            if name not in present:
                path = self.worktree / name
                if path.is_symlink() or path.is_file():
                    path.unlink()
                    self._prune_empty_dirs(path.parent)
        wanted = [f for f in files if f in present]
        for name in wanted:
            # A directory standing where a file must go (or the reverse) is cleared first.
            path = self.worktree / name
            if path.is_dir() and not path.is_symlink():
                import shutil

                shutil.rmtree(path)
        if wanted:
            self._git(
                "checkout",
                tree,
                "--pathspec-from-file=-",
                "--pathspec-file-nul",
                input="\0".join(wanted).encode("utf-8", errors="surrogateescape"),
            )

    def _prune_empty_dirs(self, directory: Path) -> None:
        root = self.worktree.resolve()
        while directory.resolve() != root and directory.is_dir() and not any(directory.iterdir()):
            directory.rmdir()
            directory = directory.parent

    def compose(self, base: str, sources: dict[str, str]) -> str:
        """The tree that is ``base`` with each file of ``sources`` as it is in its tree
        (absent there → absent here). Built in a scratch index; the worktree is not touched."""
        if not sources:
            return base
        with tempfile.TemporaryDirectory() as scratch:
            index = os.path.join(scratch, "index")
            self._git("read-tree", base, index=index)
            by_tree: dict[str, list[str]] = {}
            for name, tree in sources.items():
                by_tree.setdefault(tree, []).append(name)
            lines = []
            for tree, names in by_tree.items():
                entries = self._git("ls-tree", "-r", "-z", tree, "--", *names)
                found = {}
                for entry in filter(None, entries.split("\0")):
                    meta, _, name = entry.partition("\t")
                    found[name] = meta
                for name in names:
                    if name in found:
                        mode, _, sha = found[name].split()
                        lines.append(f"{mode} {sha}\t{name}")
                    else:
                        lines.append(f"0 {'0' * 40}\t{name}")
            self._git(
                "update-index",
                "-z",
                "--index-info",
                input="\0".join(lines).encode("utf-8", errors="surrogateescape") + b"\0",
                index=index,
            )
            return self._git("write-tree", index=index).strip()

    # -- diffs ----------------------------------------------------------------------------------
    def diff_stat(self, tree: str, other: str) -> list[dict]:
        """Per file from ``tree`` to ``other``: status, line counts, binary files marked."""
        if tree == other:
            return []
        status = self._git("diff-tree", "-r", "--no-renames", "--name-status", "-z", tree, other)
        fields = [f for f in status.split("\0") if f]
        states = {fields[i + 1]: fields[i] for i in range(0, len(fields) - 1, 2)}
        numstat = self._git("diff-tree", "-r", "--no-renames", "--numstat", "-z", tree, other)
        result = []
        for entry in numstat.split("\0"):
            if not entry:
                continue
            add, dele, name = entry.split("\t", 2)
            binary = add == "-" and dele == "-"
            code = states.get(name, "M")
            result.append(
                {
                    "file": name,
                    "status": {"A": "added", "D": "deleted"}.get(code, "modified"),
                    "additions": 0 if binary else int(add),
                    "deletions": 0 if binary else int(dele),
                    "binary": binary,
                }
            )
        return sorted(result, key=lambda r: r["file"])

    def diff_text(self, tree: str, other: str, *, limit: int = 200_000) -> str:
        """The unified diff from ``tree`` to ``other`` (binary files as one line each)."""
        if tree == other:
            return ""
        text = self._git("diff-tree", "-r", "-p", "--no-renames", "--no-color", tree, other)
        return text if len(text) <= limit else text[:limit] + "\n[diff truncated]\n"


def summary_of(diff: list[dict]) -> dict[str, int]:
    return {
        "additions": sum(d["additions"] for d in diff),
        "deletions": sum(d["deletions"] for d in diff),
        "files": len(diff),
    }


def for_session(session) -> Snapshots:  # noqa: ANN001 - a sessions_app.models.Session
    return Snapshots(git_dir=session.snapshot_dir, worktree=session.worktree)
