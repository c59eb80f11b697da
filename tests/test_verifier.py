"""Issue 43: the verifier. A step's snapshot takes only what its writers said they changed;
what changed without a word (planted here, as no writer of the platform does) is found by the
walk of an idle worktree (``sessions_app/services/verify.py``) and recorded as a step of its
own, which a revert then undoes like any other."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.services import verify
from tests.conftest import new_session, run_turn, wait_until
from workspace import change_journal, snapshots

pytestmark = pytest.mark.django_db(transaction=True)


def _files(session: Session, tree: str) -> set[str]:
    snap = snapshots.for_session(session)
    return set(snap.git("ls-tree", "-r", "--name-only", "-z", tree).split("\0")[:-1])


def _last_step(session_id: str) -> str:
    part = (
        Part.objects.filter(session_id=session_id, type=Part.Type.STEP_FINISH)
        .order_by("-message__created_at", "-order")
        .first()
    )
    return part.data["snapshot"]


def test_what_no_writer_said_is_found_by_the_verifier_and_recorded_as_a_step(api, monkeypatch):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    (session.worktree / "planted.txt").write_text("no writer said so\n")
    run_turn(api, sid, "write b.txt two")  # its step sees only b.txt: no walk
    assert "planted.txt" not in _files(session, _last_step(sid))

    assert verify.due() == [], "walked just now (the session's first snapshot)"
    monkeypatch.setattr(change_journal, "VERIFY_SECONDS", 0)
    monkeypatch.setattr(verify, "IDLE_SECONDS", 0)
    monkeypatch.setattr(verify, "SWEEP_SECONDS", 0)
    # Due once the clock has passed the journal's write (its file's time, coarser than ours).
    wait_until(lambda: sid in verify.due(), 5, "the session due a walk")
    assert verify.verify_due() == {sid: ["planted.txt"]}

    session.refresh_from_db()
    head = Message.objects.get(id=session.head_id)
    parts = list(head.parts.order_by("order"))
    assert parts[0].text == "Files changed outside any step: planted.txt."
    assert parts[-1].type == Part.Type.PATCH and parts[-1].data["files"] == ["planted.txt"]
    assert "planted.txt" in _files(session, _last_step(sid))
    assert HistoryEvent.objects.filter(session_id=sid, kind="verify").count() == 1
    assert verify.verify_due() == {}, "nothing written since: not due again"

    # A step like any other: a revert to it puts the files back as they were before it.
    answer = api.post(f"/api/sessions/{sid}/revert/", {"message_id": head.id}, format="json")
    assert answer.status_code == 200, answer.json()
    assert not (session.worktree / "planted.txt").exists()
    assert (session.worktree / "b.txt").read_text() == "two"


def test_a_busy_session_is_left_for_a_later_sweep(api, monkeypatch):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    (session.worktree / "planted.txt").write_text("x\n")
    messages = Message.objects.filter(session_id=sid).count()
    monkeypatch.setattr(change_journal, "VERIFY_SECONDS", 0)
    monkeypatch.setattr(verify, "IDLE_SECONDS", 0)
    monkeypatch.setattr(verify, "SWEEP_SECONDS", 0)
    # A run holds it (its lease live): no walk, no row, the files as they are.
    Session.objects.filter(id=sid).update(
        busy_run_id="run_elsewhere", lease_expires_at=timezone.now() + timedelta(minutes=1)
    )
    assert verify.verify_session(sid) is None
    assert Message.objects.filter(session_id=sid).count() == messages
    assert verify.verify_due() == {}


def test_a_deleted_session_is_never_due_and_leaves_no_journal(api, monkeypatch):
    sid = new_session(api)
    run_turn(api, sid, "write a.txt one")
    session = Session.objects.get(id=sid)
    monkeypatch.setattr(change_journal, "VERIFY_SECONDS", 0)
    monkeypatch.setattr(verify, "IDLE_SECONDS", 0)
    monkeypatch.setattr(verify, "SWEEP_SECONDS", 0)
    (session.worktree / "planted.txt").write_text("x\n")
    wait_until(lambda: sid in verify.due(), 5, "the session due a walk")
    assert api.delete(f"/api/sessions/{sid}/").status_code == 204
    assert verify.due() == [] and verify.verify_due() == {}
    assert not change_journal.home(session.worktree).exists()
    # A journal a crash left behind (the row gone first): the sweep removes it, once.
    change_journal.home(session.worktree).mkdir(parents=True)
    (change_journal.home(session.worktree) / "paths").write_bytes(b"a\0")
    assert verify.verify_due() == {}
    assert not change_journal.home(session.worktree).exists()
