"""Peer side of the fork/checkpoint benchmark: agno doing its own persistence.

Run with the venv that ``bench/peers/setup.sh`` makes::

    bench/.peers-venv/bin/python bench/peers/agno_side.py fork --sizes 10,100,1000 --store sqlite
    bench/.peers-venv/bin/python bench/peers/agno_side.py checkpoint --prior 100 --batches 20 \
        --store postgres

Prints one JSON object on stdout; everything else (agno's own output included) goes to stderr.
No model or network call is made: history is built from agno's own classes (``RunOutput``,
``Message``, ``ToolExecution``) and written through its db API, the fork is ``Agent.fork_session``
and the checkpointed run is a real ``Agent.run`` with ``checkpoint="tool-batch"`` driven by a
scripted ``Model`` subclass and a local tool. Every statement agno sends is seen through the
SQLAlchemy ``before_cursor_execute`` event on the engine agno's db adapter owns.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import tracemalloc
import uuid
from collections import Counter
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from importlib.metadata import version
from typing import Any, Protocol

import sqlalchemy
from agno.agent import Agent
from agno.db.base import BaseDb, SessionType
from agno.db.postgres import PostgresDb
from agno.db.sqlite import SqliteDb
from agno.metrics import MessageMetrics, RunMetrics, ToolCallMetrics
from agno.models.base import Model
from agno.models.message import Message
from agno.models.response import ModelResponse, ToolExecution
from agno.run.agent import RunInput, RunOutput
from agno.run.base import RunStatus
from agno.session import AgentSession
from sqlalchemy import event, text
from sqlalchemy.engine import Engine, make_url

MIB = 1024 * 1024
DEFAULT_PG_URL = "postgresql://postgres@127.0.0.1:5432/agno_bench"
AGENT_ID = "bench-agent"
AGENT_NAME = "Bench Agent"
USER_ID = "bench-user"
TOOL_NAME = "lookup_order"
WRITES = frozenset({"INSERT", "UPDATE", "DELETE"})
_TARGET = re.compile(r"^\s*(?:INSERT\s+INTO|UPDATE|DELETE\s+FROM)\s+([\w.\"]+)", re.IGNORECASE)


def log(message: str) -> None:
    print(message, file=sys.stderr, flush=True)


# --------------------------------------------------------------------------------------------
# Content: one turn = user message, assistant tool call, tool result, final answer (~100 chars)
# --------------------------------------------------------------------------------------------


def order_id(i: int) -> str:
    return f"ORD-{100000 + i}"


def user_text(i: int) -> str:
    return (
        f"Hi, could you check the status of order {order_id(i)} "
        "and tell me when it should reach my flat?"
    )


def call_text(i: int) -> str:
    return (
        f"Sure. I'm looking up order {order_id(i)} "
        "in the order system to get its latest shipping status."
    )


def tool_args(i: int) -> dict[str, Any]:
    return {"order_id": order_id(i), "include_items": True, "region": "eu-west-1"}


def tool_result(order: str) -> str:
    digits = order.removeprefix("ORD-")
    return (
        f"order={order} status=shipped carrier=DHL tracking=JD014600{digits} "
        "eta=2025-03-14 items=3 wh=AMS-2"
    )


def final_text(i: int) -> str:
    return (
        f"Order {order_id(i)} has shipped with DHL (tracking JD014600{100000 + i}) "
        "and should arrive 14 March."
    )


def tool_call(i: int) -> dict[str, Any]:
    return {
        "id": f"call_{uuid.uuid4().hex[:24]}",
        "type": "function",
        "function": {"name": TOOL_NAME, "arguments": json.dumps(tool_args(i))},
    }


def usage(input_tokens: int, output_tokens: int) -> MessageMetrics:
    return MessageMetrics(
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        total_tokens=input_tokens + output_tokens,
    )


def make_run(i: int, session_id: str, created_at: int) -> RunOutput:
    """A completed turn as ``Agent.run`` stores it, built from agno's own classes."""
    call = tool_call(i)
    args = tool_args(i)
    result = tool_result(order_id(i))
    now = float(created_at)
    messages = [
        Message(role="user", content=user_text(i), created_at=created_at),
        Message(
            role="assistant",
            content=call_text(i),
            tool_calls=[call],
            metrics=usage(180, 40),
            created_at=created_at,
        ),
        Message(
            role="tool",
            content=result,
            tool_call_id=call["id"],
            tool_name=TOOL_NAME,
            tool_args=args,
            tool_call_error=False,
            created_at=created_at,
        ),
        Message(
            role="assistant", content=final_text(i), metrics=usage(260, 30), created_at=created_at
        ),
    ]
    tool = ToolExecution(
        tool_call_id=call["id"],
        tool_name=TOOL_NAME,
        tool_args=args,
        tool_call_error=False,
        result=result,
        metrics=ToolCallMetrics(start_time=now, end_time=now + 0.012, duration=0.012),
        created_at=created_at,
    )
    return RunOutput(
        run_id=str(uuid.uuid4()),
        agent_id=AGENT_ID,
        agent_name=AGENT_NAME,
        session_id=session_id,
        user_id=USER_ID,
        input=RunInput(input_content=user_text(i)),
        content=final_text(i),
        model=ScriptedModel.id,
        model_provider=ScriptedModel.provider,
        messages=messages,
        tools=[tool],
        metrics=RunMetrics(input_tokens=440, output_tokens=70, total_tokens=510, duration=1.4),
        status=RunStatus.completed,
        created_at=created_at,
    )


