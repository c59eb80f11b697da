"""The Celery tasks a session's home host runs for a web process that holds no worktree
(found by the worker through ``config/celery.py``'s task discovery): a history move
or a push to a session's origin (``host_calls``), and the removal of a deleted session's files."""

from __future__ import annotations

from typing import Any

from celery import shared_task

from . import host_calls
from .repositories import push  # noqa: F401 - registers the host call "push"
from .services import sessions


@shared_task(name=host_calls.TASK_NAME, acks_late=False)
def host_call(payload: dict[str, Any]) -> None:
    """Run one allowed call on this host and push its reply (``host_calls.answer``). Acked on
    receipt: a worker lost mid-call leaves the web to its timeout, never a second run."""
    host_calls.answer(payload)


@shared_task(name=sessions.REMOVE_TASK)
def remove_session_files(session_id: str, replicated_commit: str = "") -> None:
    """A deleted session's worktree, snapshot git dir and central ref, on its home host
    (``sessions.remove_files``; run again after a lost worker, it finds nothing to do)."""
    sessions.remove_files(session_id, replicated_commit)
