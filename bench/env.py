"""The benchmark environment: own database, own Redis db, own ports, own subprocesses.

Everything here is private to one bench run: database names start with ``agentplat_bench``,
Redis is db 5, ports are picked free, and the subprocesses started here are stopped by pid.
"""

from __future__ import annotations

import contextlib
import functools
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from unittest import mock

ROOT = Path(__file__).resolve().parent.parent
VENV_BIN = ROOT / ".venv" / "bin"
PG_HOST = os.environ.get("BENCH_PG_HOST", "127.0.0.1")
PG_PORT = int(os.environ.get("BENCH_PG_PORT", "5432"))
PG_USER = os.environ.get("BENCH_PG_USER", "postgres")
REDIS_URL = os.environ.get("BENCH_REDIS_URL", "redis://127.0.0.1:6379/5")
DB_NAME = os.environ.get("BENCH_DB_NAME", "agentplat_bench")


# CPU weights, as the deployment sets them: the web process (Daphne: every socket's frames)
# has ten times the worker's share of a busy machine (platform/agentplat-web.service,
# CPUWeight=1000 against the worker's 100; compose.yaml's cpu_shares). Linux shares the CPU
# between groups of processes (systemd's cgroups; here, where each process started with
# start_new_session is a session of its own, between sessions: the kernel's autogroups), not
# between processes, so a process's own nice value does not reach across; an autogroup's nice
# does: -10 weighs 9.3 times a default group. BENCH_EQUAL_WEIGHTS=1: every group the same.
FAVOURED_NICE = -10


def favour(pid: int | str, equal: bool = False) -> str:
    """Give the session of ``pid`` (an int, or "self") the favoured CPU weight; what was done,
    for the report. Needs the kernel's autogroups and the right to raise a priority."""
    if equal:
        return "the default (equal weights)"
    if os.environ.get("BENCH_EQUAL_WEIGHTS") == "1":
        return "the default (BENCH_EQUAL_WEIGHTS=1)"
    path = Path(f"/proc/{pid}/autogroup")
    try:
        path.write_text(str(FAVOURED_NICE))
    except OSError as exc:
        return f"the default (its autogroup could not be set: {exc.strerror or exc})"
    return f"autogroup nice {FAVOURED_NICE}"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, timeout: float = 30.0, proc: subprocess.Popen | None = None) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc is not None and proc.poll() is not None:
            raise RuntimeError(f"process {proc.args!r} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open in {timeout}s")


def _psql(sql: str, *, port: int = PG_PORT, host: str = PG_HOST) -> str:
    out = subprocess.run(
        ["psql", "-h", host, "-p", str(port), "-U", PG_USER, "-d", "postgres", "-Atc", sql],
        check=True,
        capture_output=True,
        text=True,
    )
    return out.stdout.strip()


def recreate_database(name: str, *, port: int = PG_PORT, host: str = PG_HOST) -> str:
    assert name.startswith("agentplat_bench"), name
    _psql(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)', port=port, host=host)
    _psql(f'CREATE DATABASE "{name}"', port=port, host=host)
    return f"postgres://{PG_USER}@{host}:{port}/{name}"


def free_connections(*, port: int = PG_PORT, host: str = PG_HOST) -> int:
    limit = int(_psql("show max_connections", port=port, host=host))
    used = int(_psql("select count(*) from pg_stat_activity", port=port, host=host))
    return limit - used


def flush_redis() -> None:
    import redis

    redis.Redis.from_url(REDIS_URL).flushdb()


@dataclass
class Proc:
    name: str
    popen: subprocess.Popen
    log: Path

    @property
    def pid(self) -> int:
        return self.popen.pid

    def stop(self, timeout: float = 20.0) -> None:
        if self.popen.poll() is not None:
            return
        self.popen.send_signal(signal.SIGTERM)
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            # Stuck: end its pool children (ours, by pid) and then it.
            for pid in children(self.popen.pid):
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, signal.SIGKILL)
            self.popen.kill()
            self.popen.wait(5)


