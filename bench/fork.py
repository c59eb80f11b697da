"""Session fork and checkpoint bytes, ours against agno's in the same script run.

Ours runs in this process against PostgreSQL (services settings); agno runs in its own venv
(``bench/peers/setup.sh``, ``bench/peers/agno_side.py``) as a child process of this run, on
the same machine and the same PostgreSQL server, and on SQLite.

* **fork**: a session of N runs (user, assistant with a tool call, tool result, assistant),
  N = 10, 100, 1,000. Time, statements and the forking process's peak Python memory
  (tracemalloc) of ``fork_session`` vs agno's ``Agent.fork_session``.
* **checkpoint bytes**: a run of 20 tool batches in a session with 0 and with 100 prior runs;
  bytes of bound parameters written per tool-batch checkpoint, ours vs agno
  ``checkpoint="tool-batch"``.
"""

from __future__ import annotations

import json
import statistics
import subprocess
import time
import tracemalloc
from contextlib import ExitStack
from pathlib import Path
from typing import Any
from unittest import mock

from .checkpoint import WRITES, param_bytes
from .env import statements_of_every_thread
from .stats import ratio

HERE = Path(__file__).resolve().parent
PEER_PY = HERE / ".peers-venv" / "bin" / "python"
BATCHES = 20


class Statements:
    def __init__(self) -> None:
        self.statements: list[dict[str, Any]] = []

    def __call__(self, execute, sql, params, many, context):  # noqa: ANN001, ANN204
        kind = sql.lstrip().split(None, 1)[0].upper()
        self.statements.append(
            {"kind": kind, "bytes": param_bytes(params) if kind in WRITES else 0}
        )
        return execute(sql, params, many, context)


def _ours_fork(user: Any, sizes: list[int], repeats: int) -> list[dict[str, Any]]:
    from django.db import connection

    from runs_app.models import Run
    from runs_app.services.fork import fork_session
    from runs_app.services.seed import seed_runs
    from sessions_app.models import Message, Part
    from sessions_app.services.sessions import create_session

    out = []
    for size in sizes:
        source = seed_runs(create_session(owner=user, title=f"fork {size}"), size)
        samples, peaks, counts, cold_ms = [], [], [], None
        for i in range(repeats + 1):
            rec = Statements()
            tracemalloc.start()
            with connection.execute_wrapper(rec):
                started = time.perf_counter()
                copy = fork_session(source=source, user=user)
                elapsed = (time.perf_counter() - started) * 1000.0
            _, peak = tracemalloc.get_traced_memory()
            tracemalloc.stop()
            assert Run.objects.filter(session=copy).count() == size
            assert Message.objects.filter(session=copy).count() == 3 * size
            assert Part.objects.filter(session=copy).count() == 7 * size
            if i == 0:
                cold_ms = elapsed  # right after the bulk insert: the planner's stale statistics
                continue
            samples.append(elapsed)
            peaks.append(peak / 2**20)
            counts.append(len(rec.statements))
        out.append(
            {
                "runs": size,
                "floor_ms": statistics.median(_floor(source.id) for _ in range(3)),
                "fork_ms": statistics.median(samples),
                "fork_ms_all": samples,
                "fork_ms_first": cold_ms,
                "peak_mib": max(peaks),
                "statements": max(counts),
                "statements_min": min(counts),
                "verified": True,
            }
        )
    return out


def _script(batches: int) -> str:
    lines = ["pace 0"]
    for i in range(batches):
        lines += [f"say batch {i}", f"write out/{i}.txt result {i}"]
    lines.append("say all done")
    return "\n".join(lines)


