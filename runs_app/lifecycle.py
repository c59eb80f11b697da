"""A run's states and the moves between them, in one place.

::

    (request) ──admit──▶ pending ──begin──▶ running ──finish──▶ completed | cancelled | error
                  │         │  ▲               ▲  │
                  │         │  └──── resume ───┼──┴─park─▶ requires_action ──cancel_waiting─▶
                  │         │     (decided)    │           (waits for the owner)   cancelled
                  │         └─finish_unstarted─┼──▶ cancelled (aborted before it started)
                  └─ 409 (reject)              └── begin again once its lease expired
                                                   (its worker died: ``sweeper.py``)

* ``admit`` saves a requested run and gives it the session's busy lock, or queues it behind
  the run that holds the session (``enqueue`` / ``interrupt`` / ``rollback``), or refuses
  (``reject``: 409).
* ``begin`` is the first thing an execution of a run does: exactly one delivery moves a run
  from ``pending`` to ``running``; a run that was ``running`` is taken over only once the
  lease of the worker that ran it has expired.
* ``finish`` and ``finish_unstarted`` record the end and **hand the session over**: to the
  oldest queued run, or back to idle, inside the transaction that holds the session row, so
  a run queued at that moment is never left behind a released lock.
* ``park`` stops a run before tool calls that wait for the owner (docs/semantics.md §8.2): the run
  is ``requires_action``, the session ``waiting`` with a lease that never expires, no worker
  holds anything; ``resume_decided`` makes it pending again once every call is decided;
  ``cancel_waiting`` ends it (the waiting calls interrupted) and hands the session over.
* ``end_abandoned`` ends a run whose worker is gone, closing what its execution left
  unfinished (``unfinished.py``); the sweep (``sweeper.py``) starts again the runs whose
  worker died and hands on a session whose holder ended (``release_if_ended``).

Every change of a run's ``status`` goes through ``move`` and the table ``MOVES`` below: a
conditional UPDATE, refused with ``MoveNotAllowed`` for a pair the table does not hold
(tests/test_structure.py: no other module writes ``status``). ``begin`` and ``end_abandoned``
start a new lease epoch, ``finish``/``park`` are fenced by the epoch of the execution that
calls them (runs_app/execution/fencing.py): a worker that lost its run cannot end it.

The engine runs steps between ``begin`` and ``finish``; services call ``admit``,
``restart`` and ``finish_unstarted``. Events and task enqueues leave after commit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import F, QuerySet
from django.utils import timezone

from core import metrics, models_catalog
from core.compiled import Compiled, CompiledInsert, CompiledUpdate, update_of_shape
from core.errors import SessionBusyError
from quotas_app import services as quotas
from realtime import events
from sessions_app.models import Part, Session
from sessions_app.selectors import session_data
from sessions_app.services import lock

from .execution import runtime, unfinished
from .execution.fencing import LeaseLost
from .models import Run
from .selectors import active_runs, held_by_another, run_data, run_row

log = logging.getLogger(__name__)

QUEUED_STRATEGIES = ("enqueue", "interrupt", "rollback")
STRATEGIES = ("reject", *QUEUED_STRATEGIES)

S = Run.Status
# (from, to) → the function of this module that makes that move. Nothing else changes a
# run's status; ``move`` refuses any other pair.
MOVES: dict[tuple[str, str], str] = {
    (S.PENDING, S.RUNNING): "begin",
    (S.PENDING, S.CANCELLED): "finish_unstarted",
    (S.PENDING, S.ERROR): "finish_unstarted",
    (S.RUNNING, S.COMPLETED): "finish",
    (S.RUNNING, S.CANCELLED): "finish, end_abandoned",
    (S.RUNNING, S.ERROR): "finish, end_abandoned",
    (S.RUNNING, S.REQUIRES_ACTION): "park",
    (S.REQUIRES_ACTION, S.PENDING): "resume_decided",
    (S.REQUIRES_ACTION, S.CANCELLED): "cancel_waiting",
    # Continue/regenerate in place: a run that ended without completing goes on, same id.
    (S.CANCELLED, S.PENDING): "restart",
    (S.ERROR, S.PENDING): "restart",
}
RESTARTABLE = (S.CANCELLED, S.ERROR)


_Shape = tuple[tuple[str, ...], bool, bool, bool, tuple[str, ...]]  # sources, filters, fields
_MOVES: dict[_Shape, CompiledUpdate] = {}  # ``move``'s UPDATE of each shape, compiled once
_INSERT_RUN = CompiledInsert(Run)
_QUEUED = Compiled(  # the oldest run queued behind another: every end asks
    lambda session_id, run_id: (
        Run.objects.filter(
            session_id=session_id, status=S.PENDING, multitask_strategy__in=QUEUED_STRATEGIES
        )
        .exclude(id=run_id)
        .order_by("id")
        .values_list("id", "created_at")[:1]
    ),
    session_id=str,
    run_id=str,
)


class MoveNotAllowed(Exception):
    """A status change the table ``MOVES`` does not hold: a bug, never user input."""


def move(
    run_id: str,
    from_: str | tuple[str, ...],
    to: str,
    *,
    new_epoch: bool = False,
    epoch: int | None = None,
    unless_aborted: bool = False,
    **fields: object,
) -> int:
    """Move ``run_id`` from ``from_`` (one state or several) to ``to``, with ``fields``, in one
    conditional UPDATE (compiled once for each shape); the number of rows moved (0: it was
    not in ``from_`` any more, or — given ``epoch`` — another execution owns it: the UPDATE
    is its own fence). ``new_epoch``: the move starts a new execution (or ends the abandoned
    one): a fenced write of the old execution in flight commits first, every later one is
    refused (fencing.py)."""
    sources = (from_,) if isinstance(from_, str) else tuple(from_)
    for source in sources:
        if (source, to) not in MOVES:
            raise MoveNotAllowed(f"{source} → {to}")
    values = {"status": to, **fields}
    shape = (sources, epoch is not None, unless_aborted, new_epoch, tuple(values))
    keys = {"id": run_id} if epoch is None else {"id": run_id, "epoch": epoch}
    return update_of_shape(_MOVES, shape, lambda: _move_update(shape)).update(values, **keys)


def _move_update(shape: _Shape) -> CompiledUpdate:
    """``move``'s UPDATE of one shape (its sources, filters and fields), compiled once."""
    sources, fenced, unless_aborted, new_epoch, names = shape

    def rows(id: str, epoch: int = 0) -> QuerySet[Run]:
        found = Run.objects.filter(id=id, status__in=sources)
        found = found.filter(lease_epoch=epoch) if fenced else found
        return found.filter(abort_requested=False) if unless_aborted else found

    fixed = {"lease_epoch": F("lease_epoch") + 1} if new_epoch else {}
    return CompiledUpdate(rows, names, fixed=fixed, id=str, **({"epoch": int} if fenced else {}))


