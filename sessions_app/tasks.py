from __future__ import annotations

from celery import shared_task

from .services import repositories


@shared_task(name=repositories.PREPARE_TASK, acks_late=False)
def prepare_session(session_id: str, job: str) -> None:
    """Clone a new session's repository (``services.repositories.prepare``). Acked on
    receipt: a worker lost mid-clone leaves the session held until its lease lapses, and
    the clone is started again by nobody (the user sees it still preparing, then idle)."""
    repositories.prepare(session_id, job)
