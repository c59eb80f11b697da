"""The sweep every worker and the embedded server run: a session whose busy lease expired
belongs to a dead worker. Its run starts again (``lifecycle.begin`` takes it over and it
resumes) without waiting for the broker's visibility timeout, or — when that run had
already ended — the session goes on to its queued runs (``lifecycle.release_if_ended``).

The run is enqueued to its session's home host's queue while that host is live, else to the
default queue (``hosts.queue_for``): the run of a dead host goes to any live worker, which
re-homes the session when it begins it (sessions_app/rehome.py ``on_claim``: the worktree from
the central store). The idle sessions of dead hosts are re-homed by the same sweep
(``rehome.sweep_dead``), so that their next work goes to a live host's queue, and their clones
still to be made are sent again to a live host (``lost_clones.restart``)."""

from __future__ import annotations

import logging
import os
import threading
import time

from django.conf import settings
from django.db import connection
from django.utils import timezone

from sessions_app import hosts, lost_clones, rehome
from sessions_app.models import Session
from sessions_app.services import verify
from workspace import shared_checkouts

from .. import lifecycle
from ..models import Run
from . import runtime, unfinished

log = logging.getLogger(__name__)


def requeue_expired() -> list[str]:
    """Sessions whose busy lease expired belong to a dead worker: start the holder's run
    again (``begin`` takes it over and it resumes), or release the lock when the holder had
    already finished. A duplicate start is harmless (see ``lifecycle.begin``)."""
    requeued = []
    stale = Session.objects.filter(
        busy_run_id__isnull=False, lease_expires_at__lt=timezone.now()
    ).values_list("id", "busy_run_id")
    for session_id, run_id in stale:
        run = Run.objects.filter(id=run_id).only("status").first()
        if run is None or run.is_terminal:
            lifecycle.release_if_ended(session_id, run_id)
            continue
        runtime.enqueue(run_id)
        requeued.append(run_id)
    return requeued


def sweep_once() -> None:
    """One pass of the sweep (each part on its own: one that fails does not stop the rest)."""
    try:
        hosts.beat()  # first, so that a host is live from its start
    except Exception:
        log.exception("the host's heartbeat failed")
    try:
        requeued = requeue_expired()
        if requeued:
            log.warning("re-enqueued runs with expired leases: %s", requeued)
    except Exception:
        log.exception("stale-run sweep failed")
    try:
        moved = rehome.sweep_dead()  # the idle sessions of dead hosts, to live ones
        if moved:
            log.warning("re-homed sessions of dead hosts: %s", moved)
            lost = unfinished.lose_moved(moved)  # docs/semantics.md §16.5
            if lost:
                log.warning("%d tool call(s) lost with dead hosts' disks", lost)
        restarted = lost_clones.restart()  # their clones, sent again to the new home
        if restarted:
            log.warning("clones of dead hosts started again: %s", restarted)
    except Exception:
        log.exception("the re-homing of dead hosts' sessions failed")
    try:
        verify.verify_due()  # idle worktrees walked whole now and then (issue 43)
    except Exception:
        log.exception("the verifier's sweep failed")
    finally:
        connection.close()
    try:
        shared_checkouts.sweep_due()  # checkouts clones share, unused for days
    except Exception:
        log.exception("the sweep of shared checkouts failed")


_sweeper_pid = 0


def start_sweeper() -> None:
    """A daemon thread that beats for this process's worker host (``hosts.beat``: placement
    and routing read it) and runs ``requeue_expired`` every half lease, once per process, and
    the verifier of idle worktrees (``verify.verify_due``) and the sweep of the checkouts clones
    share (``shared_checkouts.sweep_due``)."""
    global _sweeper_pid
    if _sweeper_pid == os.getpid():
        return
    _sweeper_pid = os.getpid()

    def sweep() -> None:
        interval = max(1.0, settings.RUN_LEASE_SECONDS / 2)
        while True:
            sweep_once()
            time.sleep(interval)

    threading.Thread(target=sweep, name="stale-run-sweeper", daemon=True).start()
