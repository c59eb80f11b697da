"""Start the real processes (Daphne, a Celery worker) as subprocesses for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from dataclasses import dataclass
from pathlib import Path

import httpx

from bench.env import LISTEN_BACKLOG
from tests.support import db_templates
from tests.support.db_templates import manage

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


def daphne_command(port: int) -> list[str]:
    """Daphne as platform/Procfile starts it: a listen queue of 1024 connections (Twisted's
    default of 50 overflowed when 200 requests arrived at once: tests/e2e/test_waits.py)."""
    return [
        str(BIN / "daphne"),
        "-e",
        f"tcp:port={port}:interface=127.0.0.1:backlog={LISTEN_BACKLOG}",
        "config.asgi:application",
    ]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for_port(port: int, proc: subprocess.Popen, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"process exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), 0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise RuntimeError(f"port {port} did not open")


def base_env(**overrides: str | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST_")}
    env.update(
        DJANGO_SETTINGS_MODULE="config.settings",
        ASGI_THREADS="32",
        PYTHONUNBUFFERED="1",
        SCRIPTED_DEFAULT_PACE_MS="5",
        # The suite runs as root on CI's machine; the deployment's processes refuse to
        # (config/privileges.py).
        ALLOW_ROOT="true",
        # A queue of this test's own: another suite on the same Redis cannot take its runs.
        CELERY_QUEUE=f"agentplat-e2e-{uuid.uuid4().hex[:12]}",
        # The end of a test stops its workers (SIGTERM): runs left going stop at once
        # (runs_app/execution/drain.py; tests/e2e/test_worker_stop.py sets its own).
        RUN_DRAIN_SECONDS="0.5",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


class Processes:
    def __init__(self) -> None:
        self.procs: list[tuple[subprocess.Popen, Path]] = []

    def start(self, name: str, args: list[str], env: dict[str, str], log_dir: Path):
        log = log_dir / f"{name}-{len(self.procs)}.log"
        proc = subprocess.Popen(
            args,
            cwd=ROOT,
            env=env,
            stdout=open(log, "wb"),  # noqa: SIM115 - closed with the process
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        self.procs.append((proc, log))
        return proc

    def daphne(self, env: dict[str, str], log_dir: Path) -> str:
        port = free_port()
        proc = self.start(
            "daphne",
            daphne_command(port),
            env,
            log_dir,
        )
        wait_for_port(port, proc)
        return f"127.0.0.1:{port}"

    def worker(self, env: dict[str, str], log_dir: Path) -> subprocess.Popen:
        return self.start(
            "worker",
            [
                str(BIN / "celery"),
                "-A",
                "config",
                "worker",
                "-l",
                "warning",
                # One process; its run host carries every run (the pool's threads only hand
                # runs over to it).
                "--pool",
                "threads",
                "-c",
                "4",
                "--prefetch-multiplier",
                "1",
                "-n",
                f"e2e-{os.getpid()}-{free_port()}@%h",
            ],
            env,
            log_dir,
        )

    def logs(self) -> str:
        return "\n".join(f"--- {log.name}\n{log.read_text()[-4000:]}" for _, log in self.procs)

    def stop(self) -> None:
        for proc, _ in self.procs:
            if proc.poll() is None:
                proc.terminate()
        for proc, _ in self.procs:
            try:
                proc.wait(10)
            except subprocess.TimeoutExpired:
                proc.kill()


class PrivateRedis:
    """A redis-server of the test's own on a free port, nothing persisted (``--save ""
    --appendonly no``): a test may kill and restart it (broker, channel layer and abort bus
    all lost at once) without touching the suite's shared Redis, which other tests use."""

    def __init__(self, port: int | None = None) -> None:
        self.port = port or free_port()
        self.proc: subprocess.Popen | None = None
        self.restarts = 0

    def url(self, db: int = 0) -> str:
        return f"redis://127.0.0.1:{self.port}/{db}"

    def start(self) -> PrivateRedis:
        self.proc = subprocess.Popen(
            [
                "redis-server",
                "--port",
                str(self.port),
                "--bind",
                "127.0.0.1",
                "--save",
                "",
                "--appendonly",
                "no",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            start_new_session=True,
        )
        wait_for_port(self.port, self.proc)
        return self

    def stop(self) -> None:
        """SIGKILL (what a crash does: nothing written, nothing flushed to clients)."""
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)
        self.proc = None

    def restart(self, down_seconds: float = 1.0) -> None:
        """Gone (every key, every subscription, every queued task) and back empty, on the
        same port, after ``down_seconds``."""
        self.stop()
        time.sleep(down_seconds)
        self.start()
        self.restarts += 1