def _ours_checkpoint(user: Any, prior: int, batches: int) -> dict[str, Any]:
    from django.conf import settings

    from runs_app.checkpoint import Checkpointer
    from runs_app.execution.host import run_agent
    from runs_app.execution.loop import tool_calls
    from runs_app.models import Run
    from runs_app.services.runs import start_run
    from runs_app.services.seed import seed_runs
    from sessions_app.services.sessions import create_session

    session = create_session(owner=user, title=f"checkpoint {prior}")
    if prior:
        session = seed_runs(session, prior)
    per_checkpoint: list[dict[str, int]] = []
    state = {"after_tools": False}
    original_flush = Checkpointer.flush
    original_run_tool = tool_calls.run_tool

    def flush(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        if not state["after_tools"]:
            return original_flush(self, **kwargs)
        state["after_tools"] = False
        rec = Statements()
        with statements_of_every_thread(rec):
            result = original_flush(self, **kwargs)
        writes = [s for s in rec.statements if s["kind"] in WRITES]
        per_checkpoint.append({"bytes": sum(s["bytes"] for s in writes), "statements": len(writes)})
        return result

    async def run_tool(self, part):  # noqa: ANN001, ANN202
        result = await original_run_tool(self, part)
        state["after_tools"] = True
        return result

    run = start_run(
        session=session,
        user=user,
        messages=[{"role": "user", "content": _script(batches)}],
        checkpoint="tool-batch",
        defer_enqueue=True,
    )
    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(Checkpointer, "flush", flush))
        stack.enter_context(mock.patch.object(tool_calls, "run_tool", run_tool))
        stack.enter_context(mock.patch.object(settings, "RUN_ABORT_POLL_SECONDS", 3600))
        stack.enter_context(mock.patch.object(settings, "RUN_LEASE_SECONDS", 3600))
        run_agent(run.id)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, (run.status, run.error)
    assert len(per_checkpoint) == batches, per_checkpoint
    sizes = [c["bytes"] for c in per_checkpoint]
    return {
        "prior_runs": prior,
        "batches": batches,
        "checkpoints": per_checkpoint,
        "bytes_first": sizes[0],
        "bytes_last": sizes[-1],
        "bytes_mean": statistics.mean(sizes),
        "statements_mean": statistics.mean(c["statements"] for c in per_checkpoint),
    }


def _floor(source_id: str) -> float:
    """The physical floor of the copy: the same rows (every message, part and run of the
    session) copied as they are into fresh temporary tables with the same indexes: no id
    mapping, no foreign keys, no WAL (temporary tables are not logged)."""
    from django.db import connection, transaction

    tables = ("sessions_app_message", "sessions_app_part", "runs_app_run")
    with transaction.atomic(), connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"CREATE TEMP TABLE floor_{table} (LIKE {table} INCLUDING ALL)")
        started = time.perf_counter()
        for table in tables:
            cursor.execute(
                f"INSERT INTO floor_{table} SELECT * FROM {table} WHERE session_id = %s",
                [source_id],
            )
        elapsed = (time.perf_counter() - started) * 1000.0
        for table in tables:
            cursor.execute(f"DROP TABLE floor_{table}")
    return elapsed


