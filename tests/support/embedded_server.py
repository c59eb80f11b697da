"""A real server in embedded mode (Daphne, SQLite, in-process runs) as a subprocess."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from tests.support import db_templates

ROOT = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def embedded_env(tmp: Path, **extra: str) -> dict[str, str]:
    """The test process's environment minus services mode: the pytest process itself has
    DATABASE_URL (PostgreSQL) and REDIS_URL, which the server must not inherit."""
    env = {k: v for k, v in os.environ.items() if k not in ("REDIS_URL", "DATABASE_URL")}
    env.pop("OPENAI_BASE_URL", None)
    env.update(
        DATABASE_URL=f"sqlite:///{tmp}/db.sqlite3",
        WORKSPACE_ROOT=str(tmp / "workspaces"),
        ASGI_THREADS="32",
        SCRIPTED_DEFAULT_PACE_MS="15",
        AGENT_ALLOW_SHELL="true",  # in its sandbox (bubblewrap, which .ci/run installs)
        DJANGO_SETTINGS_MODULE="config.settings",
        PYTHONUNBUFFERED="1",
    )
    env.update(extra)
    return env


class EmbeddedServer:
    def __init__(self, tmp: Path, **env: str) -> None:
        self.tmp = tmp
        self.tmp.mkdir(parents=True, exist_ok=True)
        self.env = embedded_env(tmp, **env)
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.log_path = tmp / "server.log"
        self.proc: subprocess.Popen | None = None

    def manage(self, *args: str) -> None:
        subprocess.run(
            [str(VENV_BIN / "python"), "manage.py", *args],
            cwd=ROOT,
            env=self.env,
            check=True,
            capture_output=True,
            timeout=120,
        )

    def start(self, timeout: float = 90.0) -> EmbeddedServer:
        # About 5 s on a quiet machine; the first start of a CI run, beside every other
        # process of the suite, once took more than 30 s.
        # Migrated, with the demo user: a copy of the suite's template (db_templates.py).
        database = self.env["DATABASE_URL"].removeprefix("sqlite:///")
        db_templates.create_sqlite(Path(database), self.env)
        log = open(self.log_path, "wb")  # noqa: SIM115 - closed with the process
        self.proc = subprocess.Popen(
            [
                str(VENV_BIN / "daphne"),
                "-b",
                "127.0.0.1",
                "-p",
                str(self.port),
                "config.asgi:application",
            ],
            cwd=ROOT,
            env=self.env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"the server exited ({self.proc.returncode}):\n{self.logs()}")
            try:
                with urllib.request.urlopen(f"{self.url}/login/", timeout=2) as res:
                    if res.status == 200:
                        return self
            except (urllib.error.URLError, ConnectionError, TimeoutError):
                pass
            time.sleep(0.2)
        self.stop()
        raise RuntimeError(f"the server did not answer within {timeout}s:\n{self.logs()}")

    def logs(self) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-20000:]
        except OSError:
            return ""

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.terminate()
        try:
            self.proc.wait(10)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
