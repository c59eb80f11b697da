"""The databases of the servers the suite starts, copied from one migrated template instead
of migrated anew each time (``manage.py migrate`` and ``ensure_demo_user`` cost about five
seconds a server, and the suite starts about forty).

The template is named by a digest of every migration and of the demo user's command, so a
change to either builds a new one; an older one is dropped then. PostgreSQL copies a
database from a template in a fraction of a second (``CREATE DATABASE … TEMPLATE``); an
SQLite template is a file, copied. Either is built once under a lock the suite's processes
share (a PostgreSQL advisory lock; a file lock)."""

from __future__ import annotations

import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
LOCK_KEY = 0x61676E74  # the advisory lock held while a template is built
PREFIX = "agentplat_tpl_"


def digest() -> str:
    """What the migrated database depends on: the migrations and the demo user's command."""
    h = hashlib.sha256()
    files = sorted(ROOT.glob("*/migrations/*.py"))
    files += sorted(ROOT.glob("*/management/commands/ensure_demo_user.py"))
    for path in files:
        h.update(str(path.relative_to(ROOT)).encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def manage(env: dict[str, str], *args: str, timeout: float = 120) -> str:
    """``manage.py`` with ``args`` in ``env``: its output, or RuntimeError saying why not."""
    proc = subprocess.run(
        [str(BIN / "python"), "manage.py", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if proc.returncode != 0:
        raise RuntimeError(proc.stdout + proc.stderr)
    return proc.stdout


def _prepare(env: dict[str, str]) -> None:
    manage(env, "migrate", "-v0", timeout=300)
    manage(env, "ensure_demo_user")


def create_postgres(admin_url: str, name: str, env: dict[str, str], database_url: str) -> None:
    """Database ``name`` (to be reached at ``database_url``), migrated, the demo user in it."""
    import psycopg

    template = PREFIX + digest()
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute("SELECT pg_advisory_lock(%s)", [LOCK_KEY])
        try:
            have = {
                row[0]
                for row in conn.execute(
                    "SELECT datname FROM pg_database WHERE datname LIKE %s", [PREFIX + "%"]
                )
            }
            if template not in have:
                for old in have:
                    conn.execute(f'DROP DATABASE IF EXISTS "{old}" WITH (FORCE)')
                building = template + "_new"
                conn.execute(f'CREATE DATABASE "{building}"')
                url = database_url.rsplit("/", 1)[0] + f"/{building}"
                try:
                    _prepare({**env, "DATABASE_URL": url})
                except BaseException:
                    conn.execute(f'DROP DATABASE IF EXISTS "{building}" WITH (FORCE)')
                    raise
                conn.execute(f'ALTER DATABASE "{building}" RENAME TO "{template}"')
        finally:
            conn.execute("SELECT pg_advisory_unlock(%s)", [LOCK_KEY])
        conn.execute(f'CREATE DATABASE "{name}" TEMPLATE "{template}"')


def create_sqlite(path: Path, env: dict[str, str]) -> None:
    """The SQLite database at ``path``, migrated, the demo user in it."""
    cache = Path(tempfile.gettempdir()) / "agentplat-test-templates"
    cache.mkdir(exist_ok=True)
    template = cache / f"{digest()}.sqlite3"
    with open(cache / "lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not template.exists():
            building = cache / f"{digest()}.{os.getpid()}.new"
            building.unlink(missing_ok=True)
            _prepare({**env, "DATABASE_URL": f"sqlite:///{building}"})
            building.rename(template)
    path.parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(template, path)
