"""Checkpoint cost and history load, in-process against PostgreSQL (services settings).

A session is built with N prior messages directly through the ORM (bulk), then a scripted run
with one tool batch is executed in this process (``start_run(defer_enqueue=True)`` then
``runs_app.execution.host.run_agent``), with an execute wrapper on every thread's connection
(the run host's database threads run the statements) counting every statement: its kind, and for
INSERT/UPDATE/DELETE the bytes of its bound parameters.
Statements are attributed to what was running: the tool-batch checkpoint (the flush that ends a
step that ran tools), any other flush, a step, the history load.
"""

from __future__ import annotations

import json
import statistics
import time
from contextlib import ExitStack
from datetime import timedelta
from typing import Any
from unittest import mock

from .env import statements_of_every_thread
from .stats import ratio

WRITES = {"INSERT", "UPDATE", "DELETE"}
SCRIPT = "pace 0\nsay working on it\nwrite a.txt hello {i}\nappend b.txt more {i}\nsay ok"


def param_bytes(value: Any) -> int:
    if value is None:
        return 0
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if type(value).__name__ in {"Jsonb", "Json"}:  # psycopg's JSON wrappers
        return len(json.dumps(value.obj, default=str).encode())
    if isinstance(value, list | tuple):
        return sum(param_bytes(v) for v in value)
    if isinstance(value, dict):
        return len(json.dumps(value, default=str).encode())
    return len(str(value).encode())


