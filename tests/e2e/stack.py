"""Start the real processes (Daphne, a Celery worker) as subprocesses for end-to-end tests."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent


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
        # A queue of this test's own: another suite on the same Redis cannot take its runs.
        CELERY_QUEUE=f"agentplat-e2e-{uuid.uuid4().hex[:12]}",
    )
    for key, value in overrides.items():
        if value is None:
            env.pop(key, None)
        else:
            env[key] = value
    return env


def manage(env: dict[str, str], *args: str) -> str:
    proc = subprocess.run(
        [str(BIN / "python"), "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    return proc.stdout


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
            [str(BIN / "daphne"), "-b", "127.0.0.1", "-p", str(port), "config.asgi:application"],
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
                "-c",
                "2",
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


def services_database_url() -> str:
    """The test database as a URL for the subprocesses; services mode is required."""
    import pytest
    from django.conf import settings
    from django.db import connection

    if settings.EMBEDDED or connection.vendor != "postgresql":
        pytest.fail("this test needs services mode: DATABASE_URL (PostgreSQL) and REDIS_URL")
    db = connection.settings_dict
    return f"postgres://{db['USER']}@{db['HOST']}:{db['PORT'] or 5432}/{db['NAME']}"
