"""The live servers of the browser tests, and the ones a test process shares.

Starting a server (a database copied from the template, a worker's imports, Daphne) took
10–15 s of a loaded CI machine, more than most browser files' tests. So the files of a test
process that leave the server as they found it share one (``shared``); a file that changes
what others would see says ``OWN_SERVER = True`` and gets its own (conftest.py). A shared
server lives while its process runs such files: it is stopped (``stop_shared``) as soon as
the process moves on to a file that uses none, so that its processes and database
connections do not weigh on the rest of the suite."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from pathlib import Path
from typing import Any

from tests.support.embedded_server import EmbeddedServer

from .stack import ServicesServer, services_available

SERVER_FIXTURES = frozenset({"server", "embedded_server"})
_shared: dict[str, tuple[Any, Path]] = {}  # mode -> (server, its directory)


def default_mode() -> str:
    """Services mode (Daphne, a Celery worker, PostgreSQL, Redis) when the suite has them, as
    in CI; embedded mode otherwise."""
    return "services" if services_available() else "embedded"


def start(mode: str) -> tuple[Any, Path]:
    tmp = Path(tempfile.mkdtemp(prefix=f"agentplat-e2e-{uuid.uuid4().hex[:6]}-"))
    srv = ServicesServer(tmp) if mode == "services" else EmbeddedServer(tmp)
    try:
        srv.start()
    except Exception:
        srv.stop()
        raise
    return srv, tmp


def stop(srv: Any, tmp: Path) -> None:
    srv.stop()
    shutil.rmtree(tmp, ignore_errors=True)


def shared(mode: str) -> Any:
    """This process's shared server of ``mode``, started the first time it is asked for."""
    if mode not in _shared:
        _shared[mode] = start(mode)
    return _shared[mode][0]


def stop_shared() -> None:
    while _shared:
        stop(*_shared.popitem()[1])
