"""``GET /api/health/``: the database, Redis and a worker answer (200), or which does not (503).
No login: it says nothing about anyone's data."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import redis
from celery import current_app
from django.conf import settings
from django.db import connection
from django.http import JsonResponse

from core import mode
from workspace import sandbox

from .execution import runtime


def _timed(check) -> dict[str, Any]:  # noqa: ANN001
    started = time.perf_counter()
    try:
        detail = check()
        ok = True
    except Exception as exc:  # noqa: BLE001 - a health check reports, it does not raise
        detail, ok = f"{exc.__class__.__name__}: {exc}", False
    return {"ok": ok, "detail": detail, "ms": round((time.perf_counter() - started) * 1000, 1)}


def _database() -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT 1")
        cursor.fetchone()
    return connection.vendor


def _redis() -> str:
    if runtime.embedded():
        return "embedded (in-memory channel layer)"
    client = redis.Redis.from_url(runtime.redis_url(), socket_timeout=2, socket_connect_timeout=2)
    try:
        client.ping()
    finally:
        client.close()
    return "pong"


def _worker() -> str:
    if runtime.in_process():
        return "in-process runs (embedded)"
    replies = current_app.control.ping(timeout=1.0) or []
    if not replies:
        raise RuntimeError("no Celery worker answered within 1 s")
    return f"{len(replies)} worker(s)"


def _workspaces() -> str:
    if not mode.holds_worktrees():
        return 'none in this process (WORKSPACE_ROOT=""): the worker hosts hold them'
    return sandbox.workspaces(Path(settings.WORKSPACE_ROOT))


def health(request) -> JsonResponse:  # noqa: ANN001
    checks = {"database": _timed(_database), "redis": _timed(_redis), "worker": _timed(_worker)}
    ok = all(c["ok"] for c in checks.values())
    details = {"workspaces": _workspaces()}  # said, not checked: either way works
    return JsonResponse({"ok": ok, "checks": checks, "details": details}, status=200 if ok else 503)