def seed_session(db: BaseDb, session_id: str, runs: int) -> list[str]:
    """Write a session with ``runs`` completed turns through agno's db API; returns the run ids."""
    now = int(time.time()) - runs
    session = AgentSession(
        session_id=session_id,
        agent_id=AGENT_ID,
        user_id=USER_ID,
        session_data={"session_state": {}, "session_name": "Order status questions"},
        agent_data={"name": AGENT_NAME, "agent_id": AGENT_ID, "model": ScriptedModel().to_dict()},
        created_at=now,
        updated_at=now,
    )
    db.upsert_session(session)
    run_ids = []
    for index in range(runs):
        run = make_run(index, session_id, now + index)
        db.upsert_run(run, session_id=session_id, user_id=USER_ID, run_index=index)
        run_ids.append(run.run_id)
    return run_ids


# --------------------------------------------------------------------------------------------
# The scripted model: N tool-call turns, then a final answer; no provider, no network
# --------------------------------------------------------------------------------------------


class Script:
    """Shared state of a scripted run; survives agno deep-copying the model or the agent."""

    def __init__(
        self, batches: int, on_model: Callable[[int], None], on_tool: Callable[[int], None]
    ) -> None:
        self.batches = batches
        self.on_model = on_model
        self.on_tool = on_tool
        self.model_calls = 0
        self.tool_calls = 0

    def __deepcopy__(self, memo: dict[int, Any]) -> Script:
        return self


def _noop(_: int) -> None:
    return None


@dataclass
class ScriptedModel(Model):
    id: str = "scripted-model"
    name: str = "ScriptedModel"
    provider: str = "scripted"
    script: Script = field(default_factory=lambda: Script(0, _noop, _noop))

    def invoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        script = self.script
        script.model_calls += 1
        k = script.model_calls
        script.on_model(k)
        if k <= script.batches:
            return ModelResponse(
                role="assistant",
                content=call_text(k),
                tool_calls=[tool_call(k)],
                response_usage=usage(180, 40),
            )
        return ModelResponse(role="assistant", content=final_text(k), response_usage=usage(260, 30))

    async def ainvoke(self, *args: Any, **kwargs: Any) -> ModelResponse:
        return self.invoke(*args, **kwargs)

    def invoke_stream(self, *args: Any, **kwargs: Any) -> Iterator[ModelResponse]:
        yield self.invoke(*args, **kwargs)

    async def ainvoke_stream(
        self, *args: Any, **kwargs: Any
    ) -> Any:  # AsyncIterator[ModelResponse]
        yield self.invoke(*args, **kwargs)

    def _parse_provider_response(self, response: Any, **kwargs: Any) -> ModelResponse:
        return response

    def _parse_provider_response_delta(self, response: Any) -> ModelResponse:
        return response


def make_tool(script: Script) -> Callable[..., str]:
    def lookup_order(order_id: str, include_items: bool = True, region: str = "eu-west-1") -> str:
        """Look up an order's shipping status in the order system.

        Args:
            order_id: The order id, e.g. ORD-100001.
            include_items: Whether to include the item count.
            region: The order system region.
        """
        script.tool_calls += 1
        script.on_tool(script.tool_calls)
        return tool_result(order_id)

    return lookup_order