def admit(locked: Session, run: Run, *, defer_enqueue: bool = False) -> Run:
    """Inside the transaction that holds the session row (``lock.lock_session``): save
    ``run`` and take the busy lock for it, or queue it behind the holder
    (``enqueue``/``interrupt``/``rollback``), or refuse (``reject``: 409, nothing saved; a
    run limit of the owner's quota: 429, nothing saved — ``quotas_app.services.admit_run``,
    which locks the owner's row after the session's)."""
    strategy = run.multitask_strategy
    busy = held_by_another(locked, run.id)
    if busy and locked.status == Session.Status.PREPARING:
        # A clone or a fork's job fills the worktree: no run queued, interrupted or started.
        raise SessionBusyError(lock.preparing_message(locked))
    if busy and strategy not in QUEUED_STRATEGIES:
        raise SessionBusyError()
    if busy and strategy in ("interrupt", "rollback"):
        run.interrupted_run_id = locked.busy_run_id
    quotas.admit_run(
        user_id=locked.owner_id,
        run_id=run.id,
        active_runs=lambda: active_runs(locked.owner_id, run.id),
    )
    if run._state.adding:
        _INSERT_RUN.insert([run])
    else:  # continued in place (``restart``)
        run.save()
    waiting = False
    if busy and run.interrupted_run_id:
        waiting = Run.objects.filter(id=run.interrupted_run_id, status=S.REQUIRES_ACTION).exists()
    if waiting:
        # The holder waits for its owner: nothing runs to be stopped. Its waiting calls are
        # interrupted (docs/semantics.md §8.4), the session passes to the oldest queued run (this or
        # earlier).
        cancel_waiting(Run.objects.get(id=run.interrupted_run_id), reason="prompt")
    elif busy:
        if run.interrupted_run_id:
            # The holder stops at its next check and hands the session to the oldest
            # queued run; with "rollback" that run first moves the head back (engine).
            Run.objects.filter(id=run.interrupted_run_id).update(abort_requested=True)
            stopped = run.interrupted_run_id
            transaction.on_commit(lambda: runtime.abort_bus().notify(stopped))
    else:
        if not lock.claim(locked.id, run.id, locked=locked):
            raise SessionBusyError()
        metrics.observe_busy_wait((timezone.now() - run.created_at).total_seconds())
        if not defer_enqueue:
            runtime.enqueue_on_commit(run.id)
        events.publish_on_commit(locked.id, events.SESSION_STATUS, status="busy", run_id=run.id)
    events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


