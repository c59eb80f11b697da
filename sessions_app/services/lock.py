"""The session's two locks, and the one place that takes them.

* **The row lock**: ``SELECT … FOR UPDATE`` on the session row, held to the end of the
  transaction. Every change that must not interleave with a run starting, finishing or
  handing the session over takes it: ``lock_session`` (the run lifecycle, which decides for
  itself what a busy session means) or ``lock_idle_session`` (the history moves and the
  other writes that a running run forbids: 409).
* **The busy lock**: ``busy_run_id`` plus a lease, set by a conditional UPDATE (``claim``),
  renewed by the running loop (``renew``), released or passed on under the row lock
  (``hand_over``). A lease that expired belongs to a dead worker and may be taken over, so no
  busy lock outlives its holder by more than one lease.

**Lock order.** The session row first; then run rows; then messages and parts; then the
owner's user row (quotas). Nothing locks a run, message or user row and then the session
row, so two writers of one session never wait on each other in a cycle.

The row lock is ``FOR NO KEY UPDATE``: it excludes every other holder of it and every
UPDATE of the row, but not the ``KEY SHARE`` lock that inserting a message or part (a
foreign key to the session) takes. A checkpoint fences its run (the run row) and then
inserts its rows: with ``FOR UPDATE`` here, that insert waited for a ``begin`` or an end
holding the session row while they waited for the fenced run row — a deadlock.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone

from core import metrics
from core.compiled import Compiled, CompiledUpdate, update_of_shape
from core.errors import NotFoundError, SessionBusyError

from ..models import Session

# The lease of a run that waits for its owner's decision (``park``): no worker renews it, and
# it must not expire: the session stays held, hours or days, across restarts.
PARKED = datetime(9999, 1, 1, tzinfo=UTC)


def _lease_end():  # noqa: ANN202
    return timezone.now() + timedelta(seconds=settings.RUN_LEASE_SECONDS)


# Every run request, start and end locks its session: compiled once (core/compiled.py).
_LOCK = Compiled(
    lambda id: Session.objects.select_for_update(no_key=True).filter(id=id)[:1], id=str
)
_LOCK_OF_RUN = Compiled(
    lambda run_id: Session.objects.select_for_update(of=("self",), no_key=True).filter(
        runs__id=run_id
    )[:1],
    run_id=str,
)


def lock_session(session_id: str) -> Session:
    """The session row, locked until the transaction ends (call inside ``atomic``), busy or
    not: for the run lifecycle, which decides what a busy session means for its move."""
    with metrics.row_lock_wait():
        session = _LOCK.first(id=session_id)
    if session is None:
        raise NotFoundError("No such session.")
    return session


def lock_session_of_run(run_id: str) -> Session | None:
    """The session of the run ``run_id``, its row locked as ``lock_session`` locks it (one
    statement: only the session row is locked, the run's is read for the join); None when
    no such run exists."""
    with metrics.row_lock_wait():
        return _LOCK_OF_RUN.first(run_id=run_id)


def lock_idle_session(session_id: str, *, holder_run_id: str | None = None) -> Session:
    """The session row, locked until the transaction ends, with the guarantee that no run
    holds the session while the caller works (docs/semantics.md §1.4): a run in progress makes this
    a 409 ``SessionBusyError``. ``holder_run_id``: the run that holds the busy lock may pass
    (a run's own cleanup of a pending revert)."""
    session = lock_session(session_id)
    if is_busy(session) and session.busy_run_id != holder_run_id:
        raise SessionBusyError()
    return session


def is_busy(session: Session) -> bool:
    return bool(
        session.busy_run_id
        and session.lease_expires_at is not None
        and session.lease_expires_at > timezone.now()
    )


def _free(now: datetime) -> Q:
    return (
        Q(busy_run_id__isnull=True) | Q(lease_expires_at__isnull=True) | Q(lease_expires_at__lt=now)
    )


# Every run's start claims its session, every end hands it over: compiled once each.
_CLAIMED = ("busy_run_id", "status", "lease_expires_at")
_CLAIM = CompiledUpdate(
    lambda id, now, run_id: Session.objects.filter(id=id).filter(
        _free(now) | Q(busy_run_id=run_id)
    ),
    _CLAIMED,
    id=str,
    now=datetime,
    run_id=str,
)
_CLAIM_EXPIRED = CompiledUpdate(
    lambda id, now: Session.objects.filter(id=id).filter(_free(now)),
    _CLAIMED,
    id=str,
    now=datetime,
)
_HAND_OVER: dict = {}  # by the fields written


def claim(
    session_id: str, run_id: str, *, own_ok: bool = True, locked: Session | None = None
) -> bool:
    """Take the lock for ``run_id`` if it is free or expired, or (``own_ok``) already ours:
    the API claims it for a new run before the task starts. A re-delivered task of a run
    that was running passes ``own_ok=False``: it must wait for the old lease to expire.
    ``locked``, the row read under the row lock, follows the change."""
    values = {
        "busy_run_id": run_id,
        "status": Session.Status.BUSY,
        "lease_expires_at": _lease_end(),
    }
    now = timezone.now()
    if own_ok:
        claimed = _CLAIM.update(values, id=session_id, now=now, run_id=run_id)
    else:
        claimed = _CLAIM_EXPIRED.update(values, id=session_id, now=now)
    if claimed != 1:
        return False
    if locked is not None:
        for name, value in values.items():
            setattr(locked, name, value)
    return True


def renew(session_id: str, run_id: str) -> bool:
    """Extend our lease; False means the lock was taken over and the run must stop."""
    return (
        Session.objects.filter(id=session_id, busy_run_id=run_id).update(
            lease_expires_at=_lease_end()
        )
        == 1
    )


def end_lease(session_id: str, run_id: str) -> bool:
    """End ``run_id``'s lease now, the session still its own (busy): the sweep, or the next
    delivery of the run, takes it over at once (a worker that stops hands its runs on:
    runs_app/execution/drain.py). False when the run does not hold the session."""
    return (
        Session.objects.filter(id=session_id, busy_run_id=run_id).update(
            lease_expires_at=timezone.now()
        )
        == 1
    )


def renew_many(held: list[tuple[str, str]]) -> set[str]:
    """Extend the leases of many runs at once, ``held`` being (session id, run id) pairs:
    one UPDATE and one SELECT whatever their number. Returns the run ids that still hold
    their session; the others lost it (taken over) and must stop."""
    if not held:
        return set()
    sessions = [s for s, _ in held]
    runs = [r for _, r in held]
    mine = Session.objects.filter(id__in=sessions, busy_run_id__in=runs)
    mine.update(lease_expires_at=_lease_end())
    return set(mine.values_list("busy_run_id", flat=True))


def park(session_id: str, run_id: str) -> bool:
    """``run_id`` keeps the session while it waits for its owner (``waiting``), with a lease
    that never expires: no sweep takes it over, no worker holds it."""
    return (
        Session.objects.filter(id=session_id, busy_run_id=run_id).update(
            status=Session.Status.WAITING, lease_expires_at=PARKED
        )
        == 1
    )


def hand_over(
    session_id: str,
    run_id: str,
    next_run_id: str | None,
    locked: Session | None = None,
    *,
    also: dict | None = None,
) -> bool:
    """Release ``run_id``'s lock, to ``next_run_id`` when one waits. Call in a transaction
    that holds the session row (``select_for_update``), so an enqueue cannot slip between
    the check for waiting runs and the release; ``locked``, that row, follows the change.
    ``also``: other fields of the row to write in the same UPDATE (the ending run's usage)."""
    # ``updated_at`` too: the session published after this is a newer version of it (the
    # chat sets aside a ``session.updated`` older than the one it holds).
    if next_run_id:
        values = {
            "busy_run_id": next_run_id,
            "lease_expires_at": _lease_end(),
            "updated_at": timezone.now(),
        }
    else:
        values = {
            "busy_run_id": None,
            "lease_expires_at": None,
            "status": Session.Status.IDLE,
            "updated_at": timezone.now(),
        }
    values.update(also or {})
    update = update_of_shape(
        _HAND_OVER,
        tuple(values),
        lambda: CompiledUpdate(
            lambda id, run_id: Session.objects.filter(id=id, busy_run_id=run_id),
            tuple(values),
            id=str,
            run_id=str,
        ),
    )
    if not update.update(values, id=session_id, run_id=run_id):
        return False
    if locked is not None:
        for name, value in values.items():
            setattr(locked, name, value)
    return True


# -- a prepare job's hold (sessions_app/repositories: a clone fills a new session) ------------
def hold_for_job(session: Session, job: str, seconds: float) -> None:
    """In the transaction that creates ``session``: it is ``preparing``, held by ``job`` with
    a lease of ``seconds`` (longer than the job may take), so no run and no history move
    starts while the job fills its worktree. ``session`` follows the change."""
    Session.objects.filter(id=session.id).update(
        status=Session.Status.PREPARING,
        busy_run_id=job,
        lease_expires_at=timezone.now() + timedelta(seconds=seconds),
    )
    session.status, session.busy_run_id = Session.Status.PREPARING, job


def preparing_message(session: Session) -> str:
    """What a run or a move refused by a ``preparing`` session is told: a fork's job (made
    on another host, issue 45) prepares its files, a clone clones them."""
    doing = "prepared" if session.forked_from_session_id else "cloned"
    return f"The session's repository is still being {doing}."


def move_job(session_id: str, job: str, old: str, new: str, seconds: float) -> bool:
    """A prepare job's hold, its home host dead, moved to host ``new`` with its lease renewed
    for ``seconds``: only while the row is still ``old``'s and held by ``job`` (a
    compare-and-set: a claim or a drain that moved it in between wins)."""
    held = Session.objects.filter(id=session_id, host=old, busy_run_id=job)
    return bool(held.update(host=new, lease_expires_at=timezone.now() + timedelta(seconds=seconds)))


def held_by(session_id: str, job: str) -> bool:
    """Whether ``job`` still holds the session (not deleted, not taken over)."""
    return Session.objects.filter(id=session_id, busy_run_id=job).exists()


def release_job(session_id: str, job: str, locked: Session | None = None, **also: object) -> bool:
    """``job`` lets the session go (idle, no holder, no lease), only while it still holds
    it; ``also``: other fields written in the same UPDATE. ``locked``, the row, follows the
    change. False when the job no longer holds the session."""
    values = {"status": Session.Status.IDLE, "busy_run_id": None, "lease_expires_at": None}
    values.update(also)
    if Session.objects.filter(id=session_id, busy_run_id=job).update(**values) != 1:
        return False
    if locked is not None:
        for name, value in values.items():
            setattr(locked, name, value)
    return True
