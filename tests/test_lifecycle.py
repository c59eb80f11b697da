"""The run lifecycle's guarantees (issue 13, items 1 and 3): one owner for a run's
transitions, and a lease renewal that fails stops the run, so a session never has two
writers."""

from __future__ import annotations

import asyncio
import threading
import time

import pytest

from realtime import events
from runs_app.execution.host import host, run_agent
from runs_app.models import Run
from runs_app.services.runs import start_run
from sessions_app.models import Part, Session
from sessions_app.services import lock
from sessions_app.services.sessions import create_session
from tests.conftest import wait_until

pytestmark = pytest.mark.django_db(transaction=True)

SCRIPT = "pace 60\nsay " + " ".join(f"w{i}" for i in range(40)) + "\nappend log.txt once"


def text_of(session: Session) -> str:
    return "".join(
        p.text
        for p in Part.objects.filter(
            session=session, type="text", message__role="assistant"
        ).order_by("id")
    )


def _text_pending(run_id: str) -> bool:
    """Whether the host's streamed-text writer still holds text of ``run_id`` or writes a
    batch: looked at on the host's loop, between two of its steps."""

    async def look() -> bool:
        texts = host.texts
        return texts.busy() or any(c.run_id == run_id for _, c in texts.texts.values())

    return asyncio.run_coroutine_threadsafe(look(), host.ensure()).result(10)


def test_a_heartbeat_that_cannot_renew_stops_the_run_and_a_second_worker_finishes_it(
    owner, settings, monkeypatch
):
    settings.RUN_LEASE_SECONDS = 0.9  # renewed every 0.3 s
    settings.STREAM_FLUSH_SECONDS = 0.1
    session = create_session(owner=owner)
    run = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": SCRIPT}],
        defer_enqueue=True,
    )

    def broken_renew(held: list[tuple[str, str]]) -> set[str]:
        raise RuntimeError("the database went away")

    monkeypatch.setattr(lock, "renew_many", broken_renew)
    first = threading.Thread(target=run_agent, args=(run.id,))
    started = time.monotonic()
    first.start()
    first.join(timeout=10)
    assert not first.is_alive()
    # The loop stopped at its first failed renewal, long before its 2.4 s of streaming ended.
    assert time.monotonic() - started < 2.0
    run.refresh_from_db()
    assert run.status == Run.Status.RUNNING, "it stopped; it did not finish unrenewed"
    written = text_of(session)
    assert len(written.split()) < 40
    # Nothing of it is left for the streamed-text writer, nor in a batch it is writing: its
    # text stays as the loop left it.
    wait_until(lambda: not _text_pending(run.id), 10, "the text writer done with the run")
    assert text_of(session) == written, "nothing written after the loop stopped"
    assert not (session.worktree / "log.txt").exists()

    # The lease expires; another worker takes the run over and finishes it, alone.
    monkeypatch.undo()
    Session.objects.filter(id=session.id).update(lease_expires_at=None)  # expired
    second = threading.Thread(target=run_agent, args=(run.id,))
    second.start()
    second.join(timeout=30)
    run.refresh_from_db()
    assert run.status == Run.Status.COMPLETED, run.error
    assert (session.worktree / "log.txt").read_text() == "once\n"


def _queued_behind(owner) -> tuple[Session, Run, Run]:  # noqa: ANN001
    """A session, a run that holds it for half a second, and a run queued behind it."""
    session = create_session(owner=owner)
    first = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "wait 0.5\nsay first"}],
    )
    second = start_run(
        session=session,
        user=owner,
        messages=[{"role": "user", "content": "say second"}],
        multitask_strategy="enqueue",
    )
    return session, first, second


def test_a_queued_run_is_handed_the_session_by_the_one_that_finishes(owner):
    """The hand-over is lifecycle's: the queued run starts when the holder ends."""
    session, first, second = _queued_behind(owner)
    wait_until(lambda: Run.objects.get(id=second.id).is_terminal, 20, "the second run's end")
    first.refresh_from_db()
    second.refresh_from_db()
    assert first.status == second.status == Run.Status.COMPLETED
    assert first.finished_at <= second.started_at
    session.refresh_from_db()
    assert session.busy_run_id is None and session.status == Session.Status.IDLE


def test_busy_is_said_once_per_run_by_what_gives_it_the_session(owner, monkeypatch):
    """ "busy" for a run comes from what gives it the session — its admission, or the end of
    the run it queued behind (the hand-over) — once: the worker that begins it says nothing
    more (it said it again, one more event for every browser of the session, each run).
    The ending run's usage goes into the session with the hand-over's UPDATE."""
    said: list[tuple[str, str | None]] = []
    original = events.publisher.publish

    def spy(session_id: str, type: str, payload: dict) -> None:
        if type == events.SESSION_STATUS:
            said.append((payload["status"], payload.get("run_id")))
        original(session_id, type, payload)

    monkeypatch.setattr(events.publisher, "publish", spy)
    session, first, second = _queued_behind(owner)
    wait_until(lambda: said and said[-1][0] == "idle", 20, "the session idle")
    assert said == [("busy", first.id), ("busy", second.id), ("idle", None)]
    session.refresh_from_db()
    first.refresh_from_db()
    second.refresh_from_db()
    # Both runs' usage, each added at its end.
    assert session.usage["calls"] == first.usage["calls"] + second.usage["calls"] >= 2
