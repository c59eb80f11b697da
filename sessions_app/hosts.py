"""Worker hosts and the home host of a session (issue 45, step 1).

Every worker process (and the embedded server, the one host there) beats for its host
``WORKER_HOST`` every half lease (``beat``, from the run sweeper's thread); a host is live
while its last beat is within ``RUN_LEASE_SECONDS``. A new session is placed on the live host
with the fewest sessions (``place``), a fork on its source's while that host is live; its
runs, clone, fork job and history moves then go to that host's Celery queue (``queue_for``),
which every worker of that name consumes beside the default queue (config/celery.py).

A session whose home is not live (or that has none: blank, from before hosts) goes to the
default queue and any worker takes it: on a shared volume that is all; with a central store
(each host its own disk), the worker that takes it re-homes it (``rehome.py``: the worktree
from the store, the home moved), and the sweep moves a dead host's idle sessions.
"""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db.models import Count, OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from core import mode

from .models import Host, Session

_started: dict[int, datetime] = {}  # this process's start, by pid (a forked child is new)


def beat() -> None:
    """Announce this process's host: the beat, this process's pid and version, and the disk
    of its ``WORKSPACE_ROOT`` (one statvfs). The first beat of a process also moves
    ``started_at``."""
    now = timezone.now()
    started = _started.setdefault(os.getpid(), now)
    root = Path(settings.WORKSPACE_ROOT)
    measured = next((p for p in (root, *root.parents) if p.is_dir()), root)  # made yet or not
    try:
        disk = shutil.disk_usage(measured)
        total, free = disk.total, disk.free
    except OSError:
        total = free = 0
    fields = {
        "last_heartbeat": now,
        "pid": os.getpid(),
        "version": settings.SPECTACULAR_SETTINGS["VERSION"],
        "workspace_root": str(root),
        "disk_total": total,
        "disk_free": free,
    }
    if started == now:
        fields["started_at"] = now
    # One upsert: the processes of one host may all beat for the first time at once.
    Host.objects.bulk_create(
        [Host(name=settings.WORKER_HOST, **fields)],
        update_conflicts=True,
        unique_fields=["name"],
        update_fields=list(fields),
    )


def live_since() -> datetime:
    """Hosts that beat after this are live."""
    return timezone.now() - timedelta(seconds=settings.RUN_LEASE_SECONDS)


def live_hosts() -> QuerySet[Host]:
    return Host.objects.filter(last_heartbeat__gte=live_since())


def is_live(name: str) -> bool:
    return bool(name) and live_hosts().filter(name=name).exists()


def with_session_counts(hosts: QuerySet[Host]) -> QuerySet[Host]:
    """``hosts`` with ``n_sessions``: how many sessions each is home to (deleted sessions have
    no row), counted in the same query (the index on ``Session.host``)."""
    homed = (
        Session.objects.filter(host=OuterRef("name"))
        .order_by()
        .values("host")
        .annotate(n=Count("id"))
        .values("n")
    )
    return hosts.annotate(n_sessions=Coalesce(Subquery(homed), 0))


class Spread:
    """Where the sessions of dead hosts go, one by one: the live, non-draining host with the
    fewest sessions, counting those already sent (ties by name)."""

    def __init__(self) -> None:
        counted = with_session_counts(live_hosts().filter(draining=False))
        self.counts = {h.name: h.n_sessions for h in counted}

    def next(self) -> str:
        return min(self.counts, key=lambda name: (self.counts[name], name))

    def took(self, name: str) -> None:
        self.counts[name] += 1


def on_dead_hosts(sessions: QuerySet[Session]) -> QuerySet[Session]:
    """``sessions`` homed on a host that is not live (a blank home is none: not moved)."""
    live = live_hosts().values_list("name", flat=True)
    return sessions.exclude(host="").exclude(host__in=live).order_by("id")


def place() -> str:
    """The home of a new session, in one query: the live host with the fewest sessions (ties
    by name), or blank — any host — when none is live (embedded tests, a deployment before
    its first beat). Two sessions created at the same instant may land on the same host: the
    balance is approximate, never a lock every creation waits for. A draining host
    (``manage.py drain_host``) is skipped."""
    placeable = live_hosts().filter(draining=False)  # a draining host takes none
    chosen = with_session_counts(placeable).order_by("n_sessions", "name").first()
    return chosen.name if chosen else ""


def queue_for(host: str) -> str | None:
    """The queue for work of a session whose home is ``host``: the host's own while it is
    live; else None, the default queue (on today's shared volume any worker can take it)."""
    return mode.host_queue(host) if is_live(host) else None


def queue_for_session(session_id: str) -> str | None:
    host = Session.objects.filter(id=session_id).values_list("host", flat=True).first()
    return queue_for(host or "")
