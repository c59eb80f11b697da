"""A whole run that writes one file, in a worktree of 50,000 files against one of 10 (issue 43,
"Targets"): what a session's size costs every run, as a user's deployment runs it.

Services mode, started as the other benchmarks start it (``bench/env.py``): one Daphne (its CPU
weight as deployed) and one Celery worker as platform/Procfile starts it (``--pool threads
-c 4``), PostgreSQL and Redis. Two sessions, each made by ``POST /api/sessions/upload/`` of a
generated ``.tar.gz`` (not timed): a small one of 10 files and a large one of 50,000 files of
1 KB in 2,550 directories (50 x 50 x 20; ``--quick``: 5,000 files, 10 x 25 x 20). The uploads
go through a web process of their own with longer database and git limits (``UPLOAD_ENV``),
stopped before the runs; the runs' processes keep the defaults.

A run is ``POST /api/sessions/{id}/runs/`` with ``"wait": true`` and the scripted model's script
``write out.txt hello <n>`` (the write tool; ``<n>`` counts the runs, so each run changes the
file), timed from sending the request to the answer with the completed run, on one keep-alive
connection: the admission, the enqueue, the worker's start-up, the two steps (the tool call,
then ``done``) with their snapshots, the run's end and the wait's answer. The runs alternate
small, large, small, large… after warm-up runs of each, and the medians are compared: target,
the large session's median ≤ 1.2 x the small one's. After each run the file is read back
through the API (not timed) to check the run wrote it.

The same again with the run's tool a shell command (``shell echo hello <n> > out.txt``), the
web process and the worker restarted with ``AGENT_ALLOW_SHELL=true`` and
``AGENT_SHELL_SANDBOX=bwrap``; where the shell cannot run here, the report says why instead.
The write variant runs with the shell off, as the deployment's default.

Each run's ``created_at``, ``started_at`` and ``finished_at`` split the wall time into the wait
for the worker and the run in the worker (their medians are reported beside the wall time).
"""

from __future__ import annotations

import contextlib
import io
import os
import shutil
import statistics
import tarfile
import time
from collections.abc import Iterator
from datetime import datetime
from typing import Any

import httpx

from .env import Env
from .stats import ratio

TARGET = 1.2
FILE_BYTES = 1024
# (top directories, subdirectories each, files each): the large worktree's shape.
LARGE = (50, 50, 20)
LARGE_QUICK = (10, 25, 20)
SMALL = (1, 1, 10)
WARMUPS = 2
ROUNDS = 10
ROUNDS_QUICK = 6
SHELL_ENV = {"AGENT_ALLOW_SHELL": "true", "AGENT_SHELL_SANDBOX": "bwrap"}
# The uploads only (their web process is stopped before the runs, which run at the defaults):
# an upload records its files (git add of all of them) inside the transaction that writes the
# session's first message; on a busy machine 50,000 files took longer than the default 20 s
# idle-in-transaction limit (PostgreSQL ended the connection: a 500), and may take longer than
# the snapshot's git limit (60 s: a 400).
UPLOAD_ENV = {"DB_IDLE_IN_TRANSACTION_SECONDS": "900", "SNAPSHOT_GIT_TIMEOUT_SECONDS": "600"}
VARIANTS = {
    "write": ("write tool", "write out.txt hello {n}", "hello {n}"),
    "shell": ("shell command", "shell echo hello {n} > out.txt", "hello {n}\n"),
}


