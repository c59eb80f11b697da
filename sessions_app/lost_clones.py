"""Clones lost with their host (issue 45): a session made from a repository is ``preparing``,
its busy lock held by its prepare job (sessions_app/repositories/jobs.py) with a lease of
``REPO_CLONE_TIMEOUT`` + 120 s, and the job goes to its home host's queue. When that host dies
(its task still waiting in the host's queue, or half run there), nothing else ends the hold
before that lease lapses, and then only as an idle session with no files, no clone message
and no error, while the chat says "Cloning the repository…" all along.

``restart``, called by every worker's sweep (runs_app/execution/sweeper.py) beside
``rehome.sweep_dead``: each such session of a host whose beat lapsed moves to the live,
non-draining host with the fewest sessions (``lock.move_job``: a compare-and-set on the row,
its lease renewed) and the same job is sent there. ``fill.prepare`` writes only while that
job holds the session, so a job of the old host that still ran would write nothing twice.
A fork's job (a session ``preparing`` with ``forked_from_session``) is not a clone: not here.
"""

from __future__ import annotations

from django.conf import settings

from . import hosts
from .models import Session
from .repositories import jobs
from .services import lock

BATCH = 200  # lost clones sent again by one sweep, at most


def restart(limit: int = BATCH) -> list[tuple[str, str, str]]:
    """Send the clones of dead hosts' sessions to live hosts: [(session, old, new)]."""
    spread = hosts.Spread()
    if not spread.counts:
        return []
    lost = hosts.on_dead_hosts(
        Session.objects.filter(
            status=Session.Status.PREPARING, busy_run_id__startswith="prep_"
        ).filter(forked_from_session__isnull=True, source__has_key="url")
    ).values_list("id", "host", "busy_run_id")[:limit]
    restarted = []
    for sid, old, job in lost:
        target = spread.next()
        if lock.move_job(sid, job, old, target, settings.REPO_CLONE_TIMEOUT + 120):
            spread.took(target)
            jobs.enqueue_prepare(sid, job)
            restarted.append((sid, old, target))
    return restarted
