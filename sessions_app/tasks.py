"""The Celery task of a history move sent to the session's home host (``host_calls``: found by
the worker through ``config/celery.py``'s task discovery)."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from . import host_calls


@shared_task(name=host_calls.TASK_NAME, acks_late=False)
def host_call(payload: dict[str, Any]) -> None:
    """Run one allowed call on this host and push its reply (``host_calls.answer``). Acked on
    receipt: a worker lost mid-call leaves the web to its timeout, never a second run."""
    host_calls.answer(payload)
