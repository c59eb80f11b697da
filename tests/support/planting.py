"""Files put into a worktree by the test itself, as no writer of the platform does: every
writer tells the worktree's journal what it changed (``workspace/change_journal.py``), and a
step's snapshot takes those paths alone. A test that plants files stands for a writer that
cannot say what it wrote (a command writing in place, where no overlay mounts): ``planted``
says so, and the next snapshot walks the worktree."""

from __future__ import annotations

from pathlib import Path

from workspace import change_journal


def planted(worktree: Path) -> None:
    change_journal.forget(worktree)
