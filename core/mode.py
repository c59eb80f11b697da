"""Embedded or services mode, decided here and nowhere else.

* **embedded**: no Redis — SQLite, the in-memory channel layer, runs in the server's process;
* **services**: PostgreSQL, Redis (broker, channel layer, abort bus), Celery workers.

``in_process`` says where the work of runs and prepare jobs executes: this process's threads
(``RUN_EXECUTOR=thread``: embedded mode, and the in-process tests) or Celery workers. What
each mode means for runs is ``runs_app.execution.runtime``'s; for a clone,
``sessions_app.repositories.jobs``'s. Both ask this module.
"""

from __future__ import annotations

from typing import Any

from celery import current_app
from django.conf import settings


def embedded() -> bool:
    """No Redis: SQLite, the in-memory channel layer, runs in the server's process."""
    return not settings.REDIS_URL


def holds_worktrees() -> bool:
    """This process has the worktrees of the sessions homed on its host (every process but a
    web process of several worker hosts, started with ``WORKSPACE_ROOT=""``: that one reads
    snapshots from its mirror of the central store and sends file work to the home host)."""
    return settings.HOLDS_WORKTREES


def redis_url() -> str:
    """Where Redis is, in services mode (broker, channel layer, abort bus)."""
    return settings.REDIS_URL


def in_process() -> bool:
    """Work executes in this process's threads instead of a Celery worker."""
    return settings.RUN_EXECUTOR == "thread"


class _Sent:
    """What ``send_task`` gives back instead of an ``AsyncResult``, which builds Celery's
    result backend: no task's result is read here (a run's outcome is its row, a clone's its
    session), and that backend is per thread — built on every request's thread while those
    were new each time (before core/request_threads.py): a quarter of what a send cost the
    request."""

    def __init__(self, task_id: str) -> None:
        self.id = task_id


# Nothing announced to or stored in a result backend, none built.
_NO_RESULT: dict[str, Any] = {"ignore_result": True, "result_cls": _Sent}


def host_queue(host: str) -> str:
    """The Celery queue of the worker host ``host`` (``WORKER_HOST``), which every worker of
    that name consumes beside the default queue (config/celery.py): inside ``CELERY_QUEUE``,
    so that deployments sharing one Redis stay apart."""
    return f"{settings.CELERY_TASK_DEFAULT_QUEUE}.host.{host}"


def send_task(
    name: str, args: list[Any], task_id: str | None = None, queue: str | None = None
) -> None:
    """Send the Celery task ``name`` (services mode), by name: the sender needs no import of
    the task. The project's Celery app (config/celery.py) is the current one once Django is
    set up. ``queue``: a host's (``host_queue``); None, the default queue."""
    routing = {"queue": queue} if queue else {}
    current_app.send_task(name, args=args, task_id=task_id, **routing, **_NO_RESULT)
