"""Revert, unrevert and cleanup (SEMANTICS 3): a boundary in the conversation plus the files
as they were there. ``revert`` marks and restores but deletes nothing; ``unrevert`` puts the
pre-revert tree back exactly; ``cleanup`` confirms, deleting what lies after the boundary.

Each move holds the session row (``select_for_update``) while it works on the files, so no run
can start in between; a run that holds the busy lock makes them answer 409.

The files are written inside the move's transaction, so they follow it (``FilesFollow``): when
it does not commit, the worktree goes back to the tree it had before the writes, and the
database and the files never disagree about whether the session is reverted.

Rewind modes (SEMANTICS 14.5), ``mode`` of ``revert_session`` and ``plan_revert``:

* ``both`` (the default): the conversation's boundary moves and the files go back (3.x).
* ``conversation``: the boundary moves as with ``both`` (a pending revert, confirmable and
  unrevertable) but the files are left exactly as they are. The record says ``mode``; an
  unrevert of it touches no file unless an earlier pending revert had moved them.
* ``files``: the files go to the tree ``both`` would give and the conversation stays: no
  pending revert, a ``files-revert`` history event with ``files_before`` / ``files_after``.
  Refused (409) while a revert is pending. ``unrevert`` undoes it as long as it is the
  session's latest history move and the files are still what it left.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from types import TracebackType

from django.db import DatabaseError, transaction

from core.errors import ConflictError, InvalidInput, NotFoundError, SessionBusyError
from realtime import events
from workspace import snapshots
from workspace.worktree_files import plain_relative

from ..models import HistoryEvent, Message, Part, Session
from ..selectors import active_path, session_data
from . import lock

log = logging.getLogger(__name__)


class FilesFollow:
    """The worktree follows the move's transaction: if it does not commit, the files go back
    to ``before`` (Django has no on_rollback hook, so this watches both ways out).

    * An exception inside the atomic block (a statement fails, the connection drops): the
      files are put back right there, while the session row is still held, so no run can
      start on half-moved files (``writing``).
    * The commit itself fails (the exception comes out of ``atomic``): the row lock is gone
      with the transaction, so it is taken again before the files are put back; if a run
      took the session meanwhile, its files are its own and are left alone (logged).

    A hook registered with ``on_commit`` before any other of the move marks the commit, so
    an exception from a later hook (an event publish) does not undo a committed move.

        with FilesFollow(session_id) as follow, transaction.atomic():
            locked = lock.lock_idle_session(...)
            with follow.writing(snap, before):
                ...file writes, then the statements...
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.snap: snapshots.Snapshots | None = None
        self.before: str | None = None  # set while the files differ from the database's view
        self.committed = False

    def __enter__(self) -> FilesFollow:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or self.before is None or self.committed:
            return
        try:
            with transaction.atomic():
                lock.lock_idle_session(self.session_id)
                self._put_back()
        except SessionBusyError:
            log.error(
                "session %s: the move's commit failed and a run took the session before its "
                "files could be put back to %s; they are left as the run found them",
                self.session_id,
                self.before,
            )
        except DatabaseError:
            # The database is gone, so no run can take the session either: put them back.
            self._put_back()

    @contextmanager
    def writing(self, snap: snapshots.Snapshots, before: str) -> Iterator[None]:
        """Around the file writes and every statement after them, inside the atomic block
        and after the session row is locked. ``before``: the worktree's tree now."""
        self.snap, self.before = snap, before
        transaction.on_commit(self._mark_committed)
        try:
            yield
        except BaseException:
            self._put_back()
            raise

    def _mark_committed(self) -> None:
        self.committed = True

    def _put_back(self) -> None:
        snap, before, self.before = self.snap, self.before, None
        if snap is None or before is None:
            return
        try:
            snap.restore(before)
        except Exception:  # the original error is the one to report; this one is logged
            log.exception("session %s: could not put the files back to %s", self.session_id, before)


@dataclass(frozen=True)
class Boundary:
    index: int  # position of the boundary message in the active path
    message: Message
    part: Part | None  # set for a part-level boundary


def find_boundary(path: list[Message], session: Session, message_id: str, part_id: str | None):
    """Rule 3.1: part-level when the message has an earlier text/tool part; otherwise
    message-level, moved to the user message that starts the turn."""
    index = next((i for i, m in enumerate(path) if m.id == message_id), None)
    if index is None:
        if Message.objects.filter(id=message_id, session=session).exists():
            raise InvalidInput("That message is not on the active branch of this session.")
        raise NotFoundError("No such message in this session.")
    message = path[index]
    if part_id:
        part = next((p for p in message.loaded_parts if p.id == part_id), None)
        if part is None:
            raise NotFoundError("No such part in this message.")
        earlier = [
            p
            for p in message.loaded_parts
            if p.order < part.order and p.type in (Part.Type.TEXT, Part.Type.TOOL)
        ]
        if earlier:
            return Boundary(index, message, part)
    start = index
    while start > 0 and path[start].role != Message.Role.USER:
        start -= 1
    if path[start].role != Message.Role.USER:
        start = index
    return Boundary(start, path[start], None)


