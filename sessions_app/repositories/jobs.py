"""A clone's prepare job: held, started and run (docs/semantics.md §13).

``hold_for_clone`` holds a new session for its job (``lock.hold_for_job``, in the transaction
that creates it) and starts the job once that commits: a thread of this process when work
runs in process (``core.mode``), else the Celery task ``PREPARE_TASK`` (``tasks.py``), sent
by name. Either way the job is ``fill.prepare``; a job that cannot be started fails the
clone with a sentence.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import connection, transaction

from core import ids, mode

from .. import hosts
from ..models import Session
from ..services import lock
from . import fill

log = logging.getLogger(__name__)
PREPARE_TASK = "sessions_app.prepare_session"


def hold_for_clone(session: Session) -> str:
    """Inside the transaction that creates ``session``: hold its busy lock for the prepare
    job (whose id this returns) and start the job after the commit."""
    job = ids.prepare_id()
    lock.hold_for_job(session, job, settings.REPO_CLONE_TIMEOUT + 120)
    transaction.on_commit(lambda: enqueue_prepare(session.id, job))
    return job


def enqueue_prepare(session_id: str, job: str) -> None:
    """Start the job where work runs in this mode; the broker away fails the clone."""
    try:
        if mode.in_process():
            threading.Thread(
                target=prepare_and_close, args=(session_id, job), daemon=True, name=f"clone-{job}"
            ).start()
        else:
            # To the session's home host (sessions_app/hosts.py), else the default queue.
            queue = hosts.queue_for_session(session_id)
            mode.send_task(PREPARE_TASK, [session_id, job], queue=queue)
    except Exception as exc:  # the broker is away: the clone fails with a sentence
        log.warning("session %s: could not enqueue the clone (%s)", session_id, exc)
        fill.fail(session_id, job, "The clone could not be started: try again.")


def prepare_and_close(session_id: str, job: str) -> None:
    """``prepare`` on a thread of its own (in process): its connection closed after."""
    try:
        fill.prepare(session_id, job)
    finally:
        connection.close()