def _tree_tar(shape: tuple[int, int, int]) -> tuple[bytes, int, int]:
    """A ``.tar.gz`` of ``shape``'s tree of 1 KB files; its bytes, files and directories."""
    tops, subs, each = shape
    buf = io.BytesIO()
    files = dirs = 0
    with tarfile.open(fileobj=buf, mode="w:gz", compresslevel=1) as tar:

        def add_dir(name: str) -> None:
            info = tarfile.TarInfo(name)
            info.type, info.mode = tarfile.DIRTYPE, 0o755
            tar.addfile(info)

        for t in range(tops):
            add_dir(f"d{t:02d}")
            dirs += 1
            for s in range(subs):
                add_dir(f"d{t:02d}/s{s:02d}")
                dirs += 1
                for f in range(each):
                    path = f"d{t:02d}/s{s:02d}/f{f:02d}.txt"
                    line = f"{path}: line of a generated file, {t} {s} {f}\n".encode()
                    data = (line * (FILE_BYTES // len(line) + 1))[:FILE_BYTES]
                    info = tarfile.TarInfo(path)
                    info.size, info.mode = len(data), 0o644
                    tar.addfile(info, io.BytesIO(data))
                    files += 1
    return buf.getvalue(), files, dirs


@contextlib.contextmanager
def _environ(extra: dict[str, str]) -> Iterator[None]:
    """``extra`` in this process's environment while the processes are spawned (``Env``'s
    children inherit it), as it was afterwards."""
    saved = {key: os.environ.get(key) for key in extra}
    os.environ.update(extra)
    try:
        yield
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value


def _limits(files: int, dirs: int) -> dict[str, str]:
    """The limits to raise so that a worktree of ``files`` files and ``dirs`` directories is
    allowed (none at the defaults: REPO_MAX_FILES and WORKTREE_MAX_ENTRIES are 100,000)."""
    from django.conf import settings

    need = {
        "REPO_MAX_FILES": files + 10,
        "WORKTREE_MAX_ENTRIES": files + dirs + 100,
        "WORKTREE_MAX_BYTES": (files + 100) * FILE_BYTES * 2,
    }
    return {
        key: str(2 * value) for key, value in need.items() if 0 < getattr(settings, key) < value
    }


def _start(env: Env, extra: dict[str, str]) -> int:
    """Daphne and a worker as platform/Procfile starts them, with ``extra`` in their
    environment; Daphne's port, once the worker answers its health check."""
    with _environ(extra):
        _daphne, port = env.daphne()
        env.worker(4, pool="threads")
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        health = httpx.get(f"http://127.0.0.1:{port}/api/health/", timeout=10).json()
        if health["checks"]["worker"]["ok"]:
            return port
        time.sleep(0.5)
    raise RuntimeError("the worker did not answer the health check in 60 s")


def _upload(http: Any, name: str, body: bytes) -> tuple[str, float]:
    started = time.perf_counter()
    response = http.post(
        "/api/sessions/upload/",
        files={"file": (f"{name}.tar.gz", body, "application/gzip")},
        data={"title": f"whole run, {name}"},
        timeout=900,
    )
    if response.status_code != 201:
        raise RuntimeError(f"upload {name}: {response.status_code} {response.text[:300]}")
    return response.json()["id"], time.perf_counter() - started


def _seconds(run: dict[str, Any], a: str, b: str) -> float:
    return (datetime.fromisoformat(run[b]) - datetime.fromisoformat(run[a])).total_seconds()


def _tool_error(http: Any, sid: str) -> str:
    """The last tool part's error in the session (why a run did not write), or ''."""
    messages = http.get(f"/api/sessions/{sid}/messages/").json().get("results", [])
    for message in reversed(messages):
        for part in reversed(message.get("parts") or []):
            if part.get("type") == "tool":
                state = part.get("state") or {}
                return str(state.get("error") or state.get("output") or "")
    return ""


def _one(http: Any, sid: str, variant: str, n: int) -> dict[str, Any]:
    """One run, timed from the request to the completed answer; its file checked after."""
    _label, script, expected = VARIANTS[variant]
    body = {"messages": [{"role": "user", "content": script.format(n=n)}], "wait": True}
    busy = 0
    while True:
        started = time.perf_counter()
        response = http.post(f"/api/sessions/{sid}/runs/", json=body, timeout=700)
        wall = time.perf_counter() - started
        if response.status_code != 409 or busy >= 100:
            break
        busy += 1  # the previous run's end still holds the session: asked again, timed anew
        time.sleep(0.02)
    run = response.json()
    if response.status_code != 200 or run.get("status") != "completed":
        raise RuntimeError(f"run: {response.status_code} {response.text[:300]}")
    got = http.get(f"/api/sessions/{sid}/files/out.txt")
    written = got.status_code == 200 and got.text == expected.format(n=n)
    return {
        "wall_s": wall,
        "queued_s": _seconds(run, "created_at", "started_at"),
        "in_worker_s": _seconds(run, "started_at", "finished_at"),
        "busy_409": busy,
        "written": written,
        "error": "" if written else _tool_error(http, sid) or f"out.txt: {got.text[:100]!r}",
    }


def _summary(samples: list[dict[str, Any]]) -> dict[str, Any]:
    walls = [s["wall_s"] for s in samples]
    return {
        "runs": len(samples),
        "median_ms": 1000 * statistics.median(walls),
        "min_ms": 1000 * min(walls),
        "max_ms": 1000 * max(walls),
        "queued_median_ms": 1000 * statistics.median(s["queued_s"] for s in samples),
        "in_worker_median_ms": 1000 * statistics.median(s["in_worker_s"] for s in samples),
        "busy_409": sum(s["busy_409"] for s in samples),
        "samples_ms": [round(1000 * w, 1) for w in walls],
    }


def _variant(http: Any, sids: dict[str, str], variant: str, rounds: int) -> dict[str, Any]:
    """Warm-ups of each size, then ``rounds`` interleaved runs of each; their medians."""
    n = 0
    samples: dict[str, list[dict[str, Any]]] = {size: [] for size in sids}
    for _ in range(WARMUPS):
        for size, sid in sids.items():
            n += 1
            warm = _one(http, sid, variant, n)
            if not warm["written"]:
                return {"skipped": f"the run wrote no out.txt ({size}): {warm['error']}"}
    for _ in range(rounds):
        for size, sid in sids.items():
            n += 1
            sample = _one(http, sid, variant, n)
            if not sample["written"]:
                raise RuntimeError(f"{variant}, {size}: the run did not write: {sample['error']}")
            samples[size].append(sample)
    out = {size: _summary(samples[size]) for size in sids}
    out["ratio"] = ratio(out["large"]["median_ms"], out["small"]["median_ms"])
    out["met"] = out["ratio"] <= TARGET
    return out


def _shell_said(env: Env) -> dict[str, str]:
    """What this host offers the shell, as this process finds it (for the report)."""
    from django.conf import settings

    from workspace import layers, sandbox

    saved = settings.AGENT_ALLOW_SHELL
    settings.AGENT_ALLOW_SHELL = True
    try:
        reason = sandbox.unavailable_reason()
    finally:
        settings.AGENT_ALLOW_SHELL = saved
    bwrap = shutil.which("bwrap")
    overlay = settings.AGENT_SHELL_OVERLAY
    if overlay == "auto" and bwrap and not reason:
        why = layers.unavailable_reason(bwrap, env.workspace)
        overlay = "auto (each command in a layer)" if not why else f"auto, none here: {why}"
    return {"sandbox": reason or "bwrap available", "overlay": overlay}


def _uploads(env: Env, headers: dict[str, str], trees: dict, extra: dict) -> dict[str, Any]:
    """The two sessions, uploaded through a web process started with ``UPLOAD_ENV`` (then
    stopped): their ids and the seconds each upload took."""
    port = _start(env, {**extra, **UPLOAD_ENV})
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            done = {size: _upload(http, size, tree[0]) for size, tree in trees.items()}
    finally:
        env.stop_all()
    return {"ids": {k: v[0] for k, v in done.items()}, "s": {k: v[1] for k, v in done.items()}}


def _measured(
    env: Env, headers: dict[str, str], sids: dict, extra: dict, variant: str, rounds: int
):  # noqa: ANN202
    """One variant's runs through a web process and a worker started with ``extra``."""
    port = _start(env, extra)
    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", headers=headers) as http:
            if variant == "shell":
                tools = http.get("/api/tools/").json()["results"]
                shell = next((t for t in tools if t["name"] == "shell"), None)
                if shell is None or not shell["available"]:
                    why = shell["reason"] if shell else "no shell tool"
                    return {"skipped": f"the web process says: {why}"}
            return _variant(http, sids, variant, rounds)
    finally:
        env.stop_all()


def run(env: Env, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    user = User.objects.create_user(f"bench-whole-run-{time.monotonic_ns()}", password="x")
    headers = {"Authorization": f"Token {Token.objects.create(user=user).key}"}
    shapes = {"small": SMALL, "large": LARGE_QUICK if quick else LARGE}
    trees = {size: _tree_tar(shape) for size, shape in shapes.items()}
    limits = _limits(trees["large"][1], trees["large"][2])
    rounds = ROUNDS_QUICK if quick else ROUNDS
    result: dict[str, Any] = {
        "files": {size: tree[1] for size, tree in trees.items()},
        "dirs": {size: tree[2] for size, tree in trees.items()},
        "upload_bytes": {size: len(tree[0]) for size, tree in trees.items()},
        "limits_raised": limits,
        "upload_env": UPLOAD_ENV,
        "warmups": WARMUPS,
        "rounds": rounds,
    }
    uploaded = _uploads(env, headers, trees, limits)
    result["upload_s"] = uploaded["s"]
    result["write"] = _measured(env, headers, uploaded["ids"], limits, "write", rounds)
    result["shell_host"] = _shell_said(env)
    shell_env = {**limits, **SHELL_ENV}
    result["shell"] = _measured(env, headers, uploaded["ids"], shell_env, "shell", rounds)
    return result


def _rows(label: str, v: dict[str, Any], files: dict[str, int]) -> list[list[str]]:
    from .__main__ import _f

    rows = []
    for size in ("small", "large"):
        s = v[size]
        rows.append(
            [
                f"{label}, {files[size]:,} files",
                _f(s["median_ms"]),
                f"{_f(s['min_ms'])}–{_f(s['max_ms'])}",
                _f(s["queued_median_ms"]),
                _f(s["in_worker_median_ms"]),
                "",
            ]
        )
    met = "met" if v["met"] else "NOT MET"
    rows.append(
        [f"{label}: large / small (target ≤ {TARGET}x)", "", "", "", "", f"{_f(v['ratio'], 2)}x"]
    )
    rows[-1][-1] += f" {met}"
    return rows


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    rows: list[list[str]] = []
    skipped = []
    for variant in ("write", "shell"):
        label = VARIANTS[variant][0]
        v = r.get(variant) or {"skipped": "not measured"}
        if "skipped" in v:
            skipped.append(f"  {label}: not measured: {v['skipped']}")
            continue
        rows += _rows(label, v, r["files"])
    limits = (
        ", ".join(f"{k}={v}" for k, v in r["limits_raised"].items())
        if r["limits_raised"]
        else "none raised (REPO_MAX_FILES, WORKTREE_MAX_ENTRIES, WORKTREE_MAX_BYTES at their "
        "defaults allow it)"
    )
    shell = r.get("shell_host", {})
    note = (
        f"median of {r['rounds']} runs each, interleaved small/large, after {r['warmups']} "
        f"warm-up runs each; large: {r['files']['large']:,} files of 1 KB in "
        f"{r['dirs']['large']:,} directories, uploaded in "
        f"{_f(r.get('upload_s', {}).get('large', float('nan')), 1)} s (not timed; its web "
        f"process alone with {', '.join(f'{k}={v}' for k, v in r['upload_env'].items())}); "
        f"limits: {limits}; the runs' processes at the defaults otherwise; shell: "
        f"{shell.get('sandbox', '?')}, overlay {shell.get('overlay', '?')}"
    )
    table = _table(
        "A whole run writing one file: POST …/runs/ with wait -> completed answer (services "
        "mode: Daphne + Celery worker + PostgreSQL + Redis)",
        ["", "median ms", "min–max ms", "queued ms", "in worker ms", "ratio"],
        rows,
        note,
    )
    return "\n".join([table, *skipped])
