"""The shell's sandbox (issue 15): what it costs and how fast it stops.

* Start overhead: ``shell true`` through the sandbox (``workspace.sandbox.run``: bubblewrap,
  prlimit, a pids cgroup, the output pipe) against the floor, a plain
  ``subprocess.run(["/bin/sh", "-c", "true"])``, median and p99 of N each, interleaved.
* Stop: a command whose tree holds a background child, a child that left the process group
  (``setsid``) and the foreground ``sleep``; from the moment the stop is asked to the moment
  no process of it is left (``/proc`` scanned), p99 of N.
* A step's snapshot (issue 24): ``Snapshots.track()`` as it runs now (git by absolute path,
  a minimal environment, every worktree-config override, nested repositories taken apart)
  against the same ``track()`` with the runner as it was before (no ``-c`` overrides, the
  server's environment), and against the floor, its git calls (``add --all``, ``write-tree``,
  ``diff-tree`` of the changed files) run bare; three twin stores of the same
  worktree of 2,000 files, three of them changed before each step, interleaved, median.
"""

from __future__ import annotations

import asyncio
import os
import random
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any

from .stats import percentile, ratio


def _alive(marker: bytes) -> bool:
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if marker in Path(f"/proc/{pid}/cmdline").read_bytes():
                return True
        except OSError:
            continue
    return False


async def _nothing(text: str) -> None:
    return None


def run(*, quick: bool) -> dict[str, Any]:
    from django.conf import settings

    from workspace import sandbox, sandbox_cgroups

    settings.AGENT_ALLOW_SHELL = True
    reason = sandbox.unavailable_reason()
    if reason:
        return {"skipped": reason}
    n = 50 if quick else 200
    worktree = Path(tempfile.mkdtemp(prefix="agentplat-bench-sandbox-"))
    plain, boxed, layered = [], [], []
    overlay = settings.AGENT_SHELL_OVERLAY

    async def one_boxed(mode: str = "off") -> float:
        settings.AGENT_SHELL_OVERLAY = mode
        start = time.perf_counter()
        outcome = await sandbox.run(worktree, "true", on_output=_nothing, should_stop=lambda: False)
        assert outcome.exit_code == 0, outcome
        return (time.perf_counter() - start) * 1000

    for _ in range(5):  # warm-up (the sandbox probe, the overlay's probe, the page cache)
        asyncio.run(one_boxed())
        asyncio.run(one_boxed("auto"))
    layers_here = sandbox.uses_layers(worktree)
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], cwd=worktree, check=True)
        plain.append((time.perf_counter() - start) * 1000)
        boxed.append(asyncio.run(one_boxed()))
        if layers_here:  # issue 43: the same command over a layer (mount, merge, drop)
            layered.append(asyncio.run(one_boxed("auto")))
    settings.AGENT_SHELL_OVERLAY = overlay

    stops = []
    rounds = 10 if quick else 40
    for i in range(rounds):
        marker = f"sleep {1000 + i}.{os.getpid()}"
        # The stop is due 0.3 s after the start; the sandbox sees it at its next check (every
        # 50 ms), so the time counted includes that wait.
        due = time.monotonic() + 0.3 + random.uniform(0, 0.05)  # any phase of the check
        asyncio.run(
            sandbox.run(
                worktree,
                f"(setsid {marker} &); {marker} & {marker}",
                on_output=_nothing,
                should_stop=lambda due=due: time.monotonic() >= due,
            )
        )
        while _alive(marker.encode()):
            time.sleep(0.002)
        stops.append((time.monotonic() - due) * 1000)

    snapshot = _step_snapshots(10 if quick else 40)
    return {
        **snapshot,
        "samples": n,
        "plain_p50_ms": percentile(plain, 50),
        "plain_p99_ms": percentile(plain, 99),
        "sandbox_p50_ms": percentile(boxed, 50),
        "sandbox_p99_ms": percentile(boxed, 99),
        "ratio_p50": ratio(percentile(boxed, 50), percentile(plain, 50)),
        "layered_p50_ms": percentile(layered, 50) if layered else None,
        "layered_p99_ms": percentile(layered, 99) if layered else None,
        "stop_rounds": rounds,
        "stop_p50_ms": percentile(stops, 50),
        "stop_p99_ms": percentile(stops, 99),
        "stop_max_ms": max(stops),
        "cgroup": ", ".join(f"{k} {v}" for k, v in sandbox_cgroups.cgroup_roots().items())
        or "none (rlimits only)",
    }


def _unhardened_env(snap: Any, index: str | None = None) -> dict[str, str]:
    """The runner's environment before issue 24: the server's own, plus the store's names."""
    env = {
        **os.environ,
        "GIT_DIR": str(snap.git_dir),
        "GIT_WORK_TREE": str(snap.worktree),
        "GIT_CONFIG_NOSYSTEM": "1",
        "GIT_CONFIG_GLOBAL": os.devnull,
        "GIT_LITERAL_PATHSPECS": "1",
        "GIT_OPTIONAL_LOCKS": "0",
    }
    env.pop("GIT_INDEX_FILE", None)
    if index:
        env["GIT_INDEX_FILE"] = index
    return env


