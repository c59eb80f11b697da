"""A worker asked to stop (runs_app/execution/drain.py): its live runs end there within
``RUN_DRAIN_SECONDS``, or stop without writing and go to another worker at once, instead of
waiting for their leases to lapse. The real path (a worker process and SIGTERM) is
``tests/e2e/test_worker_stop.py``."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from django.utils import timezone

from runs_app.execution import runtime
from runs_app.execution.drain import Drain, hand_back
from runs_app.execution.host import host
from runs_app.lifecycle import begin
from runs_app.models import Run
from sessions_app.models import Session
from tests.conftest import submitted

pytestmark = pytest.mark.django_db(transaction=True)


def test_a_hand_back_ends_the_lease_only_for_the_execution_that_holds_the_run(owner):
    run = submitted(owner, "say hi")
    begun = begin(run.id).run
    assert begun is not None
    session = Session.objects.get(id=run.session_id)
    assert session.lease_expires_at > timezone.now()
    stale = begun.lease_epoch
    # Another execution began since (this one was stopped past its lease): its hand-back
    # is refused and the session's lease is left as the new holder has it.
    Run.objects.filter(id=run.id).update(lease_epoch=stale + 1)
    assert not hand_back(run.id, run.session_id, stale)
    assert Session.objects.get(id=run.session_id).lease_expires_at == session.lease_expires_at
    # The execution that holds it: the lease ends now, the run is still running (taken over).
    assert hand_back(run.id, run.session_id, stale + 1)
    after = Session.objects.get(id=run.session_id)
    assert after.busy_run_id == run.id
    assert after.lease_expires_at <= timezone.now()
    assert Run.objects.get(id=run.id).status == Run.Status.RUNNING


def test_stopping_lets_short_runs_end_and_hands_back_the_ones_that_go_on(owner, monkeypatch):
    enqueued: list[str] = []
    monkeypatch.setattr(runtime, "enqueue", enqueued.append)
    short = submitted(owner, "wait 0.3\nsay done")
    long = submitted(owner, "wait 60\nsay never")
    futures = [host.submit(short.id), host.submit(long.id)]
    for future in futures:
        future.result(timeout=10)  # both began
    monkeypatch.setattr(host, "closing", False)  # open again after the test
    started = time.monotonic()
    handed = Drain()(host, 1.5)
    assert time.monotonic() - started < 1.5 + 5
    assert handed == [long.id] and enqueued == [long.id]
    assert Run.objects.get(id=short.id).status == Run.Status.COMPLETED
    long.refresh_from_db()
    assert long.status == Run.Status.RUNNING, "not ended: the next worker takes it over"
    session = Session.objects.get(id=long.session_id)
    assert session.busy_run_id == long.id
    assert session.lease_expires_at <= timezone.now() + timedelta(seconds=0)
    assert host.hosted == 0 and not host.runs


def test_a_run_handed_to_a_stopping_host_goes_back_to_the_queue(owner, monkeypatch):
    enqueued: list[str] = []
    monkeypatch.setattr(runtime, "enqueue", enqueued.append)
    run = submitted(owner, "say hi")
    host.ensure()
    monkeypatch.setattr(host, "closing", True)
    begun = host.submit(run.id)
    assert begun.result(timeout=10) is False
    begun.finished.result(timeout=10)
    assert enqueued == [run.id]
    assert Run.objects.get(id=run.id).status == Run.Status.PENDING, "not begun here"