@dataclass(frozen=True)
class Begun:
    """What ``begin`` decided: the run to execute now, nothing (None), or ``retry`` later."""

    run: Run | None
    retry: bool = False


def begin(run_id: str) -> Begun:
    """Start (or take over) ``run_id``. Safe to call twice for one run: a finished run is
    skipped, a duplicate delivery of a pending run stops here, and a run that was running is
    taken over only once its lease has expired.

    Everything is decided under the session row lock, on rows read under it: every other
    change of a run's status or of the session's holder takes that lock too, so nothing
    moves between a check here and the change it allows. (Decided on earlier reads, a
    delivery stopped between two statements — its worker SIGSTOPped, its connection slow —
    handed the session of a run that had just parked to the next queued run, which then ran
    beside it: found by the chaos test.)"""
    with transaction.atomic():
        locked = lock.lock_session_of_run(run_id)
        run = run_row(run_id) if locked is not None else None
        if run is None or run.is_terminal or run.status == Run.Status.REQUIRES_ACTION:
            return Begun(None)  # ended, or waiting for its owner: the decision enqueues it
        if run.status == Run.Status.PENDING:
            if not _start(locked, run):
                return Begun(None)
        else:
            refused = _take_over(locked, run)
            if refused is not None:
                return refused
    run.session = locked  # as written under the lock (a fresh read: one more statement)
    return Begun(run)


def _start(locked: Session, run: Run) -> bool:
    """Under the session row lock: a pending run starts, if the session is free or its own."""
    if run.abort_requested:
        finish_unstarted(run)
        return False
    if held_by_another(locked, run.id) or not lock.claim(locked.id, run.id, locked=locked):
        return False  # queued behind another run: the hand-over enqueues it
    now = timezone.now()
    started = move(
        run.id,
        Run.Status.PENDING,
        Run.Status.RUNNING,
        new_epoch=True,
        unless_aborted=True,
        started_at=now,
        attempts=1,
        host=settings.WORKER_HOST,
    )
    if not started:  # a cancel sets its flag without the session row: it came in between
        finish_unstarted(run)
        return False
    run.status, run.started_at, run.attempts = Run.Status.RUNNING, now, 1
    run.lease_epoch += 1  # every epoch moves under the session row lock: this is it
    return True


def _take_over(locked: Session, run: Run) -> Begun | None:
    """Under the session row lock: a ``running`` run whose worker died (its lease expired) is
    taken over (None: go on), or ended; a live lease means another worker may still run it
    (retry later)."""
    if locked.busy_run_id not in (None, run.id):
        # Running without holding its session: no move leaves that state (an end hands the
        # session over in the transaction that records it), but should a run be found so, it
        # must not run beside the holder. It ends; what it saved is kept.
        log.error("run %s is running without its session %s", run.id, locked.id)
        end_abandoned(
            run, Run.Status.ERROR, error=unfinished.crashed_error(run.attempts), claimed=True
        )
        return Begun(None)
    if lock.is_busy(locked) or not lock.claim(locked.id, run.id, own_ok=False, locked=locked):
        log.info("run %s: session %s is still held", run.id, locked.id)
        return Begun(None, retry=True)
    # The lock is ours now, and no execution of the run is alive: a cancel asked of it ends
    # it here (its worker is gone), and so does a run that crashed at every attempt since
    # it last started — the same input would crash it again, forever.
    if run.abort_requested:
        end_abandoned(run, Run.Status.CANCELLED, claimed=True)
        return Begun(None)
    if run.attempts >= settings.RUN_MAX_ATTEMPTS:
        end_abandoned(
            run, Run.Status.ERROR, error=unfinished.crashed_error(run.attempts), claimed=True
        )
        return Begun(None)
    # Not a move: running stays running (its status cannot change under this lock), under a
    # new epoch — the old execution, if it is only stopped and not dead, is fenced out.
    Run.objects.filter(id=run.id).update(
        attempts=F("attempts") + 1,
        lease_epoch=F("lease_epoch") + 1,
        host=settings.WORKER_HOST,
    )
    run.attempts += 1
    run.lease_epoch += 1
    return None


