"""A clone whose home host died (issue 45, found by scripts/trial_multi_host.py's variant: a
host killed right after a session was made from a repository on it): its prepare job was lost
with the host, in its queue or half run. Before, the session stayed ``preparing`` ("Cloning
the repository…") until the hold's lease of ``REPO_CLONE_TIMEOUT`` + 120 s lapsed, then went
idle with no files, no clone message and no error. The workers' sweep now moves it to a live
host and sends its job there (sessions_app/lost_clones.py, from every worker's sweep)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from core import mode
from runs_app.execution import runtime, sweeper
from sessions_app.models import Host, Session

pytestmark = pytest.mark.django_db(transaction=True)


def _host(name: str, *, age: float = 0.0) -> Host:
    when = timezone.now() - timedelta(seconds=age)
    return Host.objects.create(name=name, last_heartbeat=when, started_at=when)


def _preparing(owner, host: str, job: str, **fields) -> Session:  # noqa: ANN001
    source = fields.pop("source", {"url": "https://git.example/r.git", "ref": ""})
    return Session.objects.create(
        owner=owner,
        host=host,
        status=Session.Status.PREPARING,
        busy_run_id=job,
        lease_expires_at=timezone.now() + timedelta(seconds=700),
        source=source,
        **fields,
    )


def test_the_sweep_sends_a_dead_hosts_clone_to_a_live_host(owner, settings, monkeypatch):
    settings.WORKER_HOST = "here"
    settings.RUN_EXECUTOR = "celery"
    sent: list[tuple[str, list, str | None]] = []
    monkeypatch.setattr(
        runtime.mode,
        "send_task",
        lambda name, args, task_id=None, queue=None: sent.append((name, args, queue)),
    )
    _host("dead", age=settings.RUN_LEASE_SECONDS * 3)
    _host("alive")
    lost = _preparing(owner, "dead", "prep_1")
    cloning = _preparing(owner, "alive", "prep_2")  # its host lives: its job goes on there
    source = Session.objects.create(owner=owner, host="alive")
    fork = _preparing(owner, "dead", "prep_3", forked_from_session=source)  # a fork's job
    sweeper.sweep_once()  # beats for "here" first
    moved = Session.objects.get(id=lost.id)
    assert moved.host in ("here", "alive") and moved.busy_run_id == "prep_1"
    assert moved.status == Session.Status.PREPARING
    assert moved.lease_expires_at > lost.lease_expires_at  # a whole clone's time again
    assert sent == [
        ("sessions_app.prepare_session", [lost.id, "prep_1"], mode.host_queue(moved.host))
    ]
    assert Session.objects.get(id=cloning.id).host == "alive"
    assert Session.objects.get(id=fork.id).host == "dead"  # not a clone: not sent as one
    sweeper.sweep_once()  # once: its new home is live
    assert len(sent) == 1