def make_agent(db: BaseDb, script: Script | None = None, **options: Any) -> Agent:
    script = script or Script(0, _noop, _noop)
    return Agent(
        id=AGENT_ID,
        name=AGENT_NAME,
        model=ScriptedModel(script=script),
        tools=[make_tool(script)],
        db=db,
        telemetry=False,
        **options,
    )


# --------------------------------------------------------------------------------------------
# SQL recording on agno's engine
# --------------------------------------------------------------------------------------------


def param_bytes(value: Any) -> int:
    """Bound-parameter size, same convention as bench/checkpoint.py (text length in UTF-8)."""
    if value is None:
        return 0
    if isinstance(value, bytes | bytearray | memoryview):
        return len(value)
    if type(value).__name__ in {"Jsonb", "Json"}:  # psycopg 3's JSON wrappers
        dumps = getattr(value, "dumps", None) or json.dumps
        dumped = dumps(value.obj)
        return len(dumped) if isinstance(dumped, bytes | bytearray) else len(dumped.encode())
    if isinstance(value, list | tuple):
        return sum(param_bytes(v) for v in value)
    if isinstance(value, dict):
        return len(json.dumps(value, default=str).encode())
    return len(str(value).encode())


def parameters_bytes(parameters: Any) -> int:
    """All bound values of one execute (a tuple for pysqlite, a name -> value dict for psycopg,
    a list of either for executemany)."""
    if isinstance(parameters, dict):
        return sum(param_bytes(v) for v in parameters.values())
    if isinstance(parameters, list):
        return sum(parameters_bytes(p) for p in parameters)
    return param_bytes(parameters)


@dataclass
class Statement:
    phase: str
    kind: str
    target: str | None
    bytes: int


class SqlRecorder:
    """Counts statements, transactions and pool checkouts on one engine, labelled by phase."""

    def __init__(self, engine: Engine, session_table: str, runs_table: str) -> None:
        self.engine = engine
        self.session_table = session_table
        self.runs_table = runs_table
        self.phase = "setup"
        self.enabled = True
        self.measure_bytes = False
        self.statements: list[Statement] = []
        self.commits: Counter[str] = Counter()
        self.checkouts: Counter[str] = Counter()
        event.listen(engine, "before_cursor_execute", self._on_execute)
        event.listen(engine, "commit", self._on_commit)
        event.listen(engine, "checkout", self._on_checkout)

    def _table_kind(self, target: str | None) -> str | None:
        if target is None:
            return None
        name = target.replace('"', "").rsplit(".", 1)[-1]
        if name == self.runs_table:
            return "run"
        if name == self.session_table:
            return "session"
        return name

    def _on_execute(
        self, conn: Any, cursor: Any, statement: str, parameters: Any, context: Any, many: bool
    ) -> None:
        if not self.enabled:
            return
        kind = statement.lstrip().split(None, 1)[0].upper()
        target = None
        size = 0
        if kind in WRITES:
            match = _TARGET.match(statement)
            target = self._table_kind(match.group(1) if match else None)
            if self.measure_bytes and kind != "DELETE":
                size = parameters_bytes(parameters)
        self.statements.append(Statement(self.phase, kind, target, size))

    def _on_commit(self, conn: Any) -> None:
        if self.enabled:
            self.commits[self.phase] += 1

    def _on_checkout(self, dbapi_connection: Any, record: Any, proxy: Any) -> None:
        if self.enabled:
            self.checkouts[self.phase] += 1

    def take(self, phase: str) -> list[Statement]:
        """The statements of ``phase``, removed from the log."""
        taken = [s for s in self.statements if s.phase == phase]
        self.statements = [s for s in self.statements if s.phase != phase]
        return taken

    def close(self) -> None:
        event.remove(self.engine, "before_cursor_execute", self._on_execute)
        event.remove(self.engine, "commit", self._on_commit)
        event.remove(self.engine, "checkout", self._on_checkout)