def services_database_url() -> str:
    """The test database as a URL for the subprocesses; services mode is required."""
    import pytest
    from django.conf import settings
    from django.db import connection

    if settings.EMBEDDED or connection.vendor != "postgresql":
        pytest.fail("this test needs services mode: DATABASE_URL (PostgreSQL) and REDIS_URL")
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"


class ServicesServer:
    """The platform in services mode for browser tests: Daphne and a Celery worker on a
    PostgreSQL database of its own (created here, dropped at ``stop``) and the suite's Redis.
    The same face as ``EmbeddedServer``: ``url``, ``tmp``, ``manage``, ``logs``, ``stop``."""

    def __init__(self, tmp: Path, *, private_redis: bool = False) -> None:
        from urllib.parse import urlparse

        self.tmp = tmp
        self.redis = PrivateRedis() if private_redis else None
        self.redis_port = self.redis.port if self.redis else None
        self.tmp.mkdir(parents=True, exist_ok=True)
        base = urlparse(os.environ["DATABASE_URL"])
        self.db_name = f"agentplat_ui_{uuid.uuid4().hex[:10]}"
        self.admin_url = base._replace(path="/postgres").geturl()
        self.env = base_env(
            DATABASE_URL=base._replace(path=f"/{self.db_name}").geturl(),
            REDIS_URL=(
                f"redis://127.0.0.1:{self.redis_port}/0"
                if self.redis_port
                else os.environ["REDIS_URL"]
            ),
            WORKSPACE_ROOT=str(tmp / "workspaces"),
            SCRIPTED_DEFAULT_PACE_MS="15",
            AGENT_ALLOW_SHELL="true",  # in its sandbox (bubblewrap, which .ci/run installs)
        )
        self.procs = Processes()
        self.url = ""

    def _admin_sql(self, sql: str) -> None:
        import psycopg

        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(sql)

    def manage(self, *args: str) -> str:
        return manage(self.env, *args)

    def restart_redis(self, down_seconds: float = 1.0) -> None:
        """Redis gone (SIGKILL: every key, group membership included) and back empty."""
        assert self.redis is not None, "ServicesServer(private_redis=True) only"
        self.redis.restart(down_seconds)

    def start(self) -> ServicesServer:
        if self.redis is not None:
            self.redis.start()
        # Migrated, with the demo user: a copy of the suite's template (db_templates.py).
        db_templates.create_postgres(
            self.admin_url, self.db_name, self.env, self.env["DATABASE_URL"]
        )
        # The worker first: it starts (seconds of imports) while Daphne is waited for.
        self.procs.worker(self.env, self.tmp)
        self.url = "http://" + self.procs.daphne(self.env, self.tmp)
        return self

    def logs(self) -> str:
        return self.procs.logs()

    def restart_daphne(self) -> None:
        """Stop the web server hard and start a new one on the same port (a deploy, a crash)."""
        port = int(self.url.rsplit(":", 1)[1])
        for proc, log in list(self.procs.procs):
            if "daphne" in log.name and proc.poll() is None:
                os.killpg(proc.pid, 9)
                proc.wait(10)
        proc = self.procs.start(
            "daphne",
            daphne_command(port),
            self.env,
            self.tmp,
        )
        wait_for_port(port, proc)

    def stop(self) -> None:
        self.procs.stop()
        if self.redis is not None:
            self.redis.stop()
        self._admin_sql(f'DROP DATABASE IF EXISTS "{self.db_name}" WITH (FORCE)')


def services_available() -> bool:
    return os.environ.get("DATABASE_URL", "").startswith("postgres") and bool(
        os.environ.get("REDIS_URL")
    )


@dataclass
class ApiStack:
    """Daphne in services mode (its Celery workers started by the test), a user with an API
    token and an HTTP client of theirs: what most end-to-end tests begin with."""

    env: dict[str, str]
    host: str
    token: str
    http: httpx.Client
    workspace: Path


def api_stack(procs: Processes, tmp_path: Path, username: str, **env: str) -> ApiStack:
    """Needs the database (``django_db(transaction=True)``): the user is made here."""
    from django.conf import settings
    from django.contrib.auth.models import User
    from rest_framework.authtoken.models import Token

    workspace = tmp_path / "ws"
    full_env = base_env(
        DATABASE_URL=services_database_url(),
        REDIS_URL=settings.REDIS_URL,
        WORKSPACE_ROOT=str(workspace),
        **env,
    )
    user = User.objects.create_user(username, password="pw")
    token = Token.objects.create(user=user).key
    host = procs.daphne(full_env, tmp_path)
    http = httpx.Client(
        base_url=f"http://{host}", headers={"Authorization": f"Token {token}"}, timeout=60
    )
    return ApiStack(full_env, host, token, http, workspace)
