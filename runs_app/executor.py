"""Where a run executes: a Celery task in services mode, an in-process thread pool in
embedded mode. Both call ``engine.run_agent``; both are reached only after commit."""

from __future__ import annotations

import logging
import threading
from concurrent.futures import Future, ThreadPoolExecutor

from django.conf import settings
from django.db import transaction

log = logging.getLogger(__name__)

_pool: ThreadPoolExecutor | None = None
_pool_lock = threading.Lock()


def _embedded_pool() -> ThreadPoolExecutor:
    global _pool
    with _pool_lock:
        if _pool is None:
            _pool = ThreadPoolExecutor(
                max_workers=settings.EMBEDDED_RUN_THREADS, thread_name_prefix="run"
            )
        return _pool


def _run_safely(run_id: str) -> None:
    from .engine import run_agent

    try:
        run_agent(run_id)
    except Exception:
        log.exception("embedded run %s crashed", run_id)


def enqueue(run_id: str) -> Future | None:
    if settings.RUN_EXECUTOR == "thread":
        return _embedded_pool().submit(_run_safely, run_id)
    from .tasks import run_agent_task

    run_agent_task.apply_async(args=[run_id], task_id=f"{run_id}")
    return None


def enqueue_on_commit(run_id: str) -> None:
    transaction.on_commit(lambda: enqueue(run_id))