def summarize(statements: list[Statement]) -> dict[str, Any]:
    writes = [s for s in statements if s.kind in {"INSERT", "UPDATE"}]
    by_target: Counter[str] = Counter()
    for s in writes:
        by_target[s.target or "?"] += s.bytes
    return {
        "statements": len(statements),
        "by_kind": dict(Counter(s.kind for s in statements)),
        "bytes": sum(s.bytes for s in writes),
        "bytes_by_table": dict(by_target),
        "writes_by_table": dict(Counter(s.target or "?" for s in writes)),
    }


# --------------------------------------------------------------------------------------------
# Stores
# --------------------------------------------------------------------------------------------


class Store(Protocol):
    name: str
    driver: str

    def open(self, label: str) -> BaseDb: ...

    def locate(self, db: BaseDb) -> str: ...

    def runs_bytes(self, db: BaseDb, session_id: str) -> dict[str, int]: ...

    def close(self) -> None: ...


class SqliteStore:
    name = "sqlite"
    driver = "pysqlite"

    def __init__(self) -> None:
        self.dir = tempfile.mkdtemp(prefix="agno-bench-")
        self.dbs: list[SqliteDb] = []

    def open(self, label: str) -> BaseDb:
        db = SqliteDb(db_file=os.path.join(self.dir, f"{label}.db"))
        self.dbs.append(db)
        return db

    def locate(self, db: BaseDb) -> str:
        assert isinstance(db, SqliteDb) and db.db_file is not None
        return db.db_file

    def runs_bytes(self, db: BaseDb, session_id: str) -> dict[str, int]:
        sql = text(
            "SELECT count(*), coalesce(sum(length(CAST(run_data AS BLOB))), 0) "
            f'FROM "{db.runs_table_name}" WHERE session_id = :sid'
        )
        with db.db_engine.connect() as conn:  # type: ignore[attr-defined]
            rows, size = conn.execute(sql, {"sid": session_id}).one()
        return {
            "session_run_rows": rows,
            "session_runs_bytes": size,
            "session_runs_bytes_on_disk": size,
        }

    def close(self) -> None:
        for db in self.dbs:
            db.db_engine.dispose()
        shutil.rmtree(self.dir, ignore_errors=True)


class PostgresStore:
    name = "postgres"
    driver = "psycopg"

    def __init__(self, url: str) -> None:
        self.url = url
        self.token = uuid.uuid4().hex[:8]
        self.dbs: list[PostgresDb] = []
        self._ensure_database()

    def _ensure_database(self) -> None:
        import psycopg
        from psycopg import sql

        target = make_url(self.url)
        admin = target.set(drivername="postgresql", database="postgres")
        with psycopg.connect(admin.render_as_string(hide_password=False), autocommit=True) as conn:
            exists = conn.execute(
                "SELECT 1 FROM pg_database WHERE datname = %s", (target.database,)
            ).fetchone()
            if exists is None:
                log(f"creating database {target.database}")
                conn.execute(
                    sql.SQL("CREATE DATABASE {}").format(sql.Identifier(str(target.database)))
                )

    def open(self, label: str) -> BaseDb:
        db = PostgresDb(db_url=self.url, db_schema=f"bench_{label}_{self.token}")
        self.dbs.append(db)
        return db

    def locate(self, db: BaseDb) -> str:
        assert isinstance(db, PostgresDb)
        return db.db_schema

    def runs_bytes(self, db: BaseDb, session_id: str) -> dict[str, int]:
        pg = db if isinstance(db, PostgresDb) else None
        assert pg is not None
        sql = text(
            "SELECT count(*), coalesce(sum(octet_length(run_data::text)), 0), "
            "coalesce(sum(pg_column_size(run_data)), 0) "
            f'FROM "{pg.db_schema}"."{pg.runs_table_name}" WHERE session_id = :sid'
        )
        with pg.db_engine.connect() as conn:
            rows, size, disk = conn.execute(sql, {"sid": session_id}).one()
        return {
            "session_run_rows": rows,
            "session_runs_bytes": size,
            "session_runs_bytes_on_disk": disk,
        }

    def close(self) -> None:
        for db in self.dbs:
            try:
                with db.db_engine.begin() as conn:
                    conn.execute(text(f'DROP SCHEMA IF EXISTS "{db.db_schema}" CASCADE'))
            finally:
                db.db_engine.dispose()


def open_store(args: argparse.Namespace) -> Store:
    if args.store == "sqlite":
        return SqliteStore()
    return PostgresStore(args.pg_url)


