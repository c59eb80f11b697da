"""What the mode (embedded or services, decided in ``core/mode.py``) means for runs.

The mode decides three things about runs, each provided from this module:

* **where a run executes** (``enqueue``): a Celery task in services mode (sent to the queue
  of its session's home host, sessions_app/hosts.py), this process's run host in embedded
  mode (``RUN_EXECUTOR=thread``, which the in-process tests also use). Both end on a run
  host (``host.py``): the Celery task hands the run to it, and in embedded mode
  the host's intake thread takes it from this module's local queue (``local_runs``), so that
  the host imports this module and never the other way;
* **how an abort reaches a running loop** (``abort_bus``): Redis pub/sub across processes,
  or an in-process event;
* **where events are published from**: in embedded mode the in-memory channel layer lives on
  the ASGI server's loop, so the publisher binds to it (``attach_server``), and the server
  also sweeps for runs whose lease expired (no worker does it there); elsewhere it binds to
  the run host's loop (``host_started``), where the runs' tokens come from.

What runs need of the mode, they ask this module (``embedded``, ``in_process`` and
``redis_url`` are ``core.mode``'s, named here too).
"""

from __future__ import annotations

import asyncio
import logging
import queue
import threading
from collections.abc import Callable

from django.db import transaction

from core import mode
from core.mode import embedded, in_process, redis_url
from realtime.events import publisher
from sessions_app import hosts

from ..models import Run
from . import abort_bus as buses

log = logging.getLogger(__name__)

TASK_NAME = "runs_app.run_agent"

_local: queue.SimpleQueue[str] = queue.SimpleQueue()
_bus: buses.AbortBus | None = None
_bus_lock = threading.Lock()
_leaving = threading.Event()


def local_runs() -> queue.SimpleQueue[str]:
    """The runs this process enqueued in embedded mode, for its run host to take
    (``host.take_local_runs``)."""
    return _local


def enqueue(run_id: str) -> None:
    """Start ``run_id`` where runs execute in this mode. Call after the transaction that
    created or queued the run commits (``enqueue_on_commit``)."""
    if in_process():
        _local.put(run_id)  # taken by this process's run host (``host.take_local_runs``)
        return
    queue = None if _leaving.is_set() else _queue_of(run_id)
    mode.send_task(TASK_NAME, [run_id], task_id=run_id, queue=queue)


def leaving() -> None:
    """This process stops (drain.py): the runs it enqueues from now go to the default queue,
    to any worker, not back to its host's queue, which no other process may read (one host
    per container): on today's shared volume any host can run them."""
    _leaving.set()


def _queue_of(run_id: str) -> str | None:
    """The queue of the run's session's home host, or None (the default queue): see
    sessions_app/hosts.py."""
    session_id = Run.objects.filter(id=run_id).values_list("session_id", flat=True).first()
    return hosts.queue_for_session(session_id) if session_id else None


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
