"""The Celery task of a clone's prepare job (services mode; found by the worker through
``config/celery.py``'s task discovery)."""

from __future__ import annotations

from celery import shared_task

from . import fill
from .jobs import PREPARE_TASK


@shared_task(name=PREPARE_TASK, acks_late=False)
def prepare_session(session_id: str, job: str) -> None:
    """Clone a new session's repository (``fill.prepare``). Acked on receipt: a worker lost
    mid-clone leaves the session held until its lease lapses; the clone is not started
    again."""
    fill.prepare(session_id, job)