def attach_db(store: str, locator: str, pg_url: str) -> BaseDb:
    """Reopen a db another process made (``Store.locate``), without owning its cleanup."""
    if store == "sqlite":
        return SqliteDb(db_file=locator)
    return PostgresDb(db_url=pg_url, db_schema=locator)


# --------------------------------------------------------------------------------------------
# Memory
# --------------------------------------------------------------------------------------------


def rss_bytes() -> int | None:
    try:
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")
    except OSError:
        return None


class RssSampler:
    """RSS high-water over a block, from /proc/self/statm sampled in a thread (not ru_maxrss)."""

    def __init__(self, interval: float = 0.0002) -> None:
        self.interval = interval
        self.base = rss_bytes() or 0
        self.peak = self.base
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        while not self._stop.is_set():
            self.peak = max(self.peak, rss_bytes() or 0)
            self._stop.wait(self.interval)

    def __enter__(self) -> RssSampler:
        self._switch = sys.getswitchinterval()
        sys.setswitchinterval(self.interval)
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.peak = max(self.peak, rss_bytes() or 0)
        self._stop.set()
        self._thread.join()
        sys.setswitchinterval(self._switch)

    @property
    def delta_mib(self) -> float:
        return (self.peak - self.base) / MIB


# --------------------------------------------------------------------------------------------
# fork
# --------------------------------------------------------------------------------------------


def verify_fork(
    db: BaseDb, source_id: str, source_run_ids: list[str], new_id: str
) -> tuple[bool, dict[str, Any]]:
    new = db.get_session(session_id=new_id, session_type=SessionType.AGENT)
    source = db.get_session(session_id=source_id, session_type=SessionType.AGENT)
    if not isinstance(new, AgentSession) or not isinstance(source, AgentSession):
        return False, {"error": "session missing"}
    new_runs = [r for r in new.runs or [] if isinstance(r, RunOutput)]
    source_runs = [r for r in source.runs or [] if isinstance(r, RunOutput)]
    new_run_ids = [r.run_id for r in new_runs]
    checks = {
        "new_session_id": new_id != source_id,
        "run_count": len(new_runs) == len(source_run_ids),
        "source_untouched": [r.run_id for r in source_runs] == source_run_ids,
        "fresh_run_ids": not set(new_run_ids) & set(source_run_ids),
        "runs_point_at_new_session": all(r.session_id == new_id for r in new_runs),
        "order_and_content_kept": [[m.content for m in r.messages or []] for r in new_runs]
        == [[m.content for m in r.messages or []] for r in source_runs],
        "session_forked_from": (new.session_data or {}).get("forked_from_session_id") == source_id,
        "runs_forked_from": all(r.forked_from_session_id == source_id for r in new_runs),
    }
    sample = new_runs[0] if new_runs else None
    lineage = {
        "session_data.forked_from_session_id": (new.session_data or {}).get(
            "forked_from_session_id"
        ),
        "run.forked_from_session_id": sample.forked_from_session_id if sample else None,
        "run.forked_from_run_id": sample.forked_from_run_id if sample else None,
        "run.status": sample.status.value if sample else None,
    }
    failed = [name for name, ok in checks.items() if not ok]
    return not failed, {"lineage": lineage, "failed_checks": failed}


