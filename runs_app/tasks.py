from __future__ import annotations

from celery import shared_task
from celery.signals import worker_ready, worker_shutting_down

from .execution import sweeper
from .execution.drain import drain
from .execution.host import host
from .execution.runtime import TASK_NAME
from .services import fork_job


@shared_task(
    bind=True,
    name=TASK_NAME,
    acks_late=True,
    reject_on_worker_lost=True,
    max_retries=40,
)
def run_agent_task(self, run_id: str) -> None:  # noqa: ANN001
    """Hands the run to this process's run host and returns once the run has begun (pending →
    running, its lease taken) — not when it ends: a waiting run holds no Celery slot. The ack
    is late, so a worker that dies before that leaves the message to be delivered again;
    after it, the run's lease is what recovers it (the sweep of every worker re-enqueues a
    run whose lease expired). While the host is full the task waits here, so the broker
    hands the next runs to other workers."""
    begun = host.submit(run_id)
    if begun.result():
        # Another worker's live lease still holds the session; the host retries by itself.
        return


@shared_task(name=fork_job.FORK_TASK, acks_late=False)
def prepare_fork_task(
    fork_id: str, job: str, source_id: str, tree: str, then: list | None = None
) -> None:
    """Make a fork's files on its host (``fork_job.prepare``). Acked on receipt, as a clone's
    job: a worker lost meanwhile leaves the fork held until its lease lapses."""
    fork_job.prepare(fork_id, job, source_id, tree, then)


@worker_ready.connect
def _start_sweeper(**kwargs) -> None:  # noqa: ANN003
    """The next worker to start (and every running one, periodically) resumes the runs of
    workers that died: their leases expire and the sweep enqueues them again."""
    sweeper.start_sweeper()


@worker_shutting_down.connect
def _drain(how: str = "Warm", **kwargs) -> None:  # noqa: ANN003
    """Asked to stop: the live runs end here within ``RUN_DRAIN_SECONDS`` or go to other
    workers at once (runs_app/execution/drain.py); a cold shutdown does not wait for them."""
    drain(host, 0.0 if how == "Cold" else None)