def _step_snapshots(steps: int) -> dict[str, Any]:
    from workspace import snapshots, worktree_undo

    with tempfile.TemporaryDirectory(prefix="agentplat-bench-snap-") as tmp:
        worktree = Path(tmp) / "wt"
        files = []
        for i in range(2000):
            path = worktree / f"d{i // 100:02d}" / f"f{i:04d}.py"
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(f"# file {i}\n" + "x = 1\n" * 40)
            files.append(path)
        hardened = snapshots.Snapshots(git_dir=Path(tmp) / "hardened.git", worktree=worktree)
        before = snapshots.Snapshots(git_dir=Path(tmp) / "before.git", worktree=worktree)
        flags, env = snapshots.GIT_FLAGS, snapshots.Snapshots._env

        def unhardened() -> None:  # the same track(), its runner as before: no overrides
            snapshots.GIT_FLAGS, snapshots.Snapshots._env = (), _unhardened_env
            try:
                before.track()
            finally:
                snapshots.GIT_FLAGS, snapshots.Snapshots._env = flags, env

        plain_dir = Path(tmp) / "plain.git"
        subprocess.run(["git", "init", "-q", "--bare", str(plain_dir)], check=True)
        (plain_dir / "info").mkdir(exist_ok=True)
        (plain_dir / "info" / "exclude").write_text(".git\n")
        git = ["git", f"--git-dir={plain_dir}", f"--work-tree={worktree}"]
        last = [""]

        def plain() -> None:  # the floor: the same git calls from a shell, nothing around them
            subprocess.run([*git, "add", "--all"], cwd=worktree, check=True)
            tree = subprocess.run(
                [*git, "write-tree"], cwd=worktree, check=True, capture_output=True, text=True
            ).stdout.strip()
            if last[0] and tree != last[0]:  # the files that changed, for the size check
                subprocess.run(
                    [*git, "diff-tree", "-r", "--name-only", "-z", "--no-renames", last[0], tree],
                    cwd=worktree,
                    check=True,
                    capture_output=True,
                )
            last[0] = tree

        series = {"hardened": hardened.track, "unhardened": unhardened, "plain": plain}
        for fn in series.values():  # the first snapshot of each store, then a warm index
            fn()
            fn()
        times: dict[str, list[float]] = {name: [] for name in series}
        for step in range(steps):
            for path in files[step * 3 % len(files) :][:3]:
                path.write_text(path.read_text() + f"y = {step}\n")
            order = list(series.items())
            if step % 2:
                order.reverse()  # none always sees another's warm cache
            for name, fn in order:
                start = time.perf_counter()
                fn()
                times[name].append((time.perf_counter() - start) * 1000)
        medians = {name: percentile(values, 50) for name, values in times.items()}
        # What each shell call adds before its command (the undo point: a snapshot and the
        # list of entries), after a step changed three files.
        undo = []
        for step in range(steps):
            for path in files[step * 3 % len(files) :][:3]:
                path.write_text(path.read_text() + f"z = {step}\n")
            start = time.perf_counter()
            worktree_undo.Undo.record(worktree, hardened)
            undo.append((time.perf_counter() - start) * 1000)
        return {
            "snap_steps": steps,
            "snap_files": len(files),
            "snap_hardened_ms": medians["hardened"],
            "snap_unhardened_ms": medians["unhardened"],
            "snap_plain_ms": medians["plain"],
            "snap_ratio": ratio(medians["hardened"], medians["unhardened"]),
            "snap_ratio_floor": ratio(medians["hardened"], medians["plain"]),
            "undo_ms": percentile(undo, 50),
        }


def report(r: dict[str, Any]) -> str:
    if "skipped" in r:
        return f"Shell sandbox: skipped ({r['skipped']})"
    start = (
        f"  start → exit, {r['samples']} each: plain subprocess.run"
        f" p50 {r['plain_p50_ms']:.1f} ms / p99 {r['plain_p99_ms']:.1f} ms;"
        f" sandboxed p50 {r['sandbox_p50_ms']:.1f} ms / p99 {r['sandbox_p99_ms']:.1f} ms"
        f" ({r['ratio_p50']:.1f}x the floor at p50)"
    )
    stop = (
        f"  stop due → no process of the tree left ({r['stop_rounds']} rounds, 3 processes"
        " each, one of them setsid; includes the wait for the 50 ms check):"
        f" p50 {r['stop_p50_ms']:.1f} ms, p99 {r['stop_p99_ms']:.1f} ms,"
        f" max {r['stop_max_ms']:.1f} ms (target < 300 ms)"
    )
    if r.get("layered_p50_ms") is not None:
        added = r["layered_p50_ms"] - r["sandbox_p50_ms"]
        start += (
            f"\n  the same over an overlay layer (issue 43: mount, merge, drop), interleaved:"
            f" p50 {r['layered_p50_ms']:.1f} ms / p99 {r['layered_p99_ms']:.1f} ms; the layer"
            f" adds {added:.1f} ms at p50 (target <= 10 ms: {'met' if added <= 10 else 'not met'})"
        )
    else:
        start += "\n  no overlay layer on this host: commands write into the worktree"
    return "\n".join(
        [
            "Shell sandbox (bubblewrap + prlimit + pids cgroup): `shell true` interleaved with"
            " the floor",
            start,
            stop,
            f"  a step's snapshot, {r['snap_files']} files with 3 changed, median of"
            f" {r['snap_steps']}: track() {r['snap_hardened_ms']:.1f} ms; the same track() with"
            f" the runner as before issue 24 (no overrides, the server's environment)"
            f" {r['snap_unhardened_ms']:.1f} ms ({r['snap_ratio']:.2f}x, target <= 1.2x);"
            f" the floor, its git calls alone from a shell, {r['snap_plain_ms']:.1f} ms"
            f" ({r['snap_ratio_floor']:.2f}x)",
            f"  the undo point each shell call takes first (a snapshot and the list of entries,"
            f" issue 24 finding 6), same tree: {r['undo_ms']:.1f} ms",
            f"  cgroups: {r['cgroup']}",
        ]
    )