def reverted_parts(path: list[Message], boundary: Boundary) -> list[Part]:
    """Every part from the boundary on, in conversation order."""
    result = []
    for i, message in enumerate(path[boundary.index :]):
        for part in message.loaded_parts:
            if i == 0 and boundary.part is not None and part.order < boundary.part.order:
                continue
            result.append(part)
    return result


def _sources(parts: list[Part]) -> dict[str, str]:
    """File → the tree to take it from: the first reverted patch naming it wins (rule 3.2)."""
    sources: dict[str, str] = {}
    for part in parts:
        if part.type == Part.Type.PATCH:
            for name in part.data.get("files", []):
                sources.setdefault(name, part.data["snapshot"])
    return sources


@dataclass(frozen=True)
class RevertPlan:
    boundary: Boundary
    current: str  # the worktree's tree now
    pre: str  # the tree before the (first pending) revert
    target: str  # the tree the revert leads to
    files: list[str]  # the files the reverted patches name


def _plan(session: Session, message_id: str, part_id: str | None) -> RevertPlan:
    path = active_path(session)
    boundary = find_boundary(path, session, message_id, part_id)
    snap = snapshots.for_session(session)
    current = snap.peek()  # the preview may run beside a loop: never its index
    pending = session.revert or {}
    pre = pending.get("snapshot") or current
    sources = _sources(reverted_parts(path, boundary))
    target = snap.compose(current, _with_previous(sources, pending, pre))
    return RevertPlan(boundary, current, pre, target, sorted(sources))


MODES = ("both", "conversation", "files")
FILES_REVERT = "files-revert"  # the history event of a ``files`` rewind


def plan_revert(
    *, session: Session, message_id: str, part_id: str | None = None, mode: str = "both"
) -> dict:
    """What a revert would do, without doing it: the boundary and the per-file diff (what
    the files would go through: none for ``conversation``, now → target for ``files``)."""
    if mode == "files":
        _no_pending_revert(session)
    plan = _plan(session, message_id, part_id)
    snap = snapshots.for_session(session)
    if mode == "conversation":
        diff: list[dict] = []
    else:
        diff = snap.diff_stat(plan.current if mode == "files" else plan.pre, plan.target)
    return {
        "message_id": plan.boundary.message.id,
        "part_id": plan.boundary.part.id if plan.boundary.part else None,
        "mode": mode,
        "diff": diff,
        "not_kept": not_kept(snap),
    }


def _no_pending_revert(session: Session) -> None:
    if session.revert:
        raise ConflictError(
            "A revert is pending: unrevert or confirm it before rewinding the files only."
        )


NOT_KEPT_LISTED = 50


def not_kept(snap: snapshots.Snapshots) -> dict:
    """The worktree's files the snapshots do not keep (over ``SNAPSHOT_MAX_FILE_BYTES``,
    ignored, ``SNAPSHOT_EXCLUDE``): a revert leaves them as they are. ``{count, files}``,
    at most ``NOT_KEPT_LISTED`` of them named."""
    try:
        skipped = snap.skipped()
    except snapshots.SnapshotError:
        skipped = []
    return {"count": len(skipped), "files": skipped[:NOT_KEPT_LISTED]}


def _with_previous(sources: dict[str, str], pending: dict, pre: str) -> dict[str, str]:
    # Files the pending revert restored that this one does not go back to the pre-revert
    # version (rule 3.4: the boundary moves, from the same pre-revert snapshot).
    merged = dict(sources)
    for name in pending.get("files", []):
        merged.setdefault(name, pre)
    return merged


