from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready
from django.conf import settings

from . import lifecycle
from .engine import run_agent
from .runtime import TASK_NAME


@shared_task(
    bind=True,
    name=TASK_NAME,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=40,
)
def run_agent_task(self, run_id: str) -> None:  # noqa: ANN001
    """Late ack: a worker that dies mid-run leaves the message unacked; it is delivered again
    and the run resumes from what was persisted once the dead worker's lease has expired."""
    if not run_agent(run_id):
        raise self.retry(countdown=max(1.0, settings.RUN_LEASE_SECONDS / 2))


@worker_ready.connect
def _start_sweeper(**kwargs) -> None:  # noqa: ANN003
    """The next worker to start (and every running one, periodically) resumes the runs of
    workers that died: their leases expire and the sweep enqueues them again."""
    lifecycle.start_sweeper()
