"""The session's changes as the Changes panel shows them: the files changed over the whole
session (its active path's first snapshot → now) or in one turn, one file's unified diff over
the same span, and the ``summary`` every move that changes the files or the path stores of
them (``changes_summary``), counted from the same base (``path_start``)."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from core.errors import InvalidInput, NotFoundError
from core.mode import holds_worktrees
from workspace import change_summary, snapshots
from workspace.worktree_files import plain_relative

from ..models import Message, Session
from ..reads import snapshots_for_read
from ..selectors import active_path, current_tree


def _diff_range(session: Session, message_id: str | None) -> tuple[str, str] | None:
    """The trees a diff goes between: the first snapshot of the session's active path (or of
    one turn) and now (or that turn's last snapshot)."""
    path = active_path(session)
    if message_id:
        index = next((i for i, m in enumerate(path) if m.id == message_id), None)
        if index is None:
            if Message.objects.filter(id=message_id, session=session).exists():
                raise InvalidInput("That message is not on the active branch of this session.")
            raise NotFoundError("No such message in this session.")
        start = index
        while start > 0 and path[start].role != Message.Role.USER:
            start -= 1
        end = start + 1
        while end < len(path) and path[end].role != Message.Role.USER:
            end += 1
        turn = path[start:end]
    else:
        turn = path
    first = path_start(turn)
    if first is None:
        return None
    if message_id:
        finishes = [
            p.data["snapshot"] for m in turn for p in m.loaded_parts if p.type == "step-finish"
        ]
        return first, finishes[-1] if finishes else first
    return first, _now(session)


def _now(session: Session) -> str:
    """The files now: the worktree's snapshot (``peek``, a read: never the index the loop is
    using), or, in a process without worktrees, the last one the central store received."""
    if holds_worktrees():
        return snapshots.for_session(session).peek(journal=True)
    return current_tree(session)


def path_start(path: list[Message]) -> str | None:
    """The files before the first step of ``path`` (messages with their parts): where the
    changes of a session, or of a turn, are counted from."""
    return next(
        (p.data["snapshot"] for m in path for p in m.loaded_parts if p.type == "step-start"),
        None,
    )


def session_diff(*, session: Session, message_id: str | None = None) -> list[dict]:
    """Files changed in the whole session (first snapshot → now) or in one turn."""
    with objects_found():
        span = _diff_range(session, message_id)
        return snapshots_for_read(session, *span).diff_stat(*span) if span else []


@contextmanager
def objects_found() -> Iterator[None]:
    """A diff that needs an object the store does not hold (lost, or never there) is a 404,
    whatever the object: not a 500, and not an answer that tells which ids exist."""
    try:
        yield
    except snapshots.MissingObjectError:
        raise NotFoundError("This diff needs snapshot content that is not in the store.") from None


def changes_summary(snap: snapshots.Snapshots, start: str | None, now: str) -> dict[str, int]:
    """The session's ``summary`` when its active path starts from the files ``start`` (its
    ``path_start``) and its files are the tree ``now``: the totals of what ``session_diff``
    lists (the Changes panel). Every move that changes the files or the path stores it again
    — a step, a branch, revert, unrevert, cleanup, a head switch, rollback, fork — so the
    stored numbers never count from another base than the panel."""
    return change_summary.summary_of(snap.diff_stat(start, now) if start else [])


def session_file_diff(*, session: Session, file: str, message_id: str | None = None) -> dict:
    """One file's unified diff over the same span (the diff viewer). ``file`` must be a plain
    relative path: git answers a name outside the tree (``../x``) with an error of its own."""
    try:
        plain_relative(file)
    except ValueError as exc:
        raise InvalidInput(f"file: {exc}") from exc
    with objects_found():
        span = _diff_range(session, message_id)
        text = snapshots_for_read(session, *span).diff_text(*span, paths=[file]) if span else ""
    return {"file": file, "patch": text}