def revert_session(
    *,
    session: Session,
    message_id: str,
    part_id: str | None = None,
    mode: str = "both",
    user=None,  # noqa: ANN001
) -> Session:
    if mode not in MODES:
        raise InvalidInput("mode must be 'both', 'conversation' or 'files'.")
    if mode == "files":
        return rewind_files(session=session, message_id=message_id, part_id=part_id, user=user)
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        plan = _plan(locked, message_id, part_id)
        boundary, pre, target = plan.boundary, plan.pre, plan.target
        snap = snapshots.for_session(locked)
        files = plan.files
        if mode == "conversation":
            # The files stay as they are: what an earlier pending revert restored, if any.
            target, files = plan.current, (locked.revert or {}).get("files", [])
        moving = mode == "both"
        with follow.writing(snap, plan.current) if moving else nullcontext():
            if moving:
                snap.checkout(target, snap.patch(plan.current, target))
            same = not moving and pre == target  # nothing to tell: no git call
            diff = [] if same else snap.diff_stat(pre, target)
            locked.revert = {
                "message_id": boundary.message.id,
                "part_id": boundary.part.id if boundary.part else None,
                "mode": mode,
                "snapshot": pre,
                "diff": "" if same else snap.diff_text(pre, target),
                "files": files,
                "changes": diff,
                # What it left alone: files no snapshot holds (SEMANTICS 13.3).
                "not_kept": not_kept(snap),
            }
            fields = ["revert", "updated_at"]
            if moving:
                locked.summary = changes_summary(snap, path_start(active_path(locked)), target)
                fields.append("summary")
            locked.save(update_fields=fields)
            HistoryEvent.objects.create(
                session=locked,
                kind="revert",
                created_by=user,
                data={
                    "message_id": boundary.message.id,
                    "part_id": locked.revert["part_id"],
                    "mode": mode,
                    "snapshot": pre,
                    "files": files,
                },
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if moving:
                events.publish_on_commit(
                    locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
                )
    return locked


def rewind_files(
    *,
    session: Session,
    message_id: str,
    part_id: str | None = None,
    user=None,  # noqa: ANN001
) -> Session:
    """Rewind mode ``files``: the files go to the tree a revert to that point gives, the
    conversation stays. A history event records the trees before and after, so ``unrevert``
    can put them back (``_undo_files_rewind``)."""
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        _no_pending_revert(locked)
        plan = _plan(locked, message_id, part_id)
        current, target = plan.current, plan.target
        snap = snapshots.for_session(locked)
        with follow.writing(snap, current):
            snap.checkout(target, snap.patch(current, target))
            diff = snap.diff_stat(current, target)
            locked.summary = changes_summary(snap, path_start(active_path(locked)), target)
            locked.save(update_fields=["summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind=FILES_REVERT,
                created_by=user,
                data={
                    "message_id": plan.boundary.message.id,
                    "part_id": plan.boundary.part.id if plan.boundary.part else None,
                    "files_before": current,
                    "files_after": target,
                    "files": plan.files,
                },
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            events.publish_on_commit(
                locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
            )
    return locked


def unrevert_session(*, session: Session, user=None) -> Session:  # noqa: ANN001
    """Undo the pending revert (its files too, unless it never moved them: a
    ``conversation`` rewind); with none pending, undo a ``files`` rewind that is the
    session's latest history move."""
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if not locked.revert:
            return _undo_files_rewind(locked, follow, user)
        revert = locked.revert
        if revert.get("mode") == "conversation" and not revert.get("files"):
            locked.revert = None
            locked.save(update_fields=["revert", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind="unrevert",
                created_by=user,
                data={"snapshot": revert["snapshot"], "mode": "conversation"},
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            return locked
        snap = snapshots.for_session(locked)
        current = snap.track()
        pre = revert["snapshot"]
        diff = snap.diff_stat(current, pre)
        with follow.writing(snap, current):
            snap.restore(pre)
            locked.revert = None
            locked.summary = changes_summary(snap, path_start(active_path(locked)), pre)
            locked.save(update_fields=["revert", "summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked, kind="unrevert", created_by=user, data={"snapshot": pre}
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if diff:
                events.publish_on_commit(
                    locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
                )
    return locked


def _undo_files_rewind(locked: Session, follow: FilesFollow, user) -> Session:  # noqa: ANN001
    """Under the session row lock: when the session's latest history event is a ``files``
    rewind and the files are still what it left, they go back to what they were before it
    (409 when they changed since); otherwise nothing to undo."""
    last = HistoryEvent.objects.filter(session=locked).order_by("-id").first()
    if last is None or last.kind != FILES_REVERT:
        return locked
    snap = snapshots.for_session(locked)
    current = snap.track()
    before, after = last.data["files_before"], last.data["files_after"]
    if current != after:
        raise ConflictError(
            "The files changed since they were rewound: rewind them again to the point you want."
        )
    diff = snap.diff_stat(current, before)
    with follow.writing(snap, current):
        snap.restore(before)
        locked.summary = changes_summary(snap, path_start(active_path(locked)), before)
        locked.save(update_fields=["summary", "updated_at"])
        HistoryEvent.objects.create(
            session=locked,
            kind="unrevert",
            created_by=user,
            data={"snapshot": before, "mode": "files", "files_revert_id": last.id},
        )
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
        if diff:
            events.publish_on_commit(
                locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
            )
    return locked


def cleanup_session(
    *,
    session: Session,
    user=None,
    holder_run_id: str | None = None,  # noqa: ANN001
    fence: Callable[[], None] | None = None,
) -> Session:
    """Rule 3.6. ``holder_run_id``: a prompt run that holds the lock cleans up first (1.3);
    ``fence`` (that run's execution) raises inside the transaction when the execution does
    not own its run any more (runs_app/fencing.py): then nothing is cleaned up."""
    with transaction.atomic():
        locked = lock.lock_idle_session(session.id, holder_run_id=holder_run_id)
        if fence is not None:
            fence()
        revert = locked.revert
        if not revert:
            return locked
        path = active_path(locked)
        index = next((i for i, m in enumerate(path) if m.id == revert["message_id"]), None)
        removed_parts: list[Part] = []
        if index is None:  # the boundary left the path (head switched): nothing to delete
            doomed: list[Message] = []
        elif revert.get("part_id"):
            message = path[index]
            cut = next((p for p in message.loaded_parts if p.id == revert["part_id"]), None)
            removed_parts = [p for p in message.loaded_parts if cut and p.order >= cut.order]
            doomed = path[index + 1 :]
            locked.head_id = message.id
        else:
            doomed = path[index:]
            locked.head_id = path[index - 1].id if index > 0 else None
        doomed_ids = _with_descendants(locked, [m.id for m in doomed])
        Part.objects.filter(id__in=[p.id for p in removed_parts]).delete()
        Message.objects.filter(id__in=doomed_ids).delete()
        locked.revert = None
        snap = snapshots.for_session(locked)
        # The path lost what lay after the boundary; the files stay the reverted ones.
        locked.summary = changes_summary(snap, path_start(active_path(locked)), snap.peek())
        locked.save(update_fields=["revert", "summary", "head", "updated_at"])
        HistoryEvent.objects.create(
            session=locked,
            kind="cleanup",
            created_by=user,
            run_id=holder_run_id,
            data={
                "message_id": revert["message_id"],
                "part_id": revert.get("part_id"),
                "removed_messages": doomed_ids,
                "removed_parts": [p.id for p in removed_parts],
            },
        )
        for part in removed_parts:
            events.publish_on_commit(
                locked.id, events.PART_REMOVED, message_id=part.message_id, part_id=part.id
            )
        for mid in doomed_ids:
            events.publish_on_commit(locked.id, events.MESSAGE_REMOVED, message_id=mid)
        events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    return locked


def _with_descendants(session: Session, ids: list[str]) -> list[str]:
    """``ids`` and every message below them (other branches hang off them and go too)."""
    if not ids:
        return []
    children: dict[str | None, list[str]] = {}
    for mid, parent in Message.objects.filter(session=session).values_list("id", "parent_id"):
        children.setdefault(parent, []).append(mid)
    result, stack, seen = [], list(ids), set()
    while stack:
        mid = stack.pop()
        if mid in seen:
            continue
        seen.add(mid)
        result.append(mid)
        stack.extend(children.get(mid, []))
    return sorted(result)


def _diff_range(session: Session, message_id: str | None) -> tuple[str, str] | None:
    """The trees a diff goes between: the first snapshot of the session's active path (or of
    one turn) and now (or that turn's last snapshot)."""
    path = active_path(session)
    snap = snapshots.for_session(session)
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
    return first, snap.peek()  # a read: never the index the loop is using


def path_start(path: list[Message]) -> str | None:
    """The files before the first step of ``path`` (messages with their parts): where the
    changes of a session, or of a turn, are counted from."""
    return next(
        (p.data["snapshot"] for m in path for p in m.loaded_parts if p.type == "step-start"),
        None,
    )


def session_diff(*, session: Session, message_id: str | None = None) -> list[dict]:
    """Files changed in the whole session (first snapshot → now) or in one turn."""
    with _objects_found():
        span = _diff_range(session, message_id)
        return snapshots.for_session(session).diff_stat(*span) if span else []


@contextmanager
def _objects_found() -> Iterator[None]:
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
    return snapshots.summary_of(snap.diff_stat(start, now) if start else [])


def session_file_diff(*, session: Session, file: str, message_id: str | None = None) -> dict:
    """One file's unified diff over the same span (the diff viewer). ``file`` must be a plain
    relative path: git answers a name outside the tree (``../x``) with an error of its own."""
    try:
        plain_relative(file)
    except ValueError as exc:
        raise InvalidInput(f"file: {exc}") from exc
    with _objects_found():
        span = _diff_range(session, message_id)
        text = snapshots.for_session(session).diff_text(*span, paths=[file]) if span else ""
    return {"file": file, "patch": text}
