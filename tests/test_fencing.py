"""One writer per run (issue 25, docs/semantics.md §12): every write of an execution is conditional
on the lease epoch it began under, and the keeper renews leases on a thread nothing else uses.

Each test here fails on the code before fencing: there a stale execution's checkpoint, its
streamed text and its end were written whatever had happened meanwhile, and the keeper's
renewals queued behind the database threads the runs' git and checkpoints use."""

from __future__ import annotations

import asyncio
import threading
import time
from datetime import timedelta

import pytest
from django.db import connection, transaction
from django.utils import timezone

from runs_app import lifecycle
from runs_app.checkpoint import Checkpointer, write_streamed_texts
from runs_app.execution.fencing import LeaseLost, fence
from runs_app.execution.host import host
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.models import Message, Part, Session
from sessions_app.services import lock
from workspace import worktree_files

from .conftest import submitted, wait_until
from .support.waits import backend_pid, blocked_by

pytestmark = pytest.mark.django_db(transaction=True)


def _running(owner, script: str = "say hi") -> Run:
    run = submitted(owner, script)
    begun = lifecycle.begin(run.id)
    assert begun.run is not None and begun.run.status == Run.Status.RUNNING
    return begun.run


def _take_over(run: Run) -> Run:
    """What the sweep does once the lease of ``run``'s worker lapsed: another execution."""
    Session.objects.filter(id=run.session_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    begun = lifecycle.begin(run.id)
    assert begun.run is not None, "taken over"
    return begun.run


def _message(run: Run) -> Message:
    message = Message(session_id=run.session_id, run_id=run.id, role="assistant")
    message.loaded_parts = []
    return message


def _stored_message(run: Run, kind: str, text: str) -> tuple[Checkpointer, Message, Part]:
    """The run's writer, and a message of it with one part, stored by a first checkpoint."""
    writer = Checkpointer(run.session_id, run_id=run.id, epoch=run.lease_epoch)
    message = _message(run)
    part = Part(message_id=message.id, session_id=run.session_id, order=0, type=kind, text=text)
    writer.add(message)
    writer.add(part)
    writer.flush()
    return writer, message, part


def test_each_execution_begins_under_a_new_epoch(owner):
    run = _running(owner)
    assert run.lease_epoch == 1
    assert _take_over(run).lease_epoch == 2


def test_a_stale_execution_writes_nothing(owner):
    run = _running(owner)
    stale = Checkpointer(run.session_id, run_id=run.id, epoch=run.lease_epoch)
    fresh_run = _take_over(run)
    fresh = Checkpointer(run.session_id, run_id=run.id, epoch=fresh_run.lease_epoch)

    # A checkpoint of the stale execution: refused whole, the head unmoved.
    head_before = Session.objects.get(id=run.session_id).head_id
    message = _message(run)
    stale.add(message)
    stale.set_head(message.id)
    with pytest.raises(LeaseLost):
        stale.flush()
    assert not Message.objects.filter(id=message.id).exists()
    assert Session.objects.get(id=run.session_id).head_id == head_before

    # The owner's checkpoint goes through.
    mine = _message(run)
    fresh.add(mine)
    part = Part(message_id=mine.id, session_id=run.session_id, order=0, type="text", text="a")
    fresh.add(part)
    fresh.flush()
    assert Part.objects.get(id=part.id).text == "a"

    # Streamed text: the stale execution's is left out (and it is told it lost the run).
    lost = write_streamed_texts([(part.id, "stale text", run.id, run.lease_epoch)])
    assert lost == {run.id}
    assert Part.objects.get(id=part.id).text == "a"
    assert write_streamed_texts([(part.id, "ab", run.id, fresh_run.lease_epoch)]) == set()
    assert Part.objects.get(id=part.id).text == "ab"

    # Its end and its park: refused, nothing handed over.
    run.finished_at = timezone.now()
    with pytest.raises(LeaseLost):
        lifecycle.finish(run, Run.Status.COMPLETED, epoch=run.lease_epoch)
    with pytest.raises(LeaseLost):
        lifecycle.park(run, epoch=run.lease_epoch)
    stored = Run.objects.get(id=run.id)
    assert stored.status == Run.Status.RUNNING
    assert Session.objects.get(id=run.session_id).busy_run_id == run.id

    # The owner ends it.
    fresh_run.finished_at = timezone.now()
    lifecycle.finish(fresh_run, Run.Status.COMPLETED, epoch=fresh_run.lease_epoch)
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    assert Session.objects.get(id=run.session_id).busy_run_id is None


def test_an_execution_ended_as_abandoned_cannot_write_after(owner):
    """A cancel of a run whose lease lapsed ends it (``end_abandoned``): its worker, only
    stopped, may wake up — its writes are refused from then on."""
    run = _running(owner)
    Session.objects.filter(id=run.session_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert lifecycle.end_abandoned(run, Run.Status.CANCELLED)
    stale = Checkpointer(run.session_id, run_id=run.id, epoch=1)
    stale.add(_message(run))
    with pytest.raises(LeaseLost):
        stale.flush()


def test_a_takeover_waits_for_a_fenced_write_in_flight(owner):
    """``begin`` of a new execution waits for the old one's fenced transaction to commit:
    the new one then reads everything the old one wrote, and the old one's next write is
    refused. No write lands after the new execution began. The wait is observed where it
    happens: PostgreSQL's lock table shows the new execution's backend waiting for the old
    one's (a thread merely still running after a while proves nothing on a loaded machine)."""
    run = _running(owner)
    Session.objects.filter(id=run.session_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    fenced, release = threading.Event(), threading.Event()
    pids: dict[str, int] = {}
    begun_at, committed_at = [0.0], [0.0]

    def old_execution() -> None:
        try:
            pids["old"] = backend_pid()
            with transaction.atomic():
                fence(run.id, 1)
                fenced.set()
                release.wait(20)
                Message.objects.create(session_id=run.session_id, run_id=run.id, role="assistant")
                # The last moment before the commit: ``begin`` cannot pass it. (Read after the
                # block, the clock could come after a ``begin`` the commit let through.)
                committed_at[0] = time.monotonic()
        finally:
            connection.close()

    def new_execution() -> None:
        try:
            pids["new"] = backend_pid()
            lifecycle.begin(run.id)
            begun_at[0] = time.monotonic()
        finally:
            connection.close()

    old = threading.Thread(target=old_execution)
    old.start()
    assert fenced.wait(10)
    new = threading.Thread(target=new_execution)
    new.start()

    def begin_waits() -> bool | str:
        if not new.is_alive():
            return "begun"  # it went through the fenced transaction: the bug
        return "new" in pids and pids["new"] in blocked_by(pids["old"])

    try:
        waits = wait_until(begin_waits, timeout=15, what="begin to wait for the fenced write")
        assert waits is True, "begin went through while a fenced transaction was open"
    finally:
        release.set()
        old.join(10)
        new.join(10)
    assert begun_at[0] >= committed_at[0] > 0
    assert Run.objects.get(id=run.id).lease_epoch == 2
    with transaction.atomic(), pytest.raises(LeaseLost):
        fence(run.id, 1)


def test_the_keeper_renews_while_every_database_thread_is_busy(owner, settings, monkeypatch):
    """A slow git (or a burst of checkpoints) holding every database thread of the host must
    not delay a renewal: the keeper has a thread of its own. On the old code the renewals
    queued behind them and the lease lapsed under a live run. Asserted as the fact itself: a
    renewal is made, and the lease extended, while every database thread is held (by calls
    that end only when the test says so)."""
    settings.RUN_LEASE_SECONDS = 1.5
    held, release, renewed = threading.Event(), threading.Event(), threading.Event()
    original, entered, guard = lock.renew_many, [], threading.Lock()

    def spied(pairs):  # noqa: ANN001, ANN202
        if held.is_set() and not release.is_set():
            renewed.set()
        return original(pairs)

    monkeypatch.setattr(lock, "renew_many", spied)
    run = submitted(owner, "wait 1\nsay done")
    loop = host.ensure()
    begun = host.submit(run.id)
    wait_until(lambda: run.id in host.runs, what="the run live on the host")
    threads = host.threads.db._max_workers  # noqa: SLF001

    def occupy() -> None:  # what a slow `git add` does to a database thread
        with guard:
            entered.append(threading.get_ident())
        release.wait(30)

    busy = [asyncio.run_coroutine_threadsafe(host.blocking(occupy), loop) for _ in range(threads)]
    try:
        wait_until(lambda: len(entered) == threads, what="every database thread held")
        lease_then = Session.objects.get(id=run.session_id).lease_expires_at
        held.set()
        assert renewed.wait(10), "no renewal while the database threads were busy"
        lease = wait_until(
            lambda: (
                (e := Session.objects.get(id=run.session_id).lease_expires_at) > lease_then and e
            ),
            what="the lease extended",
        )
        assert lease > timezone.now(), "the lease lapsed while the database threads were busy"
        assert run.id in host.runs and not host.runs[run.id].lost.is_set()
    finally:
        release.set()
        for future in busy:
            future.result(timeout=10)
    begun.finished.result(timeout=30)
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED


def test_a_run_whose_lease_cannot_be_renewed_stops_before_it_lapses(owner, settings, monkeypatch):
    """A renewal that hangs (the database unreachable, the process starved) must stop the
    run while its lease still holds, not after another worker may have taken it."""
    settings.RUN_LEASE_SECONDS = 2.0
    hung, release, returned = threading.Event(), threading.Event(), threading.Event()
    original = lock.renew_many

    def hanging(held):  # noqa: ANN001, ANN202
        hung.set()
        release.wait(30)  # hangs until the test has seen the run stop
        try:
            return original(held)
        finally:
            returned.set()

    monkeypatch.setattr(lock, "renew_many", hanging)
    run = submitted(owner, "wait 5\nsay done")
    began = time.monotonic()
    begun = host.submit(run.id)
    try:
        control = wait_until(lambda: host.runs.get(run.id), what="the run live on the host")
        wait_until(control.lost.is_set, timeout=10, what="the run stopped")
        stopped_after = time.monotonic() - began
        begun.finished.result(timeout=30)
    finally:
        monkeypatch.setattr(lock, "renew_many", original)
        release.set()
    assert hung.is_set()
    assert stopped_after < settings.RUN_LEASE_SECONDS, stopped_after
    # It wrote nothing more: still running on record, for the sweep to hand over.
    assert Run.objects.get(id=run.id).status == Run.Status.RUNNING
    assert returned.wait(10), "the hung renewal ends before the next test uses its thread"
    Session.objects.filter(id=run.session_id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert lifecycle.end_abandoned(Run.objects.get(id=run.id), Run.Status.CANCELLED)


def test_a_lapsed_lease_of_a_run_not_ended_still_holds_its_session(owner):
    """Found by the chaos test: a new prompt took a session whose run's worker had been
    stopped past its lease — the old run then ran beside the new one (no new epoch fenced
    it out) and the new run jumped the queue. The session stays that run's until the sweep
    has started it again and it ended."""
    from core.errors import SessionBusyError

    run = _running(owner)
    session = Session.objects.get(id=run.session_id)
    Session.objects.filter(id=session.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    with pytest.raises(SessionBusyError):
        start_run(session=session, user=owner, messages=[{"role": "user", "content": "x"}])
    queued = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "y"}],
        multitask_strategy="enqueue",
        defer_enqueue=True,
    )
    assert Session.objects.get(id=session.id).busy_run_id == run.id
    assert lifecycle.begin(queued.id).run is None, "a stray delivery does not take it"
    assert Run.objects.get(id=queued.id).status == Run.Status.PENDING
    # The sweep takes the old run over; when it ends, the queued one gets the session.
    taken = lifecycle.begin(run.id).run
    assert taken is not None and taken.lease_epoch == 2
    taken.finished_at = timezone.now()
    lifecycle.finish(taken, Run.Status.COMPLETED, epoch=taken.lease_epoch)
    assert Session.objects.get(id=session.id).busy_run_id == queued.id
    # The hand-over enqueued it: it runs on this process's host. Its end is waited for, or
    # the teardown's deletes met its writes (a deadlock, in a CI run).
    wait_until(
        lambda: Run.objects.get(id=queued.id).status in Run.TERMINAL, 30, "the queued run's end"
    )


def test_a_run_ended_as_abandoned_records_what_its_open_step_did_to_the_files(owner):
    """Found by the chaos test: a worker killed between a tool and its step's snapshot, then
    the run cancelled, left the tool's change in the worktree and in no snapshot (a revert
    would lose it). Ending it closes the open step as an abort would (docs/semantics.md §1.7)."""
    from workspace import snapshots

    run = _running(owner)
    session = Session.objects.get(id=run.session_id)
    snap = snapshots.for_session(session)
    before = snap.track()
    step = Message.objects.create(session=session, run_id=run.id, role="assistant")
    Part.objects.create(
        message=step, session=session, order=0, type="step-start", data={"snapshot": before}
    )
    worktree_files.replace_file(  # the write tool's own writer (it tells the journal)
        session.worktree, ("made.txt",), b"by a tool before the worker died\n", append=False
    )
    Session.objects.filter(id=session.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert lifecycle.end_abandoned(run, Run.Status.CANCELLED)
    finish = Part.objects.get(message=step, type="step-finish")
    assert finish.data["interrupted"] and finish.data["snapshot"] == snap.track() != before
    patch = Part.objects.get(message=step, type="patch")
    assert patch.data == {"snapshot": before, "files": ["made.txt"]}


def test_a_takeover_decides_under_the_session_row_lock(owner, monkeypatch):
    """Found by the chaos test (a 30-minute run): ``begin`` took an expired lease and, in its
    next statement, found the run no longer running — its old execution, stopped but not
    dead, had parked it in between — and handed the session to the queued run, which then
    ran beside it. Under the session row lock, the park waits for the takeover, and is
    refused by the new epoch; the session stays the run's, the queued run waits."""
    run = _running(owner, "say hi")
    session = Session.objects.get(id=run.session_id)
    queued = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "say next"}],
        multitask_strategy="enqueue",
        defer_enqueue=True,
    )
    Session.objects.filter(id=session.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    claimed, parked = threading.Event(), threading.Event()
    original = lock.claim

    def slow_claim(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        taken = original(*args, **kwargs)
        claimed.set()
        parked.wait(1.5)  # the takeover's worker stopped between two statements
        return taken

    monkeypatch.setattr(lock, "claim", slow_claim)
    outcome: list[object] = []

    def takeover() -> None:
        try:
            outcome.append(lifecycle.begin(run.id))
        finally:
            connection.close()

    def old_execution_parks() -> None:
        try:
            lifecycle.park(Run.objects.get(id=run.id), epoch=1)
            outcome.append("parked")
        except LeaseLost:
            outcome.append("refused")
        finally:
            parked.set()
            connection.close()

    taking = threading.Thread(target=takeover)
    taking.start()
    assert claimed.wait(5)
    parking = threading.Thread(target=old_execution_parks)
    parking.start()
    taking.join(10)
    parking.join(10)
    assert "refused" in outcome, outcome
    assert Session.objects.get(id=session.id).busy_run_id == run.id
    assert Run.objects.get(id=queued.id).status == Run.Status.PENDING
    taken = Run.objects.get(id=run.id)
    assert (taken.status, taken.lease_epoch, taken.attempts) == (Run.Status.RUNNING, 2, 2)


def _left_open_by_a_lost_execution(owner) -> tuple[Run, Message]:
    """A run whose execution wrote a file with a tool and lost its lease before its step's
    snapshot (its keeper stopped it): the step is open, the file in no snapshot."""
    run = submitted(owner, "write made.txt by the first execution\nwait 2")
    begun = host.submit(run.id)
    control = wait_until(lambda: host.runs.get(run.id), what="the run live on the host")
    session = Session.objects.get(id=run.session_id)
    wait_until(lambda: (session.worktree / "made.txt").exists(), what="the tool's write")
    control.lost.set()
    begun.finished.result(timeout=30)
    step = Message.objects.get(run_id=run.id, role="assistant")
    assert not Part.objects.filter(message=step, type="step-finish").exists()
    Session.objects.filter(id=session.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    return Run.objects.get(id=run.id), step


def _closed_with_the_file(step: Message) -> None:
    finish = Part.objects.get(message=step, type="step-finish")
    assert finish.data["interrupted"] is True
    patch = Part.objects.get(message=step, type="patch")
    assert patch.data["files"] == ["made.txt"]
    start = Part.objects.get(message=step, type="step-start")
    assert patch.data["snapshot"] == start.data["snapshot"] != finish.data["snapshot"]


def test_the_execution_that_takes_over_closes_the_step_left_open(owner):
    """Found by the chaos test: the execution that took a run over went on from the open
    step without closing it, so what the lost execution's tools did was in no step's patch
    (and in no snapshot at all when the new execution ended before its first step)."""
    run, step = _left_open_by_a_lost_execution(owner)
    assert host.run_to_end(run.id, timeout=60)
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    _closed_with_the_file(step)


def test_an_execution_that_ends_before_recovering_closes_the_step_left_open(owner, monkeypatch):
    """The CI failure of 2026-12-04 (chaos seed 246485091): the execution that took the run
    over lost its database connection before it recovered the open step, and ended the run
    (error) with the first execution's write in no snapshot."""
    from django.db import OperationalError

    from runs_app.execution.loop import run as agent_loop

    run, step = _left_open_by_a_lost_execution(owner)

    def killed(*args, **kwargs):  # noqa: ANN002, ANN003, ANN202
        raise OperationalError("terminating connection due to administrator command")

    monkeypatch.setattr(agent_loop, "effective_limits", killed)
    host.run_to_end(run.id, timeout=60)
    ended = Run.objects.get(id=run.id)
    assert (ended.status, ended.error["type"]) == (Run.Status.ERROR, "DatabaseError")
    _closed_with_the_file(step)


def test_ending_an_abandoned_run_runs_git_before_the_session_row_lock(owner, monkeypatch):
    """git over a large worktree must not hold the session row that every start and end of
    the session waits for: the open step's files are found before the row is locked."""
    from workspace import snapshots

    run = _running(owner)
    session = Session.objects.get(id=run.session_id)
    snap = snapshots.for_session(session)
    step = Message.objects.create(session=session, run_id=run.id, role="assistant")
    Part.objects.create(
        message=step, session=session, order=0, type="step-start", data={"snapshot": snap.track()}
    )
    worktree_files.replace_file(session.worktree, ("made.txt",), b"x\n", append=False)
    Session.objects.filter(id=session.id).update(
        lease_expires_at=timezone.now() - timedelta(seconds=1)
    )
    in_transaction = []
    original = snapshots.Snapshots.track

    def track(self, **kwargs):  # noqa: ANN001, ANN003, ANN202
        in_transaction.append(connection.in_atomic_block)
        return original(self, **kwargs)

    monkeypatch.setattr(snapshots.Snapshots, "track", track)
    assert lifecycle.end_abandoned(Run.objects.get(id=run.id), Run.Status.CANCELLED)
    assert in_transaction == [False]
    assert Part.objects.get(message=step, type="patch").data["files"] == ["made.txt"]


def test_a_step_closed_by_recovery_is_not_closed_again_by_the_end(owner, monkeypatch):
    """Found by the 30-minute chaos run (10 parts twice, in pairs): the recovery made the
    closing parts, then the diff event after them failed (Redis restarting); the run ended
    with an error, and its end, not knowing the step closed, closed it a second time."""
    from runs_app.execution.loop import recorder

    run, step = _left_open_by_a_lost_execution(owner)

    def redis_away(ctx, before, after):  # noqa: ANN001, ANN202
        raise ConnectionError("Redis is restarting")

    monkeypatch.setattr(recorder, "publish_diff", redis_away)
    host.run_to_end(run.id, timeout=60)
    assert Run.objects.get(id=run.id).status == Run.Status.ERROR
    assert Part.objects.filter(message=step, type="step-finish").count() == 1
    assert Part.objects.filter(message=step, type="patch").count() == 1
    _closed_with_the_file(step)


def test_a_stale_execution_s_end_keeps_none_of_its_last_step(owner, monkeypatch):
    """A step without tool calls ends the run: its rows are written with the end, in one
    transaction (one commit, the end's conditional move their fence). The run taken over by
    another execution just before that end: neither its last step nor its end is stored."""
    from runs_app.execution.loop import end as loop_end

    run = submitted(owner, "say the last words")
    original = loop_end.record_end
    taken: list[Run] = []

    heads: list[str | None] = []

    def taken_over_first(self, status):  # noqa: ANN001, ANN202
        taken.append(_take_over(Run.objects.get(id=self.run.id)))  # the sweep, meanwhile
        heads.append(Session.objects.get(id=self.run.session_id).head_id)  # the user's turn
        return original(self, status)

    monkeypatch.setattr(loop_end, "record_end", taken_over_first)
    host.run_to_end(run.id, timeout=60)
    assert taken and taken[0].lease_epoch == 2
    stored = Run.objects.get(id=run.id)
    assert (stored.status, stored.finished_at) == (Run.Status.RUNNING, None)
    session = Session.objects.get(id=run.session_id)
    assert session.busy_run_id == run.id
    # The end's head goes with its hand-over, in one UPDATE: refused with the rest.
    assert heads and session.head_id == heads[0] == stored.input_message_id
    # The user's message (written at the start) is there; the answer, streamed but never
    # stored, is not: the execution that took the run over answers it.
    roles = list(Message.objects.filter(run_id=run.id).values_list("role", flat=True))
    assert roles == ["user"]
    assert not Part.objects.filter(session_id=run.session_id, message__role="assistant").exists()


def test_the_last_step_and_the_end_are_one_commit(owner, monkeypatch):
    """The end of a run whose last step called no tool: its rows and the end in one
    transaction (one commit), under the session row lock and then the run row, held for the
    end's UPDATE from its fence on (lock order: sessions_app/services/lock.py)."""
    from django.test.utils import CaptureQueriesContext

    from runs_app.execution.loop import end as loop_end

    run = submitted(owner, "say done")
    ends: list[tuple[list[str], int]] = []
    original = loop_end.record_end

    def captured(self, status):  # noqa: ANN001, ANN202
        commits: list[int] = []
        real = connection.commit
        connection.commit = lambda: (commits.append(1), real())[1]
        try:
            with CaptureQueriesContext(connection) as queries:
                original(self, status)
        finally:
            del connection.commit
        ends.append(([q["sql"] for q in queries.captured_queries], len(commits)))

    monkeypatch.setattr(loop_end, "record_end", captured)
    assert host.run_to_end(run.id, timeout=60)
    ((end, commits),) = ends
    assert commits == 1
    assert sum('INSERT INTO "sessions_app_part"' in s for s in end) == 1  # the last step's
    assert any('UPDATE "runs_app_run" SET "status"' in s for s in end)  # the end
    order = [i for i, s in enumerate(end) if "FOR NO KEY UPDATE" in s]
    assert len(order) == 2 and "sessions_app_session" in end[order[0]]
    assert "runs_app_run" in end[order[1]] and not any("FOR SHARE" in s for s in end)
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    assert Part.objects.filter(session_id=run.session_id, type="step-finish").count() == 1


def test_an_end_never_waits_in_a_cycle_with_the_streamed_text_writer(owner):
    """Found by tests/e2e/test_many_runs.py (100 runs, 50 cancelled at once): the end wrote a
    part's text, then waited to update the run row that the streamed-text writer held
    ``FOR SHARE``, while that writer waited for the part: a deadlock. The end holds the run
    row from its fence on, before any other row: the writer's turn comes before or after."""
    from runs_app.execution.loop import end as loop_end

    run = _running(owner)
    writer, message, part = _stored_message(run, "text", "a")
    part.text = "a whole answer"
    writer.touch(part, "text")  # the end's flush writes the text whole
    shared, done, failures = threading.Event(), threading.Event(), []

    def text_writer() -> None:  # the text writer's statement, slowed down between its two
        try:
            pid = backend_pid()
            with transaction.atomic(), connection.cursor() as cursor:
                from runs_app.execution.fencing import owned

                assert owned([(run.id, run.lease_epoch)]) == {run.id}
                shared.set()
                # The end waits for this writer's share of the run row before this UPDATE
                # (on the old code, the end then held the part: a deadlock).
                wait_until(lambda: blocked_by(pid), timeout=15, what="the end to wait")
                cursor.execute(
                    "UPDATE sessions_app_part SET text = %s WHERE id = %s", ["a whole", part.id]
                )
        except Exception as exc:  # noqa: BLE001
            failures.append(exc)
        finally:
            connection.close()
            done.set()

    thread = threading.Thread(target=text_writer)
    thread.start()
    assert shared.wait(10)
    end = type("End", (), {})()
    end.run, end.session, end.writer, end.epoch, end.recovered = (
        run,
        Session.objects.get(id=run.session_id),
        writer,
        run.lease_epoch,
        True,
    )
    end.usage, end.usage_start = {}, {}
    run.finished_at = timezone.now()
    loop_end.record_end(end, Run.Status.COMPLETED)
    assert done.wait(10) and failures == []
    thread.join()
    assert Run.objects.get(id=run.id).status == Run.Status.COMPLETED
    assert Part.objects.get(id=part.id).text in ("a whole answer", "a whole")


def test_changed_fields_are_compiled_updates_that_a_stale_execution_cannot_write(owner):
    """A checkpoint stores the fields of stored rows that changed (a part's text and state, a
    message's end) with one UPDATE compiled for each model and set of fields: what the ORM
    would store (JSON, NULL, datetimes), compiled once, and fenced like the rest."""
    from .test_compiled import compiled_updates

    run = _running(owner)
    writer, message, part = _stored_message(run, "tool", "")
    ended = timezone.now()
    with compiled_updates() as compiled:
        for i in range(3):
            message.completed_at, message.structured = ended, None
            message.tokens = {"input": i, "output": 2, "nested": {"list": [1, "two", None]}}
            part.text, part.state = f"step {i}", {"status": "completed", "output": "ok\n"}
            writer.touch(message, "completed_at", "tokens", "structured")
            writer.touch(part, "text", "state")
            writer.flush()
    assert sorted(m.__name__ for m in compiled).count("Message") <= 1
    assert sorted(m.__name__ for m in compiled).count("Part") <= 1
    stored = Message.objects.get(id=message.id)
    assert (stored.completed_at, stored.structured) == (ended, None)
    assert stored.tokens == {"input": 2, "output": 2, "nested": {"list": [1, "two", None]}}
    assert Message.objects.filter(id=message.id, structured__isnull=True).exists()  # SQL NULL
    stored_part = Part.objects.get(id=part.id)
    assert (stored_part.text, stored_part.state) == ("step 2", part.state)

    _take_over(run)  # the lease went to another execution: this one's changes are refused
    part.text = "stale"
    writer.touch(part, "text")
    run.input_message_id = message.id  # the run's own row too (its input mark, compiled)
    writer.touch(run, "input_message_id")
    with pytest.raises(LeaseLost):
        writer.flush()
    assert Part.objects.get(id=part.id).text == "step 2"
    assert Run.objects.get(id=run.id).input_message_id is None


def test_a_stale_execution_neither_confirms_a_revert_nor_writes_its_prompt(owner, monkeypatch):
    """A prompt over a pending revert confirms it in the prompt's transaction (docs/semantics.md
    §1.3). The run taken over just before: the revert stays pending, nothing of it is deleted, and
    no prompt is written — the execution that took the run over does both."""
    from runs_app.execution.loop import start as loop_start
    from sessions_app.services.revert import revert_session

    first = submitted(owner, "say one")
    host.run_to_end(first.id, timeout=60)
    session = Session.objects.get(id=first.session_id)
    turn = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "say two"}],
        defer_enqueue=True,
    )
    host.run_to_end(turn.id, timeout=60)
    boundary = Message.objects.get(run_id=turn.id, role="user")
    revert_session(session=Session.objects.get(id=session.id), message_id=boundary.id)
    kept = set(Message.objects.filter(session_id=session.id).values_list("id", flat=True))

    run = start_run(
        session=Session.objects.get(id=session.id),
        user=owner,
        messages=[{"role": "user", "content": "say three"}],
        defer_enqueue=True,
    )
    original = loop_start.confirm_and_prompt
    taken: list[Run] = []

    def taken_over_first(self):  # noqa: ANN001, ANN202
        taken.append(_take_over(Run.objects.get(id=self.run.id)))  # the sweep, meanwhile
        return original(self)

    monkeypatch.setattr(loop_start, "confirm_and_prompt", taken_over_first)
    host.run_to_end(run.id, timeout=60)
    assert taken and taken[0].lease_epoch == 2
    stored = Session.objects.get(id=session.id)
    assert stored.revert and stored.revert["message_id"] == boundary.id
    assert set(Message.objects.filter(session_id=session.id).values_list("id", flat=True)) == kept
    assert not Message.objects.filter(run_id=run.id).exists()
