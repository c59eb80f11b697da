"""The shell's sandbox (issue 15): what it costs and how fast it stops.

* Start overhead: ``shell true`` through the sandbox (``runs_app.sandbox.run``: bubblewrap,
  prlimit, a pids cgroup, the output pipe) against the floor, a plain
  ``subprocess.run(["/bin/sh", "-c", "true"])``, median and p99 of N each, interleaved.
* Stop: a command whose tree holds a background child, a child that left the process group
  (``setsid``) and the foreground ``sleep``; from the moment the stop is asked to the moment
  no process of it is left (``/proc`` scanned), p99 of N.
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

    from runs_app import sandbox

    settings.AGENT_ALLOW_SHELL = True
    reason = sandbox.unavailable_reason()
    if reason:
        return {"skipped": reason}
    n = 50 if quick else 200
    worktree = Path(tempfile.mkdtemp(prefix="agentplat-bench-sandbox-"))
    plain, boxed = [], []

    async def one_boxed() -> float:
        start = time.perf_counter()
        outcome = await sandbox.run(worktree, "true", on_output=_nothing, should_stop=lambda: False)
        assert outcome.exit_code == 0, outcome
        return (time.perf_counter() - start) * 1000

    for _ in range(5):  # warm-up (the sandbox probe, the page cache)
        asyncio.run(one_boxed())
    for _ in range(n):
        start = time.perf_counter()
        subprocess.run(["/bin/sh", "-c", "true"], cwd=worktree, check=True)
        plain.append((time.perf_counter() - start) * 1000)
        boxed.append(asyncio.run(one_boxed()))

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

    return {
        "samples": n,
        "plain_p50_ms": percentile(plain, 50),
        "plain_p99_ms": percentile(plain, 99),
        "sandbox_p50_ms": percentile(boxed, 50),
        "sandbox_p99_ms": percentile(boxed, 99),
        "ratio_p50": ratio(percentile(boxed, 50), percentile(plain, 50)),
        "stop_rounds": rounds,
        "stop_p50_ms": percentile(stops, 50),
        "stop_p99_ms": percentile(stops, 99),
        "stop_max_ms": max(stops),
        "cgroup": str(sandbox._cgroup_root() or "none (rlimits only)"),
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
    return "\n".join(
        [
            "Shell sandbox (bubblewrap + prlimit + pids cgroup): `shell true` interleaved with"
            " the floor",
            start,
            stop,
            f"  pids cgroup: {r['cgroup']}",
        ]
    )
