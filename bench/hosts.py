"""Worker hosts (issue 45): what replicating a step's snapshot to the central store costs
(``workspace/replication.py``), with 10 and 1,000 files changed by each step of a worktree of
5,000 files, side by side with the step without replication.

A "step" here is the files' part of a step's end: the changed files written, then
``track()`` (the snapshot). Replication is the push of that snapshot to a bare repository
behind the tests' https git server (``git http-backend`` on loopback, TLS: the transport a
deployment uses, without a network's round trips). Measured both ways:

* **sync**: the push inside the step (what the loop does): the step ends once the central
  store holds its files, so a host lost after it loses nothing of it.
* **async**: the push handed to a thread of its own; the step ends after its snapshot and the
  push runs beside the next step. The step's time, and the lag until the store holds it
  (what a host lost in that window would cost).
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

BASE_FILES = 5_000


def _pct(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(q * (len(ordered) - 1))))]


def _build(root: Path, files: int) -> list[Path]:
    paths = []
    for i in range(files):
        path = root / f"d{i // 100:03d}" / f"f{i:05d}.txt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(f"file {i}\n" + "x" * 1000 + "\n")
        paths.append(path)
    return paths


def _change(paths: list[Path], count: int, step: int) -> None:
    for p in paths[:count]:
        p.write_text(f"{p.name} step {step}\n" + "y" * 1000 + "\n")


def _measure(tmp: Path, server: Any, changed: int, steps: int) -> dict[str, Any]:
    from workspace import replication
    from workspace.snapshots import Snapshots

    worktree = tmp / f"wt-{changed}"
    snap = Snapshots(git_dir=tmp / f"snap-{changed}.git", worktree=worktree)
    paths = _build(worktree, BASE_FILES)
    session = f"bench-{changed}"
    expected = replication.push(snap, session, snap.track(), "")  # the first, full push
    plain, push, sync, async_step, lag = [], [], [], [], []
    for step in range(steps):  # without replication
        _change(paths, changed, step)
        start = time.perf_counter()
        snap.track()
        plain.append((time.perf_counter() - start) * 1000)
    for step in range(steps):  # sync: the push inside the step
        _change(paths, changed, 1000 + step)
        start = time.perf_counter()
        tree = snap.track()
        pushed = time.perf_counter()
        expected = replication.push(snap, session, tree, expected)
        end = time.perf_counter()
        push.append((end - pushed) * 1000)
        sync.append((end - start) * 1000)
    for step in range(steps):  # async: the push on a thread, beside the next step
        _change(paths, changed, 2000 + step)
        start = time.perf_counter()
        tree = snap.track()
        ended = time.perf_counter()
        async_step.append((ended - start) * 1000)
        done: list[str] = []
        thread = threading.Thread(
            target=lambda t=tree, e=expected, d=done: d.append(
                replication.push(snap, session, t, e)
            )
        )
        thread.start()
        _change(paths, changed, 3000 + step)  # the next step's tools, meanwhile
        thread.join()
        lag.append((time.perf_counter() - ended) * 1000)
        expected = done[0]
    row: dict[str, Any] = {"changed": changed, "steps": steps}
    for name, values in (
        ("step_plain", plain),
        ("push", push),
        ("step_sync", sync),
        ("step_async", async_step),
        ("async_lag", lag),
    ):
        row[f"{name}_p50_ms"] = statistics.median(values)
        row[f"{name}_p99_ms"] = _pct(values, 0.99)
    return row


def run(quick: bool = False) -> dict[str, Any]:
    import django

    django.setup()
    from django.conf import settings

    from tests.support.git_server import git_server

    steps = 10 if quick else 40
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp, git_server(Path(tmp)) as server:
        server.make_repo("central", {"README": "central\n"})
        settings.SNAPSHOT_REMOTE = server.url("central")
        settings.SNAPSHOT_REMOTE_TOKEN = server.token
        settings.GIT_SSL_CAINFO = str(server.ca_file)
        rows = [_measure(Path(tmp), server, changed, steps) for changed in (10, 1000)]
    return {"base_files": BASE_FILES, "rows": rows}


def report(r: dict[str, Any]) -> str:
    lines = [
        f"Replicated snapshots: a step's snapshot pushed to the central store over https "
        f"(worktree of {r['base_files']:,} files; ms, p50 / p99)",
        "  changed   step alone   push alone   step + push (sync)   step (async)   async lag",
    ]
    for row in r["rows"]:
        cell = lambda name, row=row: (  # noqa: E731
            f"{row[f'{name}_p50_ms']:.0f} / {row[f'{name}_p99_ms']:.0f}"
        )
        lines.append(
            f"  {row['changed']:>7,}   {cell('step_plain'):>10}   {cell('push'):>10}"
            f"   {cell('step_sync'):>18}   {cell('step_async'):>12}   {cell('async_lag'):>9}"
        )
    return "\n".join(lines)


if __name__ == "__main__":
    print(report(run()))
