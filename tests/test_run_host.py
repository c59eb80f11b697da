"""The run host's care for live runs when many run in one process (issue 14): a burst of
new runs starts a few at a time, and the collector does not stop every run's tokens."""

from __future__ import annotations

import gc
import sys
import threading
import time

import pytest

from core import heap
from runs_app.execution.host import host
from runs_app.execution.loop import start as loop_start
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.services.sessions import create_session


def test_a_long_lived_process_freezes_what_it_imported_and_spaces_its_collections():
    """And hands the interpreter to a waiting thread after 1 ms, not CPython's 5."""
    import config.asgi  # noqa: F401  (Daphne's entry settles its heap once it has imported)

    assert gc.get_freeze_count() > 10_000, "the project's import-time objects are frozen"
    assert gc.get_threshold() == heap.THRESHOLDS
    assert sys.getswitchinterval() == pytest.approx(heap.SWITCH_INTERVAL)
    assert heap.SWITCH_INTERVAL < 0.005
    frozen = gc.get_freeze_count()
    heap.settle()  # once per process: a second call (the worker's host) changes nothing
    assert gc.get_freeze_count() == frozen


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize("at_once", [1, 2])
def test_a_burst_of_runs_starts_at_most_the_configured_number_at_once(
    owner, settings, monkeypatch, at_once
):
    settings.RUN_STARTING_AT_ONCE = at_once
    starting, most = [0], [0]
    guard = threading.Lock()
    original = loop_start.start_up

    async def counted_start_up(self):  # noqa: ANN001, ANN202
        with guard:
            starting[0] += 1
            most[0] = max(most[0], starting[0])
        try:
            await self.db(time.sleep, 0.15)  # a slow start-up (history, first rows, snapshot)
            return await original(self)
        finally:
            with guard:
                starting[0] -= 1

    monkeypatch.setattr(loop_start, "start_up", counted_start_up)
    runs = [
        start_run(
            session=create_session(owner=owner),
            user=owner,
            messages=[{"role": "user", "content": "pace 0\nsay hello"}],
            defer_enqueue=True,
        )
        for _ in range(5)
    ]
    loop = host.ensure()
    # The process's host began before this test: it sizes its start-ups from the setting
    # again, as at its first start-up.
    monkeypatch.setattr(host, "_starting", None)
    begun = [host.submit(run.id) for run in runs]
    for future in begun:
        future.finished.result(timeout=30)
    assert loop is host.loop
    assert {r.status for r in Run.objects.filter(id__in=[r.id for r in runs])} == {"completed"}
    assert most[0] == at_once, "start-ups at once"


@pytest.mark.django_db(transaction=True)
def test_settling_waits_for_the_runs_handed_over_and_stops_those_that_go_on(owner):
    """The end of a test waits for this (tests/conftest.py): a run left going (a cancelled
    one not yet stopped, a long ``wait``) kept writing while the next transactional test
    emptied the database, and that flush deadlocked on its rows."""
    assert host.settle(timeout=1), "nothing handed over: settled at once"
    run = start_run(
        session=create_session(owner=owner),
        user=owner,
        messages=[{"role": "user", "content": "wait 60\nsay never"}],
        defer_enqueue=True,
    )
    begun = host.submit(run.id)
    begun.result(timeout=10)  # it runs
    assert host.hosted == 1
    started = time.monotonic()
    assert host.settle(timeout=4), "asked to stop past half the time, and stopped"
    assert time.monotonic() - started < 4
    assert host.hosted == 0 and begun.finished.done()
    run.refresh_from_db()
    assert run.status == Run.Status.CANCELLED
