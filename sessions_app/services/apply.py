"""Apply a change from elsewhere onto the head (docs/semantics.md §14.2): the change one tool call
made (its step's before-snapshot → after-snapshot, restricted to the paths a file tool names;
a shell call's whole step, as its writes are not told apart), or a whole step's, or a whole
turn's, from any branch of this
session or of another session of the caller's (a fork, an alternative), merged three-way into
the head's files by git's own merge in the snapshot store (``Snapshots.merge_trees``).

It is a history event like the others: a message on the head's path whose ``applied`` part
names the source, whose ``patch`` part lists the files it changed, and whose step snapshots
are the files before and after, so a revert to it (or before it) undoes it and an unrevert
brings it back. Conflicts are named per file: refused by default (409, nothing written), or
written with conflict markers when the caller asks.
"""

from __future__ import annotations

from contextlib import nullcontext
from dataclasses import dataclass

from django.db import transaction
from django.utils import timezone

from core.errors import ConflictError, InvalidInput, NotFoundError
from realtime import events
from workspace import replication, snapshots, trees

from ..models import HistoryEvent, Message, Part, Session
from ..selectors import active_path, message_data, session_data
from . import lock
from .changes import changes_summary, path_start
from .files_follow import FilesFollow
from .sessions import newest_leaf

ON_CONFLICT = ("refuse", "markers")
SCOPES = ("call", "step")
# The tools of runs_app/tools.py that change only the file ``input.path`` names, and those
# that change no file; any other tool (``shell``) applies its whole step.
FILE_TOOLS = ("write", "append", "delete")
NO_CHANGE_TOOLS = ("read", "list", "wait")
FILES_NAMED = 50  # in the message's text; the patch part lists them all


@dataclass(frozen=True)
class Change:
    """What to apply: the trees before and after, and where it came from."""

    before: str
    after: str
    session: Session
    message: Message
    part: Part | None
    label: str
    scope: str = "turn"
    # With scope "call": the only files taken from ``before`` → ``after``.
    paths: tuple[str, ...] = ()


def _readable(session_id: str, user) -> Session:  # noqa: ANN001
    session = Session.objects.filter(id=session_id, owner_id=user.pk).first()
    if session is None:
        raise NotFoundError("No such part or message.")
    return session


def _step_of(message: Message, part: Part) -> tuple[str, str]:
    """The snapshots around ``part``'s step: the last step-start before it, the first
    step-finish after it."""
    parts = message.loaded_parts
    start = next(
        (p for p in reversed(parts) if p.order < part.order and p.type == Part.Type.STEP_START),
        None,
    )
    finish = next(
        (p for p in parts if p.order > part.order and p.type == Part.Type.STEP_FINISH), None
    )
    if start is None or finish is None or not finish.data.get("snapshot"):
        raise InvalidInput("That tool call's step did not finish: it has no change to apply.")
    return start.data["snapshot"], finish.data["snapshot"]


def call_paths(part: Part) -> tuple[str, ...]:
    """The file a file tool's call names (``input.path``, its empty and '.' segments
    dropped, as the tool resolves it); () for any other call."""
    path = ((part.state or {}).get("input") or {}).get("path")
    if part.tool not in FILE_TOOLS or not isinstance(path, str):
        return ()
    name = "/".join(p for p in path.strip().split("/") if p not in ("", "."))
    return (name,) if name else ()


def _call_change(part: Part, session: Session, scope: str) -> Change:
    """A tool call's change: its own file's (``scope`` "call", a file tool), else its
    step's."""
    if part.type != Part.Type.TOOL:
        raise InvalidInput("part_id must name a tool call.")
    if part.tool in NO_CHANGE_TOOLS:
        raise InvalidInput(f"A {part.tool} call changes no file: it has nothing to apply.")
    message = Message.objects.get(id=part.message_id)
    message.loaded_parts = list(message.parts.order_by("order"))
    before, after = _step_of(message, part)
    paths = call_paths(part)
    if scope == "call" and part.tool in FILE_TOOLS:
        if not paths:
            raise InvalidInput(f"That {part.tool} call names no file: it has nothing to apply.")
        label = f"the {part.tool} {', '.join(paths)} call"
        return Change(before, after, session, message, part, label, "call", paths)
    return Change(before, after, session, message, part, f"the {part.tool} step", "step")


def source_change(
    *,
    part_id: str | None,
    message_id: str | None,
    user,  # noqa: ANN001
    scope: str = "call",
) -> Change:
    """The change ``part_id`` (a tool call: its own, or its step's with ``scope`` "step")
    or ``message_id`` (its turn's) made, in a session of ``user``'s."""
    if bool(part_id) == bool(message_id):
        raise InvalidInput("Give part_id (one tool call's change) or message_id (a turn's).")
    if scope not in SCOPES:
        raise InvalidInput("scope must be one of call, step.")
    if part_id:
        part = Part.objects.filter(id=part_id).first()
        if part is None:
            raise NotFoundError("No such part or message.")
        return _call_change(part, _readable(part.session_id, user), scope)
    message = Message.objects.filter(id=message_id).first()
    if message is None:
        raise NotFoundError("No such part or message.")
    session = _readable(message.session_id, user)
    path = active_path(session, leaf_id=newest_leaf(message).id)
    index = next(i for i, m in enumerate(path) if m.id == message.id)
    start = index
    while start > 0 and path[start].role != Message.Role.USER:
        start -= 1
    end = index + 1
    while end < len(path) and path[end].role != Message.Role.USER:
        end += 1
    turn = [p for m in path[start:end] for p in m.loaded_parts]
    starts = [p.data["snapshot"] for p in turn if p.type == Part.Type.STEP_START]
    finishes = [p.data.get("snapshot") for p in turn if p.type == Part.Type.STEP_FINISH]
    if not starts or not finishes or not finishes[-1]:
        raise InvalidInput("That turn made no step with files: it has no change to apply.")
    return Change(starts[0], finishes[-1], session, path[start], None, "the turn", "turn")