def fork_size(store: Store, runs: int, repetitions: int, warmup: int) -> dict[str, Any]:
    """Fork a session of ``runs`` runs repeatedly; cold and warm repetitions alternate.

    cold: agno's per-adapter run-object cache is emptied for the source session first, as for a
    session this process has not read yet (another worker, a restart). warm: the cache still
    holds the source's run objects from the previous fork's read (a long-lived process).
    """
    db = store.open(f"fork_{runs}")
    recorder = SqlRecorder(db.db_engine, db.session_table_name, db.runs_table_name)  # type: ignore[attr-defined]
    source_id = f"fork-source-{runs}"
    log(f"[{store.name}] seeding a session with {runs} runs")
    source_run_ids = seed_session(db, source_id, runs)
    agent = make_agent(db)
    run_cache = db._run_object_cache  # type: ignore[attr-defined]
    forks: list[str] = []

    def fork(phase: str, mode: str) -> float:
        if mode == "cold":
            run_cache.drop_session(source_id)
        gc.collect()
        recorder.phase = phase
        start = time.perf_counter()
        forks.append(agent.fork_session(source_session_id=source_id, user_id=USER_ID))
        elapsed = time.perf_counter() - start
        recorder.phase = "idle"
        return elapsed * 1000

    recorder.measure_bytes = True
    for i in range(warmup):
        fork(f"warmup:{i}", "cold")
    recorder.measure_bytes = False
    written = summarize(recorder.take("warmup:0")) if warmup else {}

    modes = ("cold", "warm")
    times: dict[str, list[float]] = {mode: [] for mode in modes}
    for i in range(repetitions):
        for mode in modes:
            times[mode].append(fork(f"{mode}:rep:{i}", mode))

    counts = {mode: summarize(recorder.take(f"{mode}:rep:0")) for mode in modes}
    recorder.statements.clear()
    recorder.enabled = False  # the memory forks measure agno alone

    measured: dict[str, dict[str, Any]] = {}
    for mode in modes:
        if mode == "cold":
            run_cache.drop_session(source_id)
        gc.collect()
        tracemalloc.start()
        base, _ = tracemalloc.get_traced_memory()
        tracemalloc.reset_peak()
        forks.append(agent.fork_session(source_session_id=source_id, user_id=USER_ID))
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()

        measured[mode] = {
            "fork_ms": round(statistics.median(times[mode]), 3),
            "fork_ms_all": [round(t, 3) for t in times[mode]],
            "peak_mib": round((peak - base) / MIB, 3),
            "statements": counts[mode]["statements"],
            "statements_by_kind": counts[mode]["by_kind"],
            "transactions": recorder.commits[f"{mode}:rep:0"],
            "connection_checkouts": recorder.checkouts[f"{mode}:rep:0"],
        }
    recorder.close()

    probe = rss_in_child(store, db, source_id)
    forks.append(probe.pop("new_session_id"))
    measured["cold"]["rss_peak_mib"] = probe["rss_peak_mib"]
    measured["cold"]["rss_base_mib"] = probe["rss_base_mib"]

    checks = [verify_fork(db, source_id, source_run_ids, new_id) for new_id in forks]
    result: dict[str, Any] = {
        "runs": runs,
        **store.runs_bytes(db, source_id),
        **measured["cold"],
        "bytes_written": written.get("bytes"),
        "bytes_written_by_table": written.get("bytes_by_table"),
        "warm": measured["warm"],
        "forks_made": len(forks),
        "verified": all(ok for ok, _ in checks),
        "lineage": checks[-1][1]["lineage"],
    }
    if not result["verified"]:
        result["failed_checks"] = sorted(
            {c for _, info in checks for c in info.get("failed_checks", [])}
        )
    warm_ms = result["warm"]["fork_ms"]
    log(f"[{store.name}] runs={runs} fork_ms cold={result['fork_ms']} warm={warm_ms}")
    return result


