"""Compare two points of a session (docs/semantics.md §14.1): from their common ancestor, the two
conversations and the files that differ between the snapshots recorded at each point.

Or a point of a session and one of another that shares its history (a fork and its source,
two forks or alternatives of one session): a fork copies the messages it starts from with
their role and creation time, so the longest start of the two paths whose messages agree on
both is the common ancestor, whichever session holds it and whoever made the fork.

A read: nothing is locked or written, and the worktree is never looked at (the snapshots
hold what each point left), so a pending revert or a run at work changes nothing here.

The cost does not grow with what is not shown: one query for the session's (id, parent)
pairs (the two paths and their common ancestor are walked in memory), one for the
snapshots its steps recorded, two for the messages shown (at most ``API_PAGE_MAX`` a side),
and one ``git diff-tree`` between the two trees, which skips every subtree they share.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from django.conf import settings

from core.errors import InvalidInput, NotFoundError
from workspace import snapshots
from workspace.worktree_files import plain_relative

from ..models import Message, Part, Session
from ..reads import snapshots_for_read
from ..selectors import _part_size, message_data, messages_with_parts
from .changes import objects_found


@dataclass(frozen=True)
class Points:
    """Two points — of one session, or of two sessions that share history (a fork and its
    source, two forks of one session) — the paths root → each (ids, each in its own
    session) and how many leading messages the two paths share."""

    a: str | None
    b: str | None
    path_a: list[str]
    path_b: list[str]
    shared: int

    @property
    def base(self) -> str | None:
        return self.path_a[self.shared - 1] if self.shared else None

    @property
    def base_b(self) -> str | None:
        return self.path_b[self.shared - 1] if self.shared else None


def _path(parents: dict[str, str | None], leaf: str | None) -> list[str]:
    path: list[str] = []
    current = leaf
    while current is not None and current in parents and len(path) <= len(parents):
        path.append(current)
        current = parents[current]
    path.reverse()
    return path


def _shared(path_a: list, path_b: list) -> int:
    shared = 0
    for x, y in zip(path_a, path_b, strict=False):
        if x != y:
            break
        shared += 1
    return shared


def _point(rows: dict, name: str, value: str | None) -> None:
    if value is not None and value not in rows:
        raise NotFoundError(f"{name}: no such message in this session.")


def find_points(session: Session, a: str | None, b: str | None) -> Points:
    """The two points and their common ancestor; ``a`` and ``b`` default to the head (none:
    the session's start). NotFoundError for an id that is not a message of this session."""
    parents = dict(Message.objects.filter(session_id=session.id).values_list("id", "parent_id"))
    a = a or session.head_id
    b = b or session.head_id
    _point(parents, "a", a)
    _point(parents, "b", b)
    path_a, path_b = _path(parents, a), _path(parents, b)
    return Points(a=a, b=b, path_a=path_a, path_b=path_b, shared=_shared(path_a, path_b))


def _events(session: Session) -> tuple[dict[str, str | None], dict[str, tuple]]:
    """(id → parent, id → what makes it one history event across copies: its role and the
    time it was made, which a fork, an adopt's source and an import keep)."""
    parents, events = {}, {}
    for mid, parent, role, created in Message.objects.filter(session_id=session.id).values_list(
        "id", "parent_id", "role", "created_at"
    ):
        parents[mid] = parent
        events[mid] = (role, created)
    return parents, events


def find_points_across(session: Session, a: str | None, other: Session, b: str | None) -> Points:
    """A point of ``session`` and one of ``other`` (each default its head): their common
    ancestor is the longest start the two paths share as history — the same messages,
    copied by a fork with their role and time (two queries, one a session)."""
    parents_a, events_a = _events(session)
    parents_b, events_b = _events(other)
    a = a or session.head_id
    b = b or other.head_id
    _point(parents_a, "a", a)
    if b is not None and b not in parents_b:
        raise NotFoundError("b: no such message in the other session.")
    path_a, path_b = _path(parents_a, a), _path(parents_b, b)
    shared = _shared([events_a[m] for m in path_a], [events_b[m] for m in path_b])
    return Points(a=a, b=b, path_a=path_a, path_b=path_b, shared=shared)


def _step_snapshots(session: Session) -> dict[str, list[tuple[int, str, str]]]:
    """Message id → its steps' ``(order, type, snapshot)``, in order (one query, the
    snapshot id only: not the rest of the steps' data)."""
    rows = (
        Part.objects.filter(
            session_id=session.id, type__in=(Part.Type.STEP_START, Part.Type.STEP_FINISH)
        )
        .order_by("message_id", "order")
        .values_list("message_id", "order", "type", "data__snapshot")
    )
    steps: dict[str, list[tuple[int, str, str]]] = {}
    for message_id, order, kind, snapshot in rows:
        if isinstance(snapshot, str) and snapshot:
            steps.setdefault(message_id, []).append((order, kind, snapshot))
    return steps


def _tree_at(path: list[str], steps: dict, other: list[str], other_steps: dict) -> str:
    """The files at the end of ``path``: what its last step left (as ``files_at`` says);
    when no step ran on it, the files the first step of ``other`` found (the session's
    start); else the empty tree."""
    for mid in reversed(path):
        for _order, kind, snapshot in reversed(steps.get(mid, [])):
            if kind == Part.Type.STEP_FINISH:
                return snapshot
    for mid in other:
        for _order, kind, snapshot in other_steps.get(mid, []):
            if kind == Part.Type.STEP_START:
                return snapshot
    return snapshots.EMPTY_TREE


def _bounded(ids: list[str]) -> tuple[list[str], bool]:
    """The first ``API_PAGE_MAX`` of ``ids`` (from the common ancestor on), and whether
    some were left out."""
    limit = settings.API_PAGE_MAX
    return ids[:limit], len(ids) > limit


def _side(message_id: str | None, ids: list[str], loaded: dict[str, Message], cut: bool) -> dict:
    # A side also stops at API_PAGE_MAX_BYTES of part fields, as a page of messages does
    # (always one message at least).
    budget, shown = settings.API_PAGE_MAX_BYTES, []
    for mid in ids:
        message = loaded.get(mid)
        if message is None:
            continue
        size = sum(_part_size(p) for p in message.loaded_parts)
        if shown and size > budget:
            cut = True
            break
        shown.append(message_data(message))
        budget -= size
    return {"message_id": message_id, "messages": shown, "truncated": cut}


@dataclass(frozen=True)
class _Resolved:
    points: Points
    tree_a: str
    tree_b: str
    other: Session | None


def _resolve(session: Session, a: str | None, b: str | None, other: Session | None) -> _Resolved:
    if other is None or other.id == session.id:
        if not a:
            raise InvalidInput("a: give a message of the session (or `other`: another session).")
        points = find_points(session, a, b)
        steps = other_steps = _step_snapshots(session)
        other = None
    else:
        points = find_points_across(session, a, other, b)
        steps, other_steps = _step_snapshots(session), _step_snapshots(other)
    return _Resolved(
        points=points,
        tree_a=_tree_at(points.path_a, steps, points.path_b, other_steps),
        tree_b=_tree_at(points.path_b, other_steps, points.path_a, steps),
        other=other,
    )


def _snap(session: Session, found: _Resolved) -> snapshots.Snapshots:
    """Where the two points' files are read. Across sessions, ``b``'s tree is fetched along
    the other session's lineage: the mirror, like the local store, is one store for both."""
    if found.other is None:
        return snapshots_for_read(session, found.tree_a, found.tree_b)
    snapshots_for_read(found.other, found.tree_b)
    return snapshots_for_read(session, found.tree_a)


def compare_points(
    *, session: Session, a: str | None, b: str | None = None, other: Session | None = None
) -> dict[str, Any]:
    """``{base, a: {message_id, messages, truncated}, b: {…}, files, files_truncated}``:
    the messages after the common ancestor on each side and the files that differ between
    the snapshots at ``a`` and at ``b`` (``b``: the head when not given). With ``other`` (a
    session of the caller's), ``b`` is a point of that session, and ``b.session_id`` and
    ``b.base`` (its copy of the common ancestor) say so."""
    found = _resolve(session, a, b, other)
    points = found.points
    side_a, cut_a = _bounded(points.path_a[points.shared :])
    side_b, cut_b = _bounded(points.path_b[points.shared :])
    loaded = {m.id: m for m in messages_with_parts(side_a + side_b)}
    with objects_found():
        stat = _snap(session, found).diff_stat(found.tree_a, found.tree_b)
    limit = settings.API_FILES_MAX
    files = [
        {
            "path": entry["file"],
            "status": entry["status"],
            "additions": entry["additions"],
            "deletions": entry["deletions"],
            "binary": entry["binary"],
        }
        for entry in stat[:limit]
    ]
    side_b_data = _side(points.b, side_b, loaded, cut_b)
    if found.other is not None:
        side_b_data.update(session_id=found.other.id, base=points.base_b)
    return {
        "base": points.base,
        "a": _side(points.a, side_a, loaded, cut_a),
        "b": side_b_data,
        "files": files,
        "files_truncated": len(stat) > limit,
    }


def compare_file(
    *,
    session: Session,
    a: str | None,
    file: str,
    b: str | None = None,
    other: Session | None = None,
) -> dict[str, str]:
    """One file's unified diff from the snapshot at ``a`` to the one at ``b`` (of ``other``
    when given). ``file`` must be a plain relative path (git answers ``../x`` with an error
    of its own)."""
    try:
        plain_relative(file)
    except ValueError as exc:
        raise InvalidInput(f"file: {exc}") from exc
    found = _resolve(session, a, b, other)
    with objects_found():
        patch = _snap(session, found).diff_text(found.tree_a, found.tree_b, paths=[file])
    return {"file": file, "patch": patch}
