"""What a revert to a point does, worked out before anything moves (docs/semantics.md §3.1–§3.4,
§14.5): the boundary in the conversation, the tree the files go to, the files the reverted patches
name, and the preview of it all (``plan_revert``). The revert itself (``revert``) and the
files-only rewind (``rewind``) both move by such a plan."""

from __future__ import annotations

from dataclasses import dataclass

from core.errors import ConflictError, InvalidInput, NotFoundError
from workspace import skipped_files, snapshots, trees

from ..models import Message, Part, Session
from ..selectors import active_path

MODES = ("both", "conversation", "files")
FILES_REVERT = "files-revert"  # the history event of a ``files`` rewind
NOT_KEPT_LISTED = 50


@dataclass(frozen=True)
class Boundary:
    index: int  # position of the boundary message in the active path
    message: Message
    part: Part | None  # set for a part-level boundary


def find_boundary(path: list[Message], session: Session, message_id: str, part_id: str | None):
    """docs/semantics.md §3.1: part-level when the message has an earlier text/tool part; otherwise
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
    """File → the tree to take it from: the first reverted patch naming it wins (docs/semantics.md
    §3.2)."""
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


def make_plan(session: Session, message_id: str, part_id: str | None) -> RevertPlan:
    """The plan of a revert of ``session`` to the boundary at ``message_id``/``part_id``."""
    path = active_path(session)
    boundary = find_boundary(path, session, message_id, part_id)
    snap = snapshots.for_session(session)
    current = snap.peek(journal=True)  # the preview may run beside a loop: never its index
    pending = session.revert or {}
    pre = pending.get("snapshot") or current
    sources = _sources(reverted_parts(path, boundary))
    target = trees.compose(snap, current, _with_previous(sources, pending, pre))
    return RevertPlan(boundary, current, pre, target, sorted(sources))


def plan_revert(
    *, session: Session, message_id: str, part_id: str | None = None, mode: str = "both"
) -> dict:
    """What a revert would do, without doing it: the boundary and the per-file diff (what
    the files would go through: none for ``conversation``, now → target for ``files``)."""
    if mode == "files":
        refuse_while_revert_pending(session)
    plan = make_plan(session, message_id, part_id)
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


def refuse_while_revert_pending(session: Session) -> None:
    """A files-only rewind needs no pending revert (409): the two would disagree on the
    files' tree to go back to."""
    if session.revert:
        raise ConflictError(
            "A revert is pending: unrevert or confirm it before rewinding the files only."
        )


def not_kept(snap: snapshots.Snapshots) -> dict:
    """The worktree's files the snapshots do not keep (over ``SNAPSHOT_MAX_FILE_BYTES``,
    ignored, ``SNAPSHOT_EXCLUDE``): a revert leaves them as they are. ``{count, files}``,
    at most ``NOT_KEPT_LISTED`` of them named."""
    try:
        skipped = skipped_files.skipped(snap)
    except snapshots.SnapshotError:
        skipped = []
    return {"count": len(skipped), "files": skipped[:NOT_KEPT_LISTED]}


def _with_previous(sources: dict[str, str], pending: dict, pre: str) -> dict[str, str]:
    # Files the pending revert restored that this one does not go back to the pre-revert
    # version (docs/semantics.md §3.4: the boundary moves, from the same pre-revert snapshot).
    merged = dict(sources)
    for name in pending.get("files", []):
        merged.setdefault(name, pre)
    return merged