def end_abandoned(
    run: Run, status: str, *, error: dict | None = None, claimed: bool = False
) -> bool:
    """End a ``running`` run that no execution holds — its lease expired, or ``claimed``:
    ``begin`` has just taken the expired lock for it — and hand the session over: the way out
    of a run whose worker is gone. An ``error`` also ends the run's unfinished tool calls
    (interrupted, as after an abort) and its unfinished message, so that a resume does not
    call again what crashed every attempt; a cancelled run stays resumable as after any
    cancel (docs/semantics.md §1.6). False when a live execution holds it (it stops soon)."""
    # Files this host lacks made first (docs/semantics.md §16.5); what the open step did to
    # them found before the row lock (git must not hold the row every start and end needs).
    lost = unfinished.claim_for_abandon(run.session)
    closing = unfinished.open_step_parts(run, run.session)
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        if locked.busy_run_id == run.id and lock.is_busy(locked) and not claimed:
            return False
        # A new epoch: an execution that was only stopped, not dead, writes nothing more.
        updated = move(
            run.id,
            Run.Status.RUNNING,
            status,
            new_epoch=True,
            error=error,
            finished_at=timezone.now(),
        )
        run.refresh_from_db()
        if not updated:
            return False
        unfinished.close_open_step(run, locked, closing, lost=lost)
        if status == Run.Status.ERROR:
            unfinished.end_crashed_calls(run, error or {})
        if locked.busy_run_id == run.id:
            _hand_over(locked.id, run.id, locked)
        events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    return True


def _usage(locked: Session, added: dict | None) -> dict:
    """What a run's execution used (``added``), to the session's sum: the field to write."""
    return {"usage": models_catalog.add_usage(locked.usage or {}, added)} if added else {}


def _write_session(session_id: str, locked: Session | None, fields: dict) -> None:
    """Under the session row lock: ``fields`` of the row written (and ``locked``'s)."""
    if fields:
        fields = {**fields, "updated_at": timezone.now()}
        Session.objects.filter(id=session_id).update(**fields)
        for name, value in fields.items() if locked is not None else ():
            setattr(locked, name, value)


def finish(
    run: Run,
    status: str,
    *,
    epoch: int,
    usage_added: dict | None = None,
    rows: Callable[[], dict] | None = None,
) -> None:
    """Record the end (``status``, ``run``'s fields) of a run by its execution of ``epoch`` and
    hand the session over, ``usage_added`` to its sum; ``rows()`` first writes the last rows
    under the session row lock (``Checkpointer.flush(ending=True)``) and says the session's
    fields to write with the hand-over (its head). ``LeaseLost``: nothing written."""
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        fields = {**(rows() if rows is not None else {}), **_usage(locked, usage_added)}
        moved = move(
            run.id,
            Run.Status.RUNNING,
            status,
            epoch=epoch,
            error=run.error,
            finished_at=run.finished_at,
            usage=run.usage,
            result=run.result,
            output=run.output,
        )
        if not moved:
            raise LeaseLost(run.id)
        run.status = status
        _hand_over(run.session_id, run.id, locked, also=fields)
        events.publish_on_commit(run.session_id, events.RUN_UPDATED, run=run_data(run))
        # The row read under the lock, with this transaction's changes on it: as it commits.
        events.publish_on_commit(
            run.session_id, events.SESSION_UPDATED, session=session_data(locked)
        )


def park(run: Run, *, epoch: int, usage_added: dict | None = None) -> None:
    """Record that ``run`` waits for its owner's decisions (its rows already written by its
    execution begun under ``epoch``; ``LeaseLost`` when that one does not own it any more)."""
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        if not move(run.id, S.RUNNING, S.REQUIRES_ACTION, epoch=epoch, usage=run.usage):
            raise LeaseLost(run.id)
        _write_session(locked.id, locked, _usage(locked, usage_added))
        run.status = Run.Status.REQUIRES_ACTION
        lock.park(run.session_id, run.id)
        data = run_data(run)
        events.publish_on_commit(run.session_id, events.RUN_UPDATED, run=data)
        events.publish_on_commit(run.session_id, events.RUN_REQUIRES_ACTION, run=data)
        events.publish_on_commit(
            run.session_id, events.SESSION_STATUS, status="waiting", run_id=run.id
        )


