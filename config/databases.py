"""The ``DATABASES`` entry of a ``DATABASE_URL`` (PostgreSQL in services mode; SQLite, in WAL
mode, in embedded mode or for a ``sqlite://`` URL)."""

from __future__ import annotations

import os
from pathlib import Path
from urllib.parse import parse_qs, unquote, urlparse

from config.environment import BASE_DIR


def database_from_url(url: str) -> dict:
    parsed = urlparse(url)
    if parsed.scheme in {"postgres", "postgresql", "pgsql"}:
        options = {k: v[-1] for k, v in parse_qs(parsed.query).items()}
        # A transaction left open by a process that was stopped (SIGSTOP, a VM pause) would
        # hold its row locks until it woke: PostgreSQL ends it after this long instead, so a
        # run taken over by another worker never waits on the one that lost it.
        idle = int(os.environ.get("DB_IDLE_IN_TRANSACTION_SECONDS", "20"))
        if idle > 0 and "options" not in options:
            options["options"] = f"-c idle_in_transaction_session_timeout={idle * 1000}"
        pooled = _pool()
        prepared = int(os.environ.get("DB_PREPARE_THRESHOLD", "5"))
        if prepared > 0:
            # The parameters go apart from the statement (psycopg's server-side binding, not
            # quoted into it in Python), and a statement a connection has run this many times
            # is prepared: PostgreSQL parses and plans it once per connection instead of at
            # every run's start and end. ``DB_PREPARE_THRESHOLD=0``: neither (a pooler in
            # transaction mode that does not keep prepared statements).
            options.setdefault("server_side_binding", True)
            options.setdefault("prepare_threshold", prepared)
        return {
            "ENGINE": "django.db.backends.postgresql",
            "NAME": unquote(parsed.path.lstrip("/")) or "postgres",
            "USER": unquote(parsed.username or ""),
            "PASSWORD": unquote(parsed.password or ""),
            "HOST": parsed.hostname or "",
            "PORT": str(parsed.port or ""),
            "CONN_MAX_AGE": 0,
            # A pooled connection is checked (one round trip) before it is handed out: one
            # that PostgreSQL ended meanwhile (a restart, a terminated backend) is replaced.
            "CONN_HEALTH_CHECKS": bool(pooled),
            "OPTIONS": {**options, **({"pool": pooled} if pooled else {})},
        }
    if parsed.scheme == "sqlite":
        return sqlite(Path(unquote(parsed.path)) if parsed.path else BASE_DIR / "var/db.sqlite3")
    raise ValueError(f"Unsupported DATABASE_URL scheme: {parsed.scheme!r}")


def _pool() -> dict | None:
    """Django's pool of PostgreSQL connections (psycopg_pool), per process, shared by its
    threads: a request or a run's thread takes one and gives it back when Django closes it,
    instead of a new connection (a new PostgreSQL backend, ~9 ms of CPU) for every request
    (Django's advice under ASGI, where persistent connections do not apply). At most
    ``DB_POOL_MAX_SIZE`` connections a process; a thread waits up to ``DB_POOL_TIMEOUT_SECONDS``
    for one when all are in use. ``DB_POOL_MAX_SIZE=0``: a connection of its own each time."""
    size = int(os.environ.get("DB_POOL_MAX_SIZE", "40"))
    if size <= 0:
        return None
    return {
        "min_size": 1,
        "max_size": size,
        "timeout": float(os.environ.get("DB_POOL_TIMEOUT_SECONDS", "30")),
        # Idle connections above the minimum are closed after a minute.
        "max_idle": 60.0,
    }


def sqlite(path: Path) -> dict:
    path.parent.mkdir(parents=True, exist_ok=True)
    return {
        "ENGINE": "django.db.backends.sqlite3",
        "NAME": str(path),
        # IMMEDIATE transactions avoid "database is locked" on lock upgrades between the
        # web threads and the in-process run threads; WAL lets readers run beside a writer.
        "OPTIONS": {
            "timeout": 30,
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=NORMAL;",
        },
        "TEST": {"NAME": str(path.with_name(path.stem + "-test.sqlite3"))},
    }
