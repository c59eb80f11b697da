"""Embedded or services mode, decided here and nowhere else.

The mode decides three things, each provided from this module:

* **where a run executes** (``enqueue``): a Celery task in services mode, this process's run
  host in embedded mode (``RUN_EXECUTOR=thread``, which the in-process tests also use). Both
  end on a run host (``host.py``): the Celery task hands the run to it, and in embedded mode
  the host's intake thread takes it from this module's local queue (``local_runs``), so that
  the host imports this module and never the other way;
* **how an abort reaches a running loop** (``abort_bus``): Redis pub/sub across processes,
  or an in-process event;
* **where events are published from**: in embedded mode the in-memory channel layer lives on
  the ASGI server's loop, so the publisher binds to it (``attach_server``), and the server
  also sweeps for runs whose lease expired (no worker does it there); elsewhere it binds to
  the run host's loop (``host_started``), where the runs' tokens come from.

Everything else asks this module; no other module branches on the mode.
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable
from typing import Any

from celery import current_app
from django.conf import settings
from django.db import transaction

from realtime.events import publisher
from sessions_app.services.repo_import import prepare_and_close

from . import abort_bus as buses

log = logging.getLogger(__name__)

TASK_NAME = "runs_app.run_agent"
PREPARE_TASK = "runs_app.prepare_session"

_local: queue.SimpleQueue[str] = queue.SimpleQueue()
_bus: buses.AbortBus | None = None
_bus_lock = threading.Lock()


def embedded() -> bool:
    """No Redis: SQLite, the in-memory channel layer, runs in the server's process."""
    return not settings.REDIS_URL


def redis_url() -> str:
    """Where Redis is, in services mode (broker, channel layer, abort bus)."""
    return settings.REDIS_URL


def in_process() -> bool:
    """Runs execute in this process's thread pool instead of a Celery worker."""
    return settings.RUN_EXECUTOR == "thread"


def local_runs() -> queue.SimpleQueue[str]:
    """The runs this process enqueued in embedded mode, for its run host to take
    (``host.take_local_runs``)."""
    return _local


class _Sent:
    """What ``send_task`` gives back instead of an ``AsyncResult``, which builds Celery's
    result backend: no task's result is read here (a run's outcome is its row), and that
    backend is per thread — built on every request's thread while those were new each time
    (before core/request_threads.py): a quarter of what a send cost the request."""

    def __init__(self, task_id: str) -> None:
        self.id = task_id


# Nothing announced to or stored in a result backend, none built.
_NO_RESULT: dict[str, Any] = {"ignore_result": True, "result_cls": _Sent}


def enqueue(run_id: str) -> None:
    """Start ``run_id`` where runs execute in this mode. Call after the transaction that
    created or queued the run commits (``enqueue_on_commit``)."""
    if in_process():
        _local.put(run_id)  # taken by this process's run host (``host.take_local_runs``)
        return
    # The project's Celery app (config/celery.py) is the current one once Django is set up.
    current_app.send_task(TASK_NAME, args=[run_id], task_id=run_id, **_NO_RESULT)


def enqueue_prepare(session_id: str, job: str) -> None:
    """Start a session's prepare job (a clone: ``sessions_app.services.repo_import``) where
    work runs in this mode: a thread of this process, or a Celery task."""
    if in_process():
        threading.Thread(
            target=prepare_and_close, args=(session_id, job), daemon=True, name=f"clone-{job}"
        ).start()
        return
    current_app.send_task(PREPARE_TASK, args=[session_id, job], **_NO_RESULT)


def enqueue_on_commit(run_id: str) -> None:
    """``enqueue`` once the transaction commits. A broker that cannot take the task now
    (Redis restarting) does not fail the request that stored the run: the run holds the
    session's busy lock with a lease, and the lease sweep starts it once that lapses."""

    def send() -> None:
        try:
            enqueue(run_id)
        except Exception as exc:
            log.warning(
                "run %s: could not enqueue it now (%s); the lease sweep starts it", run_id, exc
            )

    transaction.on_commit(send)


def abort_bus() -> buses.AbortBus:
    """The process's abort bus for this mode."""
    global _bus
    with _bus_lock:
        if _bus is None:
            _bus = buses.LocalAbortBus() if embedded() else buses.RedisAbortBus(redis_url())
        return _bus


def host_started(loop: asyncio.AbstractEventLoop) -> None:
    """Called by the run host when its loop starts: outside embedded mode the runs' events
    are published from that loop (no thread hop per token)."""
    if not embedded():
        publisher.bind_loop(loop)


def attach_server(loop: asyncio.AbstractEventLoop, start_sweeper: Callable[[], None]) -> None:
    """Called by the ASGI server on its loop. Embedded mode: events are published on that
    loop (the in-memory layer lives there), and runs whose lease expired are resumed here."""
    if not embedded():
        return
    publisher.bind_loop(loop)
    if in_process():
        start_sweeper()
