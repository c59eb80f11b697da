"""Snapshots: ``track()`` per step and a revert of a 10-file change, in worktrees of 100 and
10,000 files, beside the floor (a bare ``git write-tree`` on the same index).

The revert is the work ``revert_session`` does on the files (compose the reverted tree in a
scratch index, check out the changed files, diff the trees); the database part is measured
by the checkpoint benchmark."""

from __future__ import annotations

import os
import statistics
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")


def _median_ms(fn, repeat: int) -> float:  # noqa: ANN001
    times = []
    for _ in range(repeat):
        start = time.perf_counter()
        fn()
        times.append((time.perf_counter() - start) * 1000)
    return statistics.median(times)


def _build(root: Path, files: int) -> list[Path]:
    paths = []
    for i in range(files):
        path = root / f"d{i // 100:03d}" / f"f{i:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n" + "x" * 1000 + "\n")
        paths.append(path)
    return paths


def measure(files: int, repeat: int) -> dict[str, Any]:
    import django

    django.setup()
    from workspace import trees
    from workspace.snapshots import Snapshots

    with tempfile.TemporaryDirectory() as tmp:
        worktree = Path(tmp) / "wt"
        snap = Snapshots(git_dir=Path(tmp) / "snap.git", worktree=worktree)
        paths = _build(worktree, files)
        snap.track()
        snap.track()  # warm the stat cache, as a worktree that steps ran in has it
        track_ms = _median_ms(snap.track, repeat)
        env = snap._env()

        def floor() -> None:
            subprocess.run(["git", "write-tree"], cwd=worktree, env=env, capture_output=True)

        floor_ms = _median_ms(floor, repeat)
        changed = paths[:: max(1, files // 10)][:10]

        def revert_once() -> None:
            before = snap.track()
            for p in changed:
                p.write_text(p.read_text() + "changed\n")
            after = snap.track()
            start = time.perf_counter()
            target = trees.compose(
                snap, after, {p.relative_to(worktree).as_posix(): before for p in changed}
            )
            snap.checkout(target, snap.patch(after, target))
            snap.diff_stat(after, target)
            snap.diff_text(after, target)
            timings.append((time.perf_counter() - start) * 1000)

        timings: list[float] = []
        for _ in range(repeat):
            revert_once()
        return {
            "files": files,
            "track_unchanged_ms": track_ms,
            "write_tree_floor_ms": floor_ms,
            "revert_10_files_ms": statistics.median(timings),
        }


def run(quick: bool = False) -> dict[str, Any]:
    repeat = 5 if quick else 15
    small, large = measure(100, repeat), measure(10_000, repeat)
    return {"small": small, "large": large}


def report(result: dict[str, Any]) -> str:
    small, large = result["small"], result["large"]
    lines = [
        "Snapshots (median ms)",
        "  worktree      track()  write-tree floor  ratio  revert of 10 files",
    ]
    for r in (small, large):
        ratio = r["track_unchanged_ms"] / r["write_tree_floor_ms"]
        lines.append(
            f"  {r['files']:>6} files  {r['track_unchanged_ms']:7.1f}"
            f"  {r['write_tree_floor_ms']:16.1f}  {ratio:4.1f}x  {r['revert_10_files_ms']:18.1f}"
        )
    growth = large["revert_10_files_ms"] / small["revert_10_files_ms"]
    lines.append(
        f"  revert 10,000 vs 100 files: {growth:.2f}x (target <= 1.5x); "
        f"track() on 10,000 unchanged: {large['track_unchanged_ms']:.1f} ms (target < 50 ms)"
    )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