def rss_in_child(store: Store, db: BaseDb, source_id: str) -> dict[str, Any]:
    """RSS high-water of one cold fork in a fresh process (see ``cmd_rss_probe``)."""
    command = [sys.executable, os.path.abspath(__file__), "rss-probe", "--store", store.name]
    command += ["--locator", store.locate(db), "--session", source_id]
    if isinstance(store, PostgresStore):
        command += ["--pg-url", store.url]
    done = subprocess.run(command, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        raise RuntimeError(f"rss-probe failed:\n{done.stderr}")
    return json.loads(done.stdout)


def cmd_rss_probe(args: argparse.Namespace) -> dict[str, Any]:
    """Fork ``--session`` once in this fresh process while sampling RSS.

    In the parent, memory freed by seeding and earlier forks is reused, which hides the fork's
    footprint from RSS. Here the process holds only agno, a warm-up fork of a 2-run session (so
    lazy imports and first-use caches are paid before) and the fork being measured.
    """
    db = attach_db(args.store, args.locator, args.pg_url)
    agent = make_agent(db)
    warmup_id = f"rss-warmup-{uuid.uuid4().hex[:8]}"
    seed_session(db, warmup_id, 2)
    agent.fork_session(source_session_id=warmup_id, user_id=USER_ID)
    gc.collect()
    with RssSampler() as rss:
        new_id = agent.fork_session(source_session_id=args.session, user_id=USER_ID)
    db.db_engine.dispose()  # type: ignore[attr-defined]
    return {
        "rss_peak_mib": round(rss.delta_mib, 3),
        "rss_base_mib": round(rss.base / MIB, 1),
        "new_session_id": new_id,
    }


def cmd_fork(args: argparse.Namespace) -> dict[str, Any]:
    sizes = [int(s) for s in args.sizes.split(",") if s.strip()]
    store = open_store(args)
    try:
        results = [fork_size(store, n, args.repetitions, args.warmup) for n in sizes]
    finally:
        store.close()
    return {
        "command": "fork",
        **environment(store),
        "api": "Agent.fork_session(source_session_id=..., user_id=...)",
        "repetitions": args.repetitions,
        "warmup": args.warmup,
        "run_shape": "user, assistant+1 tool call, tool result, final assistant (~100 chars each)",
        "results": results,
    }


# --------------------------------------------------------------------------------------------
# checkpoint
# --------------------------------------------------------------------------------------------


def checkpoint_scenario(store: Store, prior: int, batches: int) -> dict[str, Any]:
    db = store.open(f"ckpt_prior_{prior}")
    recorder = SqlRecorder(db.db_engine, db.session_table_name, db.runs_table_name)  # type: ignore[attr-defined]
    recorder.measure_bytes = True
    session_id = f"ckpt-session-{prior}"
    if prior:
        log(f"[{store.name}] seeding a session with {prior} prior runs")
        seed_session(db, session_id, prior)
    options = {"checkpoint": "tool-batch", "add_history_to_context": True}

    # Warm-up turn in another session: creates the tables, warms agno's and SQLAlchemy's caches.
    warm_script = Script(1, _noop, _noop)
    make_agent(db, warm_script, **options).run(
        user_text(0), session_id="ckpt-warmup", user_id=USER_ID
    )
    recorder.take("setup")

    marks: list[tuple[str, float]] = []

    def enter(phase: str) -> None:
        recorder.phase = phase
        marks.append((phase, time.perf_counter()))

    def on_model(k: int) -> None:
        enter("final" if k > batches else f"model:{k}")

    def on_tool(k: int) -> None:
        enter(f"batch:{k}")

    script = Script(batches, on_model, on_tool)
    agent = make_agent(db, script, **options)
    enter("run_start")
    output = agent.run(user_text(prior), session_id=session_id, user_id=USER_ID)
    enter("idle")

    durations = {phase: (marks[i + 1][1] - t) * 1000 for i, (phase, t) in enumerate(marks[:-1])}
    checkpoints = []
    batch_writes = []
    for k in range(1, batches + 1):
        summary = summarize(recorder.take(f"batch:{k}"))
        batch_writes.append(summary["writes_by_table"])
        checkpoints.append(
            {
                "index": k,
                "bytes": summary["bytes"],
                "session_row_bytes": summary["bytes_by_table"].get("session", 0),
                "run_row_bytes": summary["bytes_by_table"].get("run", 0),
                "statements": summary["statements"],
                "transactions": recorder.commits[f"batch:{k}"],
                "ms": round(durations[f"batch:{k}"], 3),
            }
        )
    model_phase_statements = sum(len(recorder.take(f"model:{k}")) for k in range(1, batches + 1))
    run_start = summarize(recorder.take("run_start"))
    final = summarize(recorder.take("final"))

    stored = db.get_run(output.run_id) if output.run_id else None
    expected_messages = 2 + 2 * batches
    checks = {
        "run_completed": output.status == RunStatus.completed,
        "checkpoint_level": agent.checkpoint == "tool-batch",
        "one_run_row_write_per_batch": all(w.get("run") == 1 for w in batch_writes),
        "stored_tools": isinstance(stored, RunOutput) and len(stored.tools or []) == batches,
        "stored_messages": isinstance(stored, RunOutput)
        and len([m for m in stored.messages or [] if m.role != "system"]) == expected_messages,
        "no_writes_outside_batches_and_final": model_phase_statements == 0,
    }
    sizes = [c["bytes"] for c in checkpoints]
    result: dict[str, Any] = {
        "prior_runs": prior,
        "batches": batches,
        "checkpoints": checkpoints,
        "bytes_first": sizes[0] if sizes else None,
        "bytes_last": sizes[-1] if sizes else None,
        "bytes_mean": round(statistics.mean(sizes), 1) if sizes else None,
        "bytes_total": sum(sizes),
        "statements_mean": round(statistics.mean(c["statements"] for c in checkpoints), 2)
        if sizes
        else None,
        "ms_mean": round(statistics.mean(c["ms"] for c in checkpoints), 3) if sizes else None,
        "run_start": {
            "ms": round(durations["run_start"], 3),
            "statements": run_start["statements"],
            "by_kind": run_start["by_kind"],
        },
        "final_write": {
            "ms": round(durations["final"], 3),
            "statements": final["statements"],
            "by_kind": final["by_kind"],
            "bytes": final["bytes"],
            "bytes_by_table": final["bytes_by_table"],
        },
        **store.runs_bytes(db, session_id),
        "current_run_row_bytes": len(json.dumps(stored.to_dict()))
        if isinstance(stored, RunOutput)
        else None,
        "verified": all(checks.values()),
    }
    if not result["verified"]:
        result["failed_checks"] = [name for name, ok in checks.items() if not ok]
    recorder.close()
    first, last = result["bytes_first"], result["bytes_last"]
    log(f"[{store.name}] prior={prior} checkpoint bytes first={first} last={last}")
    return result


def cmd_checkpoint(args: argparse.Namespace) -> dict[str, Any]:
    store = open_store(args)
    priors = [args.prior] if args.prior == 0 else [args.prior, 0]
    try:
        scenarios = [checkpoint_scenario(store, prior, args.batches) for prior in priors]
    finally:
        store.close()
    return {
        "command": "checkpoint",
        **environment(store),
        "agent": {"checkpoint": "tool-batch", "add_history_to_context": True, "tools_per_batch": 1},
        "bytes_measure": "sum of bound-parameter sizes (UTF-8 text) of INSERT/UPDATE statements",
        "scenarios": scenarios,
    }


# --------------------------------------------------------------------------------------------


def environment(store: Store) -> dict[str, Any]:
    return {
        "store": store.name,
        "driver": store.driver,
        "agno_version": version("agno"),
        "sqlalchemy_version": sqlalchemy.__version__,
        "python": platform.python_version(),
    }


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    common = argparse.ArgumentParser(add_help=False)
    common.add_argument("--store", choices=("sqlite", "postgres"), default="sqlite")
    common.add_argument(
        "--pg-url", default=DEFAULT_PG_URL, help=f"PostgreSQL URL (default {DEFAULT_PG_URL})"
    )
    commands = parser.add_subparsers(dest="command", required=True)
    fork = commands.add_parser(
        "fork", parents=[common], help="time Agent.fork_session per session size"
    )
    fork.add_argument("--sizes", default="10,100,1000", help="comma-separated run counts")
    fork.add_argument("--repetitions", type=int, default=5)
    fork.add_argument("--warmup", type=int, default=1)
    checkpoint = commands.add_parser(
        "checkpoint", parents=[common], help='bytes per checkpoint="tool-batch" write'
    )
    checkpoint.add_argument(
        "--prior", type=int, default=100, help="completed runs already in the session"
    )
    checkpoint.add_argument(
        "--batches", type=int, default=20, help="tool batches in the measured run"
    )
    probe = commands.add_parser(
        "rss-probe", parents=[common], help="internal: one fork in a fresh process, RSS sampled"
    )
    probe.add_argument("--locator", required=True, help="SQLite file or PostgreSQL schema")
    probe.add_argument("--session", required=True, help="session to fork")
    args = parser.parse_args(argv)
    if getattr(args, "repetitions", 1) < 1 or getattr(args, "batches", 1) < 1:
        parser.error("--repetitions and --batches must be at least 1")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    os.environ["AGNO_TELEMETRY"] = "false"  # agno reads it at run time; no network either way
    # Keep stdout for the one JSON object: anything agno prints (fd 1) goes to stderr.
    sys.stdout.flush()
    out = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    try:
        commands = {"fork": cmd_fork, "checkpoint": cmd_checkpoint, "rss-probe": cmd_rss_probe}
        report = commands[args.command](args)
    finally:
        sys.stdout.flush()
    out.write(json.dumps(report) + "\n")
    out.flush()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
