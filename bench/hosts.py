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

Then (``bench/hosts_rehome.py``) the time to re-home a session of 50,000 files against the
physical floors (a plain ``git clone``, ``cp -a``; with a same-tree session on the host, the
hard-link path against ``cp -al``), and a file read from the web's mirror against local disk;
and (``bench/hosts_routing.py``) a run's start routed to its host's queue against the default
queue, through Daphne and a real Celery worker.
"""

from __future__ import annotations

import os
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

from . import hosts_rehome, hosts_routing
from .env import Env
from .stats import ratio

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "config.settings")

BASE_FILES = 5_000
STEPS = 8
SESSION = "bench-steps"


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


def _measure(
    snap: Any, paths: list[Path], expected: str, changed: int, steps: int
) -> tuple[dict[str, Any], str]:
    """The three ways of a step with ``changed`` files changed (step numbers of their own, so
    each step changes every one of them); the row and the ref's new commit."""
    from workspace import replication

    session = SESSION
    base = changed * 10_000
    plain, push, sync, async_step, lag = [], [], [], [], []
    for step in range(steps):  # without replication
        _change(paths, changed, base + step)
        start = time.perf_counter()
        snap.track()
        plain.append((time.perf_counter() - start) * 1000)
    for step in range(steps):  # sync: the push inside the step
        _change(paths, changed, base + 1000 + step)
        start = time.perf_counter()
        tree = snap.track()
        pushed = time.perf_counter()
        expected = replication.push(snap, session, tree, expected)
        end = time.perf_counter()
        push.append((end - pushed) * 1000)
        sync.append((end - start) * 1000)
    for step in range(steps):  # async: the push on a thread, beside the next step
        _change(paths, changed, base + 2000 + step)
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
        _change(paths, changed, base + 3000 + step)  # the next step's tools, meanwhile
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
    return row, expected


def _replication(tmp: Path, steps: int) -> list[dict[str, Any]]:
    """One worktree of ``BASE_FILES`` files, its first (full) push, then the steps of 10 and
    of 1,000 changed files on it."""
    from workspace import replication
    from workspace.snapshots import Snapshots

    snap = Snapshots(git_dir=tmp / "steps.git", worktree=tmp / "steps")
    paths = _build(snap.worktree, BASE_FILES)
    expected = replication.push(snap, SESSION, snap.track(), "")  # the first, full push
    rows = []
    for changed in (10, 1000):
        row, expected = _measure(snap, paths, expected, changed, steps)
        rows.append(row)
    return rows


def run(env: Env, quick: bool = False) -> dict[str, Any]:
    """Each part (see the modules): replication, re-homing, a read from the mirror, routing."""
    from django.conf import settings

    from tests.support.git_server import git_server

    steps = STEPS
    timings: dict[str, float] = {}
    # The machine's load, before and after: the figures here are seconds of git and disk,
    # and other work on a shared machine moves them.
    out: dict[str, Any] = {"base_files": BASE_FILES, "load_before": os.getloadavg()}
    saved = (settings.SNAPSHOT_REMOTE, settings.SNAPSHOT_REMOTE_TOKEN, settings.GIT_SSL_CAINFO)
    with tempfile.TemporaryDirectory(prefix="bench-hosts-") as tmp, git_server(Path(tmp)) as server:
        server.make_repo("central", {"README": "central\n"})
        settings.SNAPSHOT_REMOTE = server.url("central")
        settings.SNAPSHOT_REMOTE_TOKEN = server.token
        settings.GIT_SSL_CAINFO = str(server.ca_file)
        try:
            began = time.perf_counter()
            out["rows"] = _replication(Path(tmp), steps)
            timings["replication"] = time.perf_counter() - began
            began = time.perf_counter()
            out["rehome"] = hosts_rehome.rehome(Path(tmp), server, quick)
            timings["rehome"] = time.perf_counter() - began
            began = time.perf_counter()
            out["read"] = hosts_rehome.mirror_read(Path(tmp), server)
            timings["read"] = time.perf_counter() - began
            began = time.perf_counter()
            out["routing"] = hosts_routing.run(env, quick, server, str(Path(tmp) / "web-mirror"))
            timings["routing"] = time.perf_counter() - began
        finally:
            settings.SNAPSHOT_REMOTE, settings.SNAPSHOT_REMOTE_TOKEN, settings.GIT_SSL_CAINFO = (
                saved
            )
    out["seconds"] = timings
    out["load_after"] = os.getloadavg()
    return out


def _replication_report(r: dict[str, Any]) -> list[str]:
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
    return lines


