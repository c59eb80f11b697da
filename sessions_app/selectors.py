"""Reads: fetch-and-authorize helpers, the active path, and the JSON shapes of the contract."""

from __future__ import annotations

from typing import Any

from django.http import Http404

from .models import Message, Part, Session


def session_for_user(user, session_id: str, *, for_update: bool = False) -> Session:  # noqa: ANN001
    """The session if ``user`` may see it; 404 otherwise (no existence leak)."""
    if not getattr(user, "is_authenticated", False):
        raise Http404("No such session.")
    qs = Session.objects.filter(id=session_id, owner_id=user.pk)
    if for_update:
        qs = qs.select_for_update()
    session = qs.first()
    if session is None:
        raise Http404("No such session.")
    return session


def sessions_for_user(user, query: str = ""):  # noqa: ANN001, ANN201
    sessions = Session.objects.filter(owner_id=user.pk).order_by("-id")
    if query:
        sessions = sessions.filter(title__icontains=query)
    return sessions


def path_ids(leaf_id: str | None) -> list[str]:
    """Ids of the messages root → ``leaf_id``: one indexed query for the session's
    (id, parent) pairs, then a walk in memory. A recursive CTE was tried first; PostgreSQL
    plans it as one full scan per level when the table's statistics are stale (a 2,000-message
    path took ~1 s until ANALYZE), while this stays linear whatever the planner knows."""
    if not leaf_id:
        return []
    session_id = Message.objects.filter(id=leaf_id).values_list("session_id", flat=True).first()
    if session_id is None:
        return []
    parents = dict(
        Message.objects.filter(session_id=session_id).values_list("id", "parent_id").iterator()
    )
    path = []
    current: str | None = leaf_id
    while current is not None and current in parents and len(path) <= len(parents):
        path.append(current)
        current = parents[current]
    path.reverse()
    return path


def messages_with_parts(ids: list[str]) -> list[Message]:
    """Messages in ``ids`` order with their parts attached (two queries, whatever the size)."""
    if not ids:
        return []
    by_id = {m.id: m for m in Message.objects.filter(id__in=ids)}
    parts: dict[str, list[Part]] = {}
    for part in Part.objects.filter(message_id__in=ids).order_by("message_id", "order"):
        parts.setdefault(part.message_id, []).append(part)
    result = []
    for mid in ids:
        message = by_id.get(mid)
        if message is not None:
            message.loaded_parts = parts.get(mid, [])
            result.append(message)
    return result


def active_path(session: Session, leaf_id: str | None = None) -> list[Message]:
    return messages_with_parts(path_ids(leaf_id if leaf_id is not None else session.head_id))


def message_tree(session: Session) -> list[dict[str, Any]]:
    """Every message of the session, without parts: what a branch switcher needs (one query)."""
    rows = Message.objects.filter(session=session).order_by("id")
    return [
        {"id": mid, "parent_id": parent, "role": role, "run_id": run, "hidden": hidden}
        for mid, parent, role, run, hidden in rows.values_list(
            "id", "parent_id", "role", "run_id", "hidden"
        ).iterator()
    ]


def all_messages(session: Session) -> list[Message]:
    ids = list(Message.objects.filter(session=session).order_by("id").values_list("id", flat=True))
    return messages_with_parts(ids)


def files_at(path: list[Message], keep: int) -> str | None:
    """The worktree's tree after the first ``keep`` messages of ``path``: what the last step
    before the cut left, else what the first step after it found; None when no step ran."""
    for message in reversed(path[:keep]):
        for part in reversed(message.loaded_parts):
            if part.type == Part.Type.STEP_FINISH and part.data.get("snapshot"):
                return part.data["snapshot"]
    for message in path[keep:]:
        for part in message.loaded_parts:
            if part.type == Part.Type.STEP_START and part.data.get("snapshot"):
                return part.data["snapshot"]
    return None


# -- the contract's JSON shapes ---------------------------------------------------------------
def _iso(value) -> str | None:  # noqa: ANN001
    return value.isoformat().replace("+00:00", "Z") if value else None


def session_data(session: Session) -> dict[str, Any]:
    return {
        "id": session.id,
        "title": session.title,
        "owner": session.owner_id,
        "status": session.status,
        "busy_run_id": session.busy_run_id,
        "head_message_id": session.head_id,
        "revert": session.revert,
        "summary": session.summary or {"additions": 0, "deletions": 0, "files": 0},
        "forked_from_session_id": session.forked_from_session_id,
        "forked_from_message_id": session.forked_from_message_id,
        "model": session.model,
        "system_prompt": session.system_prompt,
        "checkpoint": session.checkpoint,
        "context_tokens": session.context_tokens,
        "created_at": _iso(session.created_at),
        "updated_at": _iso(session.updated_at),
    }


def part_data(part: Part) -> dict[str, Any]:
    data: dict[str, Any] = {
        "id": part.id,
        "message_id": part.message_id,
        "session_id": part.session_id,
        "order": part.order,
        "type": part.type,
    }
    if part.type in (Part.Type.TEXT, Part.Type.REASONING):
        data["text"] = part.text
    if part.type == Part.Type.TOOL:
        data["call_id"] = part.call_id
        data["tool"] = part.tool
        data["state"] = part.state or {}
    if part.data:
        data.update(part.data)
    return data


def message_data(message: Message, parts: list[Part] | None = None) -> dict[str, Any]:
    if parts is None:
        parts = getattr(message, "loaded_parts", None)
        if parts is None:
            parts = list(message.parts.order_by("order"))
    return {
        "id": message.id,
        "session_id": message.session_id,
        "run_id": message.run_id,
        "parent_id": message.parent_id,
        "role": message.role,
        "created_at": _iso(message.created_at),
        "completed_at": _iso(message.completed_at),
        "error": message.error,
        "model": message.model,
        "tokens": message.tokens or {},
        "hidden": message.hidden,
        "parts": [part_data(p) for p in parts],
    }


def lineage(session: Session, user) -> dict[str, Any]:  # noqa: ANN001
    """The session's place among forks, as far as ``user`` may see: the chain of parents and
    the sessions forked from it (the caller's own only)."""

    def brief(s: Session) -> dict[str, Any]:
        return {
            "id": s.id,
            "title": s.title,
            "forked_from_session_id": s.forked_from_session_id,
            "forked_from_message_id": s.forked_from_message_id,
            "created_at": _iso(s.created_at),
        }

    ancestors = []
    current, seen = session, {session.id}
    while current.forked_from_session_id and current.forked_from_session_id not in seen:
        parent = Session.objects.filter(id=current.forked_from_session_id, owner_id=user.pk).first()
        if parent is None:
            break
        ancestors.append(brief(parent))
        seen.add(parent.id)
        current = parent
    forks = Session.objects.filter(forked_from_session=session, owner_id=user.pk).order_by("id")
    return {
        "session": brief(session),
        "ancestors": list(reversed(ancestors)),
        "forks": [brief(s) for s in forks],
    }