class Recorder:
    """The execute wrapper: every statement with the labels active when it ran."""

    def __init__(self) -> None:
        self.labels: list[str] = []
        self.statements: list[dict[str, Any]] = []

    def __call__(self, execute, sql, params, many, context):  # noqa: ANN001, ANN204
        kind = sql.lstrip().split(None, 1)[0].upper()
        rows = execute(sql, params, many, context)
        self.statements.append(
            {
                "kind": kind,
                "labels": tuple(self.labels),
                "bytes": param_bytes(params) if kind in WRITES else 0,
                "sql_bytes": len(sql.encode()),
            }
        )
        return rows

    def labelled_async(self, label: str, fn):  # noqa: ANN001, ANN201
        recorder = self

        async def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            recorder.labels.append(label)
            try:
                return await fn(*args, **kwargs)
            finally:
                recorder.labels.pop()

        return wrapper

    def labelled(self, label: str, fn):  # noqa: ANN001, ANN201
        recorder = self

        def wrapper(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
            recorder.labels.append(label)
            try:
                return fn(*args, **kwargs)
            finally:
                recorder.labels.pop()

        return wrapper

    def select(self, label: str) -> list[dict[str, Any]]:
        return [s for s in self.statements if label in s["labels"]]


def build_session(user: Any, prior: int) -> Any:
    """A session whose active path holds ``prior`` messages (user/assistant turns; each
    assistant message with step-start, text, a completed tool call and step-finish)."""
    from django.utils import timezone

    from core import ids
    from sessions_app.models import Message, Part, Session
    from sessions_app.services.sessions import create_session

    session = create_session(owner=user, title=f"history {prior}")
    base = timezone.now() - timedelta(days=1)
    messages, parts = [], []
    parent = None
    for i in range(prior):
        mid = ids.message_id()
        role = Message.Role.USER if i % 2 == 0 else Message.Role.ASSISTANT
        created = base + timedelta(milliseconds=i)
        messages.append(
            Message(
                id=mid,
                session_id=session.id,
                parent_id=parent,
                role=role,
                created_at=created,
                completed_at=created,
                model="" if role == Message.Role.USER else "scripted",
            )
        )
        parent = mid
        if role == Message.Role.USER:
            parts.append(
                Part(
                    message_id=mid,
                    session_id=session.id,
                    order=0,
                    type="text",
                    text=f"please do step {i} of the plan",
                )
            )
            continue
        call = f"call_hist_{i}"
        parts += [
            Part(
                message_id=mid,
                session_id=session.id,
                order=0,
                type="step-start",
                data={"snapshot": "0" * 40, "step": 0},
            ),
            Part(
                message_id=mid,
                session_id=session.id,
                order=1,
                type="text",
                text=f"Here is the result of step {i}: " + "lorem ipsum " * 8,
            ),
            Part(
                message_id=mid,
                session_id=session.id,
                order=2,
                type="tool",
                call_id=call,
                tool="read",
                state={
                    "status": "completed",
                    "input": {"path": "a.txt"},
                    "output": "hello " * 10,
                    "error": None,
                    "metadata": {},
                    "time": {"start": 0, "end": 0},
                },
            ),
            Part(
                message_id=mid,
                session_id=session.id,
                order=3,
                type="step-finish",
                data={"snapshot": "0" * 40, "step": 0},
            ),
        ]
    Message.objects.bulk_create(messages, batch_size=1000)
    Part.objects.bulk_create(parts, batch_size=1000)
    Session.objects.filter(id=session.id).update(head_id=parent)
    session.refresh_from_db()
    return session


def measure_run(session: Any, user: Any, index: int) -> dict[str, Any]:
    from django.conf import settings

    from runs_app.checkpoint import Checkpointer
    from runs_app.execution.host import run_agent
    from runs_app.execution.loop import start as loop_start
    from runs_app.execution.loop import steps as loop_steps
    from runs_app.execution.loop import tool_calls
    from runs_app.models import Run
    from runs_app.services.runs import start_run

    rec = Recorder()
    after_tools = {"flag": False}
    original_flush = Checkpointer.flush
    original_run_tool = tool_calls.run_tool

    def flush(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        label = "tool-batch" if after_tools["flag"] else "flush"
        after_tools["flag"] = False
        return rec.labelled(label, original_flush)(self, **kwargs)

    async def run_tool(self, part):  # noqa: ANN001, ANN202
        result = await original_run_tool(self, part)
        after_tools["flag"] = True
        return result

    steps = {"n": 0}
    original_step = loop_steps.step

    async def step(self, index):  # noqa: ANN001, ANN202
        steps["n"] += 1
        return await rec.labelled_async("step", original_step)(self, index)

    run = start_run(
        session=session,
        user=user,
        messages=[{"role": "user", "content": SCRIPT.format(i=index)}],
        defer_enqueue=True,
    )
    history_seconds: list[float] = []
    original_active_path = loop_start.active_path

    def active_path(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        start = time.perf_counter()
        try:
            return rec.labelled("history", original_active_path)(*args, **kwargs)
        finally:
            history_seconds.append(time.perf_counter() - start)

    with ExitStack() as stack:
        stack.enter_context(mock.patch.object(Checkpointer, "flush", flush))
        stack.enter_context(mock.patch.object(tool_calls, "run_tool", run_tool))
        stack.enter_context(mock.patch.object(loop_steps, "step", step))
        stack.enter_context(mock.patch.object(loop_start, "active_path", active_path))
        stack.enter_context(statements_of_every_thread(rec))
        # The host's keeper (lease renewals, abort polls) stays out of the counts.
        stack.enter_context(mock.patch.object(settings, "RUN_ABORT_POLL_SECONDS", 3600))
        stack.enter_context(mock.patch.object(settings, "RUN_LEASE_SECONDS", 3600))
        started = time.perf_counter()
        run_agent(run.id)
        elapsed = time.perf_counter() - started
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, (run.status, run.error)
    tool_batch = rec.select("tool-batch")
    writes = [s for s in rec.statements if s["kind"] in WRITES]
    step_statements = rec.select("step")
    return {
        "tool_batch_statements": len(tool_batch),
        "tool_batch_write_statements": sum(1 for s in tool_batch if s["kind"] in WRITES),
        "tool_batch_bytes": sum(s["bytes"] for s in tool_batch),
        "tool_batch_checkpoints": 1 if tool_batch else 0,
        "run_write_statements": len(writes),
        "run_write_bytes": sum(s["bytes"] for s in writes),
        "run_statements": len(rec.statements),
        "steps": steps["n"],
        "queries_per_step": len(step_statements) / max(1, steps["n"]),
        "history_queries": len(rec.select("history")),
        "history_ms": sum(history_seconds) * 1000.0,
        "run_ms": elapsed * 1000.0,
    }


def run(env: Any, *, quick: bool, sizes: tuple[int, int] = (10, 2000)) -> dict[str, Any]:
    from django.contrib.auth.models import User
    from django.db import close_old_connections, connection

    from realtime import events

    user, _ = User.objects.get_or_create(username="bench-checkpoint")
    repeats = 3 if quick else 5
    results: dict[str, Any] = {}
    for prior in sizes:
        session = build_session(user, prior)
        # The first run meets the planner statistics of before the bulk insert (as a table
        # that just grew does until autovacuum analyzes it); then ANALYZE, then the samples.
        cold = measure_run(session, user, 0)
        with connection.cursor() as cursor:
            cursor.execute("ANALYZE sessions_app_message; ANALYZE sessions_app_part")
        samples = [measure_run(session, user, i) for i in range(1, repeats + 1)]
        keys = samples[0].keys()
        results[str(prior)] = {k: statistics.median(s[k] for s in samples) for k in keys}
        results[str(prior)]["samples"] = len(samples)
        results[str(prior)]["history_ms_stale_stats"] = cold["history_ms"]
    events.publisher.flush(5)
    close_old_connections()
    small, large = (results[str(s)] for s in sizes)
    results["ratio_bytes"] = ratio(large["tool_batch_bytes"], small["tool_batch_bytes"])
    results["ratio_statements"] = ratio(
        large["tool_batch_write_statements"], small["tool_batch_write_statements"]
    )
    results["ratio_queries_per_step"] = ratio(large["queries_per_step"], small["queries_per_step"])
    results["ratio_history_queries"] = ratio(large["history_queries"], small["history_queries"])
    results["ratio_history_ms"] = ratio(large["history_ms"], small["history_ms"])
    results["ratio_history_ms_stale_stats"] = ratio(
        large["history_ms_stale_stats"], small["history_ms_stale_stats"]
    )
    results["sizes"] = list(sizes)
    return results