def _peer(*args: str) -> dict[str, Any]:
    proc = subprocess.run(
        [str(PEER_PY), str(HERE / "peers" / "agno_side.py"), *args],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    if proc.returncode != 0:
        raise RuntimeError(f"agno side failed: {proc.stderr[-3000:]}")
    return json.loads(proc.stdout)


def run(env: Any, *, quick: bool) -> dict[str, Any]:
    from django.contrib.auth.models import User

    subprocess.run(["bash", str(HERE / "peers" / "setup.sh")], check=True)
    user, _ = User.objects.get_or_create(username="bench-fork")
    sizes = [10, 100] if quick else [10, 100, 1000]
    repeats = 3 if quick else 5
    pg = env.database_url.rsplit("/", 1)[0].replace("postgres://", "postgresql://")
    pg_url = f"{pg}/agno_bench"
    results: dict[str, Any] = {"sizes": sizes}
    results["ours"] = _ours_fork(user, sizes, repeats)
    joined = ",".join(map(str, sizes))
    reps = ["--repetitions", str(repeats)]
    results["agno_postgres"] = _peer(
        "fork", "--sizes", joined, *reps, "--store", "postgres", "--pg-url", pg_url
    )
    results["agno_sqlite"] = _peer("fork", "--sizes", joined, *reps, "--store", "sqlite")
    for store in ("agno_postgres", "agno_sqlite"):
        for mine, theirs in zip(results["ours"], results[store]["results"], strict=True):
            theirs["ratio_time"] = ratio(theirs["fork_ms"], mine["fork_ms"])
            theirs["ratio_peak"] = ratio(theirs["peak_mib"], mine["peak_mib"])
    theirs = results["agno_postgres"]["checkpoint"] = _peer(
        "checkpoint",
        "--prior",
        "100",
        "--batches",
        str(BATCHES),
        "--store",
        "postgres",
        "--pg-url",
        pg_url,
    )
    ours = [_ours_checkpoint(user, prior, BATCHES) for prior in (0, 100)]
    by_prior = {s["prior_runs"]: s for s in theirs["scenarios"]}
    for mine in ours:
        peer = by_prior[mine["prior_runs"]]
        mine["agno_bytes_first"] = peer["bytes_first"]
        mine["agno_bytes_last"] = peer["bytes_last"]
        mine["agno_bytes_mean"] = peer["bytes_mean"]
        mine["ratio_mean"] = ratio(peer["bytes_mean"], mine["bytes_mean"])
        mine["ratio_last"] = ratio(peer["bytes_last"], mine["bytes_last"])
    results["checkpoint"] = ours
    return results


def report(r: dict[str, Any]) -> str:
    from .__main__ import _f, _table

    pg, lite = r["agno_postgres"]["results"], r["agno_sqlite"]["results"]
    rows = []
    for mine, a_pg, a_lite in zip(r["ours"], pg, lite, strict=True):
        rows.append(
            [
                f"{mine['runs']:,} runs",
                f"{_f(mine['fork_ms'])} (first {_f(mine['fork_ms_first'])})",
                _f(mine["floor_ms"]),
                _f(a_pg["fork_ms"]),
                _f(a_lite["fork_ms"]),
                f"{_f(a_pg['ratio_time'])}x / {_f(a_lite['ratio_time'])}x",
                f"{mine['statements']} / {a_pg['statements']}",
                f"{_f(mine['peak_mib'], 2)} / {_f(a_pg['peak_mib'], 1)}",
            ]
        )
    t1 = _table(
        "Session fork: ours (PostgreSQL) vs agno 3.1.10 fork_session (PostgreSQL / SQLite), "
        "same machine, same run",
        [
            "",
            "ours ms",
            "floor ms",
            "agno PG ms",
            "agno SQLite ms",
            "agno/ours PG / SQLite",
            "statements ours / agno",
            "peak MiB ours / agno",
        ],
        rows,
        "floor: the session's rows copied as they are into unlogged temp tables with the same "
        "indexes (no id mapping, no foreign keys, no WAL); peak: tracemalloc of the forking "
        "process",
    )
    rows = [
        [
            f"{c['prior_runs']} prior runs",
            f"{_f(c['bytes_first'], 0)} / {_f(c['bytes_last'], 0)} / {_f(c['bytes_mean'], 0)}",
            f"{_f(c['agno_bytes_first'], 0)} / {_f(c['agno_bytes_last'], 0)} / "
            f"{_f(c['agno_bytes_mean'], 0)}",
            f"{_f(c['ratio_mean'])}x / {_f(c['ratio_last'])}x",
            _f(c["statements_mean"]),
        ]
        for c in r["checkpoint"]
    ]
    t2 = _table(
        f"Checkpoint bytes per tool batch, a run of {BATCHES} batches: ours tool-batch vs agno "
        "checkpoint='tool-batch' (PostgreSQL)",
        [
            "",
            "ours first / last / mean B",
            "agno first / last / mean B",
            "agno/ours mean / last",
            "ours statements",
        ],
        rows,
        "bytes of bound parameters of INSERT/UPDATE statements per checkpoint",
    )
    return t1 + "\n\n" + t2