METRICS_TOKEN = "bench-metrics"
LISTEN_BACKLOG = 1024  # as platform/Procfile, the systemd unit and the compose file listen


@dataclass
class Env:
    """Database URL, Redis URL and a private workspace; subprocesses started from it."""

    database_url: str
    workdir: Path
    procs: list[Proc] = field(default_factory=list)
    private_pg: PrivatePostgres | None = None
    daphne_weight: str = ""  # what ``favour`` did to the last Daphne started

    @property
    def workspace(self) -> Path:
        return self.workdir / "workspaces"

    def child_env(self, **extra: str) -> dict[str, str]:
        env = dict(os.environ)
        env.update(
            DJANGO_SETTINGS_MODULE="config.settings",
            DATABASE_URL=self.database_url,
            REDIS_URL=REDIS_URL,
            WORKSPACE_ROOT=str(self.workspace),
            LOG_LEVEL="WARNING",
            PYTHONUNBUFFERED="1",
            # The benchmarks run as root on this machine; the deployment's processes refuse to
            # (config/privileges.py).
            ALLOW_ROOT="true",
        )
        env.update(extra)
        return env

    def spawn(self, name: str, args: list[str], *, cwd: Path | None = None, **extra: str) -> Proc:
        log = self.workdir / f"{name}.log"
        popen = subprocess.Popen(
            args,
            cwd=cwd or ROOT,
            env=self.child_env(**extra),
            stdout=log.open("ab"),
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        proc = Proc(name, popen, log)
        self.procs.append(proc)
        return proc

    def migrate(self) -> None:
        subprocess.run(
            [str(VENV_BIN / "python"), "manage.py", "migrate", "-v0"],
            cwd=ROOT,
            env=self.child_env(),
            check=True,
        )

    def daphne(self, equal: bool = False, tree: Path = ROOT) -> tuple[Proc, int]:
        """Daphne on a free port, its CPU weight as deployed (ten times the others') unless
        ``equal``, serving the project in ``tree`` (another commit's copy, say)."""
        port = free_port()
        proc = self.spawn(
            f"daphne-{port}",
            [
                str(VENV_BIN / "daphne"),
                # As platform/Procfile listens: a queue of 1024 connections not yet accepted.
                "-e",
                f"tcp:port={port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}",
                "config.asgi:application",
            ],
            cwd=tree,
            PYTHONPATH=str(tree),
            # The streaming benchmark reads Daphne's fan-out histogram while it runs.
            METRICS_TOKEN=METRICS_TOKEN,
            ASGI_THREADS="32",  # as platform/Procfile starts it
        )
        self.daphne_weight = favour(proc.popen.pid, equal)
        wait_port(port, proc=proc.popen)
        return proc, port

    def worker(
        self,
        concurrency: int,
        *,
        app: str = "config",
        pool: str = "prefork",
        cwd: Path | None = None,
        **extra: str,
    ) -> Proc:
        name = f"worker-{concurrency}-{time.monotonic_ns()}"
        args = [
            str(VENV_BIN / "celery"),
            "-A",
            app,
            "worker",
            "-c",
            str(concurrency),
            "--prefetch-multiplier",
            "1",
            "-l",
            "warning",
            "--pool",
            pool,
            "-n",
            f"{name}@%h",
            "--without-gossip",
            "--without-mingle",
            "--without-heartbeat",
        ]
        if cwd is not None:
            extra.setdefault("PYTHONPATH", str(cwd))
        return self.spawn(name, args, cwd=cwd, **extra)

    def stop_all(self) -> None:
        for proc in reversed(self.procs):
            proc.stop()
        self.procs.clear()

    def close(self) -> None:
        self.stop_all()
        if self.private_pg is not None:
            self.private_pg.stop()
        if os.environ.get("BENCH_KEEP") == "1":
            print(f"bench: kept {self.workdir} (BENCH_KEEP=1): the processes' logs", flush=True)
            return
        shutil.rmtree(self.workdir, ignore_errors=True)


class PrivatePostgres:
    """A throw-away PostgreSQL cluster on a free port, for when the shared server has too few
    free connections for the 50-session benchmark (each running run holds two)."""

    def __init__(self, max_connections: int = 400) -> None:
        self.dir = Path(tempfile.mkdtemp(prefix="agentplat-bench-pg-"))
        self.port = free_port()
        shutil.chown(self.dir, "postgres", "postgres")
        data = self.dir / "data"
        self._as_pg(["initdb", "-D", str(data), "-U", PG_USER, "-A", "trust", "--no-sync"])
        opts = (
            f"-p {self.port} -k {self.dir} -c listen_addresses=127.0.0.1 "
            f"-c max_connections={max_connections} -c fsync=on -c shared_buffers=128MB"
        )
        self._as_pg(
            ["pg_ctl", "-D", str(data), "-o", opts, "-l", str(self.dir / "log"), "-w", "start"]
        )

    def _as_pg(self, args: list[str]) -> None:
        cmd = args if os.geteuid() != 0 else ["runuser", "-u", "postgres", "--", *args]
        subprocess.run(cmd, check=True, capture_output=True)

    def stop(self) -> None:
        with contextlib.suppress(subprocess.CalledProcessError):
            self._as_pg(["pg_ctl", "-D", str(self.dir / "data"), "-m", "immediate", "stop"])
        shutil.rmtree(self.dir, ignore_errors=True)


def make_env(*, private_pg: bool = False) -> Env:
    workdir = Path(tempfile.mkdtemp(prefix="agentplat-bench-"))
    (workdir / "workspaces").mkdir()
    pg = PrivatePostgres() if private_pg else None
    if pg is not None:
        url = recreate_database(DB_NAME, port=pg.port, host="127.0.0.1")
    else:
        url = recreate_database(DB_NAME)
    return Env(database_url=url, workdir=workdir, private_pg=pg)


def setup_django(env: Env) -> None:
    """Configure this process like the services-mode processes (call once, before any model
    import). The bench process itself reaches the same database and Redis."""
    for key, value in env.child_env().items():
        if key in {
            "DJANGO_SETTINGS_MODULE",
            "DATABASE_URL",
            "REDIS_URL",
            "WORKSPACE_ROOT",
            "LOG_LEVEL",
        }:
            os.environ[key] = value
    sys.path.insert(0, str(ROOT))
    import django

    django.setup()


def rss_mib(pid: int) -> float:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024.0
    except FileNotFoundError:
        pass
    return 0.0


def children(pid: int) -> list[int]:
    out = []
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError, IndexError):
            continue
        if int(fields[1]) == pid:
            out.append(int(stat.parent.name))
    return out


def tree_rss_mib(pid: int) -> tuple[float, list[float]]:
    """RSS of ``pid`` and of each of its children (a Celery prefork pool)."""
    return rss_mib(pid), [rss_mib(c) for c in sorted(children(pid))]


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its children (a prefork pool) so far."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for each in [pid, *children(pid)]:
        try:
            fields = Path(f"/proc/{each}/stat").read_text().rsplit(")", 1)[1].split()
        except (FileNotFoundError, ProcessLookupError):
            continue
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


def tree_total_rss_mib(pid: int) -> float:
    parent, kids = tree_rss_mib(pid)
    return parent + sum(kids)


@contextmanager
def statements_of_every_thread(recorder: Callable[..., Any]) -> Iterator[None]:
    """``connection.execute_wrapper(recorder)`` for every connection of every thread: a run
    executes its statements in the run host's database threads, each on its own
    connection."""
    from django.db.backends.utils import CursorWrapper

    original = CursorWrapper._execute_with_wrappers

    def wrapped(self, sql, params, many, executor):  # noqa: ANN001, ANN202
        return original(self, sql, params, many, functools.partial(recorder, executor))

    with mock.patch.object(CursorWrapper, "_execute_with_wrappers", wrapped):
        yield