def resume_decided(locked: Session, run: Run) -> None:
    """Under the session row lock: every waiting call of ``run`` is decided; it runs on
    (pending, the session busy again under a fresh lease, a task enqueued after commit)."""
    move(run.id, Run.Status.REQUIRES_ACTION, Run.Status.PENDING)
    run.status = Run.Status.PENDING
    lock.claim(locked.id, run.id, locked=locked)
    runtime.enqueue_on_commit(run.id)
    events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    events.publish_on_commit(locked.id, events.SESSION_STATUS, status="busy", run_id=run.id)


def cancel_waiting(run: Run, *, reason: str = "cancelled") -> Run:
    """End a run waiting for its owner: undecided calls interrupted, the session handed over."""
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        updated = move(
            run.id, Run.Status.REQUIRES_ACTION, Run.Status.CANCELLED, finished_at=timezone.now()
        )
        run.refresh_from_db()
        if not updated:
            return run
        waiting = Part.objects.filter(  # the parked batch: undecided and decided-not-run
            session_id=run.session_id,
            type=Part.Type.TOOL,
            state__status="pending",
            state__has_key="approval",
        )
        unfinished.interrupt_calls(run.session_id, waiting, reason)
        if locked.busy_run_id == run.id:
            _hand_over(locked.id, run.id)
        events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


def finish_unstarted(run: Run, status: str = Run.Status.CANCELLED) -> Run:
    """End a run that never started, handing the session on if it held it."""
    with transaction.atomic():
        locked = lock.lock_session(run.session_id)
        updated = move(run.id, Run.Status.PENDING, status, finished_at=timezone.now())
        run.refresh_from_db()
        if updated and locked.busy_run_id == run.id:
            _hand_over(locked.id, run.id)
        events.publish_on_commit(locked.id, events.RUN_UPDATED, run=run_data(run))
    return run


def restart(locked: Session, run: Run, **fields: object) -> Run:
    """Under the session row lock: ``run``, ended without completing (cancelled, error), goes
    on in place — the same id back to ``pending`` with ``fields`` (its new branch…), admitted
    as a new request would be (``admit``)."""
    fields = {
        "abort_requested": False,
        "error": None,
        "result": None,
        "finished_at": None,
        **fields,
    }
    if not move(run.id, RESTARTABLE, Run.Status.PENDING, **fields):
        raise MoveNotAllowed(f"{run.id} is not {' or '.join(RESTARTABLE)}")
    run.refresh_from_db()
    return admit(locked, run)


def _hand_over(
    session_id: str, run_id: str, locked: Session | None = None, *, also: dict | None = None
) -> str | None:
    """Under the session row lock: pass the busy lock from ``run_id`` to the oldest queued
    run (enqueued after commit), or release it (``session.status`` idle), with the fields
    ``also`` (the ending run's head and usage) in the same UPDATE (or alone: nothing to
    hand over). ``locked``, the row read under that lock, follows the change."""
    queued = next(iter(_QUEUED.rows(session_id=session_id, run_id=run_id)), None)
    next_run = queued[0] if queued else None
    if not lock.hand_over(session_id, run_id, next_run, locked, also=also):
        _write_session(session_id, locked, also or {})
    if queued:
        metrics.observe_busy_wait((timezone.now() - queued[1]).total_seconds())
        runtime.enqueue_on_commit(queued[0])
        events.publish_on_commit(session_id, events.SESSION_STATUS, status="busy", run_id=next_run)
    else:
        events.publish_on_commit(session_id, events.SESSION_STATUS, status="idle", run_id=None)
    return next_run


def release_if_ended(session_id: str, run_id: str) -> None:
    """The sweep found the lease of ``run_id``, an ended run, expired: under the session row
    lock the session goes to the oldest queued run, or idle — unless ``run_id`` no longer
    holds it, or holds it alive again (continued in place by ``restart``: pending)."""
    with transaction.atomic():
        locked = lock.lock_session(session_id)
        # Read again under the lock: the sweep's read came before it.
        alive = Run.objects.filter(id=run_id).exclude(status__in=Run.TERMINAL)
        if locked.busy_run_id == run_id and not alive.exists():
            _hand_over(session_id, run_id, locked)
