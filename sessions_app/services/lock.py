"""The per-session busy lock: a conditional UPDATE on the session row with a lease.

A run holds the session while ``busy_run_id`` names it and its lease has not expired; the
loop renews the lease. A lease that expired belongs to a dead worker and may be taken over,
so no lock outlives its holder by more than one lease.
"""

from __future__ import annotations

from datetime import timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from ..models import Session


def _lease_end():  # noqa: ANN202
    return timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)


def is_busy(session: Session) -> bool:
    return bool(
        session.busy_run_id
        and session.lease_expires_at is not None
        and session.lease_expires_at > timezone.now()
    )


def claim(session_id: str, run_id: str, *, own_ok: bool = True) -> bool:
    """Take the lock for ``run_id`` if it is free or expired, or (``own_ok``) already ours:
    the API claims it for a new run before the task starts. A re-delivered task of a run
    that was running passes ``own_ok=False``: it must wait for the old lease to expire."""
    now = timezone.now()
    free = (
        Q(busy_run_id__isnull=True) | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    )
    if own_ok:
        free |= Q(busy_run_id=run_id)
    taken = (
        Session.objects.filter(id=session_id)
        .filter(free)
        .update(busy_run_id=run_id, status=Session.Status.BUSY, lease_expires_at=_lease_end())
    )
    return taken == 1


def renew(session_id: str, run_id: str) -> bool:
    """Extend our lease; False means the lock was taken over and the run must stop."""
    return (
        Session.objects.filter(id=session_id, busy_run_id=run_id).update(
            lease_expires_at=_lease_end()
        )
        == 1
    )


def hand_over(session_id: str, run_id: str, next_run_id: str | None) -> bool:
    """Release ``run_id``'s lock, to ``next_run_id`` when one waits. Call in a transaction
    that holds the session row (``select_for_update``), so an enqueue cannot slip between
    the check for waiting runs and the release."""
    if next_run_id:
        values = {"busy_run_id": next_run_id, "lease_expires_at": _lease_end()}
    else:
        values = {
            "busy_run_id": None,
            "lease_expires_at": None,
            "status": Session.Status.IDLE,
        }
    return Session.objects.filter(id=session_id, busy_run_id=run_id).update(**values) == 1
