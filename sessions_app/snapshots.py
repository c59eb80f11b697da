"""Worktree snapshots: git trees in a git directory of the session's own.

``git --git-dir=<WORKSPACE_ROOT>/.snapshots/<session>.git --work-tree=<worktree>``, so a
``.git`` that the worktree itself contains is never used or changed (it is excluded).
``track`` = add + write-tree (content-addressed: an unchanged tree is the same hash and
costs no new objects), ``patch`` = files changed since a tree, ``restore`` = the exact tree.
"""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

EMPTY_TREE = "4b825dc642cb6eb9a060e54bf8d69288fbee4904"


class SnapshotError(RuntimeError):
    pass


@dataclass(frozen=True)
class Snapshots:
    git_dir: Path
    worktree: Path

    def _git(self, *args: str, input: bytes | None = None, check: bool = True) -> str:
        env = {
            **os.environ,
            "GIT_DIR": str(self.git_dir),
            "GIT_WORK_TREE": str(self.worktree),
            "GIT_CONFIG_NOSYSTEM": "1",
            "GIT_CONFIG_GLOBAL": os.devnull,
            "GIT_AUTHOR_NAME": "agentplat",
            "GIT_AUTHOR_EMAIL": "agentplat@localhost",
            "GIT_COMMITTER_NAME": "agentplat",
            "GIT_COMMITTER_EMAIL": "agentplat@localhost",
        }
        proc = subprocess.run(
            ["git", *args],
            cwd=self.worktree,
            env=env,
            input=input,
            capture_output=True,
        )
        if check and proc.returncode != 0:
            raise SnapshotError(proc.stderr.decode(errors="replace").strip())
        return proc.stdout.decode(errors="replace")

    def ensure(self) -> None:
        self.worktree.mkdir(parents=True, exist_ok=True)
        if not (self.git_dir / "HEAD").exists():
            self.git_dir.parent.mkdir(parents=True, exist_ok=True)
            self._git("init", "--quiet")
            self._git("config", "core.bare", "false")
            info = self.git_dir / "info"
            info.mkdir(exist_ok=True)
            (info / "exclude").write_text(".git\n.git/\n")
            self._git("config", "core.autocrlf", "false")
            self._git("config", "core.quotepath", "false")
            self._git("config", "gc.auto", "0")

    def track(self) -> str:
        self.ensure()
        self._git("add", "--all", "--force", "--", ".", ":(exclude).git")
        return self._git("write-tree").strip()

    def patch(self, tree: str, other: str | None = None) -> list[str]:
        """Files that differ between ``tree`` and ``other`` (default: the worktree now)."""
        self.ensure()
        if other is None:
            other = self.track()
        if other == tree:
            return []
        out = self._git("diff-tree", "-r", "--name-only", "-z", "--no-renames", tree, other)
        return sorted(f for f in out.split("\0") if f)

    def diff_stat(self, tree: str, other: str) -> list[dict]:
        """Per-file status and line counts from ``tree`` to ``other``."""
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
            code = states.get(name, "M")
            result.append(
                {
                    "file": name,
                    "status": {"A": "added", "D": "deleted"}.get(code, "modified"),
                    "additions": int(add) if add.isdigit() else 0,
                    "deletions": int(dele) if dele.isdigit() else 0,
                }
            )
        return sorted(result, key=lambda r: r["file"])

    def restore(self, tree: str) -> None:
        """Make the worktree exactly ``tree``: changed files rewritten, extra files deleted."""
        self.ensure()
        self._git("read-tree", tree)
        self._git("checkout-index", "--all", "--force")
        # Files that are not in the tree are untracked now; remove them (never the .git).
        self._git("clean", "--force", "-d", "--quiet", "--exclude=.git", "--", ".")


def for_session(session) -> Snapshots:  # noqa: ANN001 - a sessions_app.models.Session
    return Snapshots(git_dir=session.snapshot_dir, worktree=session.worktree)
