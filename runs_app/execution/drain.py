"""A worker's graceful stop (SIGTERM: a deploy, a scale-down, ``docker stop``).

Celery's warm shutdown waits for the tasks it runs, but a run's task returns once the run has
begun (``tasks.run_agent_task``): the process used to end with its runs in mid-step, and each
then waited for its lease to lapse (``RUN_LEASE_SECONDS``) and a sweep before another worker
resumed it. Now, when the worker is asked to stop (``drain``):

1. the run host takes no new run: one handed to it from then on is enqueued again, for
   another worker;
2. the live runs have ``RUN_DRAIN_SECONDS`` to end here;
3. those still running stop without writing another row, as a run that lost its lease does,
   and are handed back: their session's lease ends now (``hand_back``, only while the run's
   lease epoch is still this execution's) and the run is enqueued again, so another worker
   takes it over at once (``lifecycle.begin``'s take-over; recovery as after a crash).

A second signal (Celery's cold shutdown) cuts the wait short. A run that does not stop in
time keeps its lease: it is resumed after the lease lapses, as before.
"""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from typing import TYPE_CHECKING

from django.conf import settings
from django.db import transaction

from sessions_app.services import lock

from . import runtime
from .fencing import LeaseLost, fence

if TYPE_CHECKING:
    from .host import RunHost

log = logging.getLogger(__name__)
STOP_WAIT_SECONDS = 5.0  # for the runs told to stop to leave the host


class Drain:
    def __init__(self) -> None:
        self.hurry = threading.Event()
        self.lock = threading.Lock()

    def __call__(self, host: RunHost, seconds: float | None = None) -> list[str]:
        """Stop ``host`` as above; the runs handed back. Blocks (Celery's signal handler); a
        second call while the first waits cuts its wait short."""
        if not self.lock.acquire(blocking=False):
            self.hurry.set()
            return []
        try:
            host.closing = True
            runtime.leaving()  # what it hands on goes to any host (sessions_app/hosts.py)
            wait = settings.RUN_DRAIN_SECONDS if seconds is None else seconds
            if host.loop is None or not _wait(host, wait, self.hurry):
                return []
            return _hand_back_live(host)
        finally:
            self.lock.release()


drain = Drain()


def _wait(host: RunHost, seconds: float, hurry: threading.Event) -> bool:
    """Until the host has no run or ``seconds`` have passed: whether runs are left."""
    deadline = time.monotonic() + seconds
    while host.hosted and time.monotonic() < deadline and not hurry.is_set():
        time.sleep(0.05)
    if host.hosted:
        log.warning("stopping: %d run(s) still running are handed to other workers", host.hosted)
    return bool(host.hosted)


def _hand_back_live(host: RunHost) -> list[str]:
    """Tell the live runs to stop without writing (each run's ``lost``), wait until they
    have left the host, and hand back those that did."""
    stopping: dict[str, tuple[str, int | None]] = {}
    deadline = time.monotonic() + STOP_WAIT_SECONDS
    while time.monotonic() < deadline:
        for control in list(host.runs.values()):
            # A run that began meanwhile is told too.
            stopping.setdefault(control.run_id, (control.session_id, control.epoch))
            control.lost.set()
        if not host.hosted:
            break
        time.sleep(0.02)
    stopped = [
        (run_id, session_id, epoch)
        for run_id, (session_id, epoch) in stopping.items()
        if run_id not in host.runs and epoch is not None  # else its lease holds it until it lapses
    ]
    if not stopped:
        return []
    # On a database thread of the host (its own connection), not on the signal's thread.
    assert host.loop is not None
    done = asyncio.run_coroutine_threadsafe(host.blocking(_hand_back_all, stopped), host.loop)
    try:
        return done.result(timeout=STOP_WAIT_SECONDS + 10)
    except Exception:
        log.exception("stopping: the runs could not be handed back; their leases will lapse")
        return []


def _hand_back_all(stopped: list[tuple[str, str, int]]) -> list[str]:
    handed = []
    for run_id, session_id, epoch in stopped:
        if hand_back(run_id, session_id, epoch):
            handed.append(run_id)
            try:
                runtime.enqueue(run_id)
            except Exception as exc:  # the broker away: the sweep finds the expired lease
                log.warning("run %s: handed back, not enqueued (%s)", run_id, exc)
    return handed


def hand_back(run_id: str, session_id: str, epoch: int) -> bool:
    """End the lease of ``run_id``'s session now, so that another worker takes the run over
    at once; only while ``epoch`` is still the run's (an execution that lost the run changes
    nothing: refused by its fence, the session row is left as it was)."""
    try:
        with transaction.atomic():
            # The session row first, then the run's (the lock order of lock.py).
            ended = lock.end_lease(session_id, run_id)
            fence(run_id, epoch)
    except LeaseLost:
        return False
    return ended