def _fetch_source(session: Session, change: Change) -> None:
    """A change of another session that lives on another host (issue 45): its trees are in
    the central store, not in this host's store; its replicated ref is fetched (as an adopt
    fetches its fork's). One host, or a shared volume: the host's store holds them all."""
    if change.session.id == session.id:
        return
    if not (replication.enabled() and change.session.replicated_commit):
        return
    snap = snapshots.for_session(session)
    snap.ensure()
    wanted = (change.before, change.after)
    if all(snap.run(["cat-file", "-e", f"{t}^{{tree}}"]).code == 0 for t in wanted):
        return
    try:
        replication.fetch(snap, change.session.id)
    except replication.ReplicationError as exc:
        raise ConflictError(f"That change's files cannot be fetched: {exc}") from None


def apply_change(
    *,
    session: Session,
    user,  # noqa: ANN001
    part_id: str | None = None,
    message_id: str | None = None,
    on_conflict: str = "refuse",
    scope: str = "call",
) -> dict:
    """Merge the change into ``session``'s head: ``{applied, conflicts, message_id, scope,
    paths}`` (``paths``: the call's files with scope "call", else [])."""
    if on_conflict not in ON_CONFLICT:
        raise InvalidInput("on_conflict must be one of refuse, markers.")
    change = source_change(part_id=part_id, message_id=message_id, user=user, scope=scope)
    _fetch_source(session, change)
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if locked.revert:
            raise ConflictError("A revert is pending: unrevert or confirm it before applying.")
        if locked.status == Session.Status.PREPARING:
            raise ConflictError(lock.preparing_message(locked))
        snap = snapshots.for_session(locked)
        current = snap.track(journal=True)
        try:
            theirs = change.after
            if change.paths:
                # Only the call's files: the step's change on the others is left out.
                theirs = trees.compose(snap, change.before, dict.fromkeys(change.paths, theirs))
            merged, conflicts = trees.merge_trees(snap, change.before, current, theirs)
        except snapshots.MissingObjectError:
            raise NotFoundError(
                "That change needs snapshot content that is not in the store."
            ) from None
        if conflicts and on_conflict == "refuse":
            raise ConflictError(
                f"Applying {change.label} conflicts in {', '.join(conflicts[:FILES_NAMED])}: "
                'nothing was changed (on_conflict "markers" writes them with conflict markers).'
            )
        changed = snap.patch(current, merged) if merged != current else []
        with follow.writing(snap, current) if changed else nullcontext():
            if changed:
                snap.checkout(merged, changed)
            message = _record(locked, user, change, current, merged, changed, conflicts)
    return {
        "applied": changed,
        "conflicts": conflicts,
        "message_id": message.id,
        "scope": change.scope,
        "paths": list(change.paths),
    }


def _record(
    locked: Session,
    user,  # noqa: ANN001
    change: Change,
    before: str,
    after: str,
    changed: list[str],
    conflicts: list[str],
) -> Message:
    """The history event: a message on the head's path (revert to it undoes the apply)."""
    where = "" if change.session.id == locked.id else f" of “{change.session.title}”"
    named = ", ".join(changed[:FILES_NAMED]) + (" …" if len(changed) > FILES_NAMED else "")
    text = f"Applied {change.label}{where}: {named or 'no file changed'}."
    if conflicts:
        text += f" Conflict markers in {', '.join(conflicts[:FILES_NAMED])}."
    message = Message.objects.create(
        session=locked,
        parent_id=locked.head_id,
        role=Message.Role.USER,
        completed_at=timezone.now(),
    )
    source = {
        "source_session_id": change.session.id,
        "source_message_id": change.message.id,
        "source_part_id": change.part.id if change.part else None,
        "scope": change.scope,
        "files": changed,
        "conflicts": conflicts,
    }
    rows = [
        (Part.Type.TEXT, text, {"source": "applied"}),
        (Part.Type.APPLIED, "", source),
        (Part.Type.STEP_START, "", {"snapshot": before, "step": 0}),
        (Part.Type.STEP_FINISH, "", {"snapshot": after, "step": 0}),
    ]
    if changed:
        rows.append((Part.Type.PATCH, "", {"snapshot": before, "files": changed}))
    parts = Part.objects.bulk_create(
        Part(message=message, session=locked, order=i, type=t, text=body, data=data)
        for i, (t, body, data) in enumerate(rows)
    )
    message.loaded_parts = parts
    locked.head = message
    snap = snapshots.for_session(locked)
    locked.summary = changes_summary(snap, path_start(active_path(locked)), after)
    locked.save(update_fields=["head", "summary", "updated_at"])
    HistoryEvent.objects.create(
        session=locked, kind="apply", created_by=user, data={**source, "message_id": message.id}
    )
    _announce(locked, message, snap, (before, after) if changed else None)
    return message


def _announce(
    locked: Session, message: Message, snap: snapshots.Snapshots, moved: tuple[str, str] | None
) -> None:
    """The events of the apply, after commit; ``session.diff`` when files moved."""
    events.publish_on_commit(
        locked.id, events.MESSAGE_UPDATED, message=message_data(message, message.loaded_parts)
    )
    events.publish_on_commit(locked.id, events.SESSION_UPDATED, session=session_data(locked))
    if moved:
        events.publish_on_commit(
            locked.id,
            events.SESSION_DIFF,
            diff=snap.diff_stat(*moved),
            summary=locked.summary,
        )
