"""Issue 13.5: the files of a revert or unrevert follow its transaction. When it does not
commit (a later statement fails, the commit fails, a file write fails half-way), the database
says "not moved" and the worktree is byte for byte what it was before."""

from __future__ import annotations

from pathlib import Path

import pytest
from django.db import DatabaseError, OperationalError, connections

from realtime import events
from sessions_app.models import HistoryEvent, Message, Session
from sessions_app.services.revert import revert_session
from sessions_app.services.unrevert import unrevert_session
from tests.conftest import run_turn
from workspace import worktree_paths

pytestmark = pytest.mark.django_db(transaction=True)


def files(root: Path) -> dict[str, tuple[bytes, int]]:
    return {
        p.relative_to(root).as_posix(): (p.read_bytes(), p.stat().st_mode & 0o777)
        for p in sorted(root.rglob("*"))
        if p.is_file() and ".git" not in p.relative_to(root).parts
    }


def db_state(sid: str) -> tuple:
    session = Session.objects.get(id=sid)
    history = list(HistoryEvent.objects.filter(session_id=sid).values_list("kind", "data"))
    return session.revert, session.summary, history


@pytest.fixture
def sid(api) -> str:
    sid = api.post("/api/sessions/", {}, format="json").json()["id"]
    run_turn(api, sid, "write a.txt A1\nwrite keep.txt kept\nwrite deep/er/x.txt x1")
    run_turn(api, sid, "write a.txt A2\nwrite b.txt B2\ndelete keep.txt\nwrite deep/er/x.txt x2")
    worktree = Session.objects.get(id=sid).worktree
    (worktree / "bin.dat").write_bytes(bytes(range(256)))  # the user's own, untouched
    return sid


def second_turn(sid: str) -> Message:
    return Message.objects.filter(session_id=sid, role="user").order_by("id")[1]


def fail_history_event(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(**kwargs: object) -> None:
        raise DatabaseError("the history insert failed")

    monkeypatch.setattr(HistoryEvent.objects, "create", boom)


def fail_session_save(monkeypatch: pytest.MonkeyPatch) -> None:
    original = Session.save

    def save(self: Session, *args: object, **kwargs: object) -> None:
        if "revert" in (kwargs.get("update_fields") or ()):
            raise OperationalError("server closed the connection unexpectedly")
        original(self, *args, **kwargs)

    monkeypatch.setattr(Session, "save", save)


def fail_commit(monkeypatch: pytest.MonkeyPatch) -> None:
    """The move's own commit fails (once): the exception comes out of ``atomic`` itself."""
    connection = connections["default"]
    original = connection.commit
    calls = []

    def commit() -> None:
        calls.append(1)
        if len(calls) == 1:
            raise OperationalError("the commit failed")
        original()

    monkeypatch.setattr(connection, "commit", commit)


def fail_second_file_write(monkeypatch: pytest.MonkeyPatch) -> None:
    original = worktree_paths.write_file
    calls = []

    def write(worktree: Path, name: str, mode: str, body: bytes) -> None:
        calls.append(name)
        if len(calls) == 2:
            raise OSError(28, "No space left on device")
        original(worktree, name, mode, body)

    monkeypatch.setattr(worktree_paths, "write_file", write)


FAILURES = {
    "history-insert": fail_history_event,
    "session-save": fail_session_save,
    "commit": fail_commit,
    "file-write": fail_second_file_write,
}


@pytest.mark.parametrize("failure", FAILURES)
def test_a_revert_that_does_not_commit_leaves_the_files_as_they_were(sid, failure, monkeypatch):
    session = Session.objects.get(id=sid)
    before_files, before_db = files(session.worktree), db_state(sid)
    target = second_turn(sid)
    with monkeypatch.context() as patch:
        FAILURES[failure](patch)
        with pytest.raises((DatabaseError, OSError)):
            revert_session(session=session, message_id=target.id)
    assert db_state(sid) == before_db
    assert files(session.worktree) == before_files
    # And the same move, nothing failing, goes through (the files really move).
    revert_session(session=session, message_id=target.id)
    assert Session.objects.get(id=sid).revert["message_id"] == target.id
    assert files(session.worktree)["a.txt"][0] == b"A1"


@pytest.mark.parametrize("failure", FAILURES)
def test_an_unrevert_that_does_not_commit_leaves_the_reverted_files(sid, failure, monkeypatch):
    session = Session.objects.get(id=sid)
    final = files(session.worktree)
    revert_session(session=session, message_id=second_turn(sid).id)
    reverted_files, reverted_db = files(session.worktree), db_state(sid)
    assert reverted_files != final
    with monkeypatch.context() as patch:
        FAILURES[failure](patch)
        with pytest.raises((DatabaseError, OSError)):
            unrevert_session(session=session)
    assert db_state(sid) == reverted_db
    assert files(session.worktree) == reverted_files
    unrevert_session(session=session)
    assert Session.objects.get(id=sid).revert is None
    assert files(session.worktree) == final


def test_a_hook_that_fails_after_the_commit_does_not_undo_the_files(sid, monkeypatch):
    """The move committed: its files stay, even though an event publish raised after it."""
    session = Session.objects.get(id=sid)

    def publish(*args: object) -> None:
        raise RuntimeError("the channel layer is down")

    monkeypatch.setattr(events.publisher, "publish", publish)
    with pytest.raises(RuntimeError):
        revert_session(session=session, message_id=second_turn(sid).id)
    assert Session.objects.get(id=sid).revert is not None
    assert files(session.worktree)["a.txt"][0] == b"A1"
    assert "b.txt" not in files(session.worktree)