def _rehome_report(h: dict[str, Any]) -> list[str]:
    row = lambda label, ms, floor="", base=0.0: (  # noqa: E731
        f"  {label:<52} {ms:>9,.0f}" + (f"   {ratio(ms, base):>5.2f}x {floor}" if base else "")
    )
    return [
        f"Re-homing a session of {h['files']:,} files on a host that holds nothing of it "
        f"(ms, median of {h['reps']}; layers: {h['layers']})",
        row("fetch (replication.fetch into an empty store)", h["fetch_ms"]),
        row("checkout (linked_rehome: no same-tree session)", h["checkout_ms"]),
        row("re-home: fetch + checkout", h["rehome_ms"], "git clone", h["clone_ms"]),
        row("  floor: plain git clone of the same tree (https)", h["clone_ms"]),
        row("  floor: cp -a of the worktree (local disk)", h["cp_ms"]),
        row("re-home beside a same-tree session: fetch", h["linked_fetch_ms"]),
        row(f"  + files by hard link ({h['linked_files']:,} linked)", h["linked_ms"]),
        row("  = re-home, linked", h["linked_rehome_ms"], "cp -al", h["cp_al_ms"]),
        row("  floor: cp -al of the worktree (links alone)", h["cp_al_ms"]),
        row("  linked vs checked out", h["linked_rehome_ms"], "re-home", h["rehome_ms"]),
    ]


def _read_report(m: dict[str, Any]) -> list[str]:
    how = "workspace/mirror.py" if m["mirror_module"] else "a fetched git dir (no mirror.py)"
    base = m["disk_ms"]
    return [
        f"A file read (1 KB) at the store level: mirror ({how}) vs local disk (ms, median of "
        f"{m['reads']})",
        f"  local disk (read the worktree's file)          {base:8.3f}",
        f"  the session's own store (git cat-file)         {m['own_store_ms']:8.3f}"
        f"   {ratio(m['own_store_ms'], base):6.0f}x disk",
        f"  mirror, warm (ensure + read_blob)              {m['mirror_warm_ms']:8.3f}"
        f"   {ratio(m['mirror_warm_ms'], base):6.0f}x disk",
        f"  mirror, right after a step (fetch + read)      {m['mirror_after_step_ms']:8.3f}"
        f"   {ratio(m['mirror_after_step_ms'], base):6.0f}x disk",
    ]


def _routing_report(g: dict[str, Any]) -> list[str]:
    return [
        f"A run's start with routing vs without (Daphne + a Celery worker, --pool threads -c 4, "
        f"WORKER_HOST={g['host']}; ms, median / max of {g['rounds']})",
        "  queue                          POST to started_at   queue wait (created to started)",
        f"  the host's queue (routed)      {g['routed_start_ms']:>7.0f} / "
        f"{g['routed_start_ms_max']:<8.0f}  {g['routed_queued_ms']:>7.0f} / "
        f"{g['routed_queued_ms_max']:.0f}",
        f"  the default queue (no home)    {g['default_start_ms']:>7.0f} / "
        f"{g['default_start_ms_max']:<8.0f}  {g['default_queued_ms']:>7.0f} / "
        f"{g['default_queued_ms_max']:.0f}",
        f"  routed / default: {ratio(g['routed_start_ms'], g['default_start_ms']):.2f}x",
    ]


def _api_read_report(a: dict[str, Any]) -> list[str]:
    base = a["disk_ms"]
    return [
        f"A file read through the API (GET /api/sessions/{{id}}/files/<path>, 5 bytes; ms, "
        f"median / p99 of {a['reads']}, alternating)",
        f"  web holding worktrees (HOLDS_WORKTREES True): local disk   {base:7.2f} / "
        f"{a['disk_p99_ms']:.2f}",
        f"  web holding none (HOLDS_WORKTREES False): its mirror       {a['mirror_ms']:7.2f} / "
        f"{a['mirror_p99_ms']:.2f}   {ratio(a['mirror_ms'], base):.2f}x",
        f"  the mirror's first read of the session (a fetch)          {a['first_mirror_ms']:7.1f}",
        f"  the mirror's first read after a step (median of {a['steps']}) "
        f"      {a['after_step_ms']:7.1f}   {ratio(a['after_step_ms'], base):.1f}x",
    ]


def report(r: dict[str, Any]) -> str:
    parts = [_replication_report(r), _rehome_report(r["rehome"]), _read_report(r["read"])]
    parts += [_routing_report(r["routing"]), _api_read_report(r["routing"]["reads"])]
    took = ", ".join(f"{k} {v:.0f} s" for k, v in r["seconds"].items())
    load = " -> ".join(" ".join(f"{x:.1f}" for x in r[k]) for k in ("load_before", "load_after"))
    footer = f"(hosts bench: {took}; load average {load})"
    return "\n\n".join("\n".join(p) for p in parts) + "\n\n" + footer
