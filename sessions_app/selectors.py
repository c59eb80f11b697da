"""Reads: fetch-and-authorize helpers, the active path, and the JSON shapes of the contract."""

from __future__ import annotations

import io
import os
import stat
from dataclasses import dataclass
from typing import Any, BinaryIO

from django.conf import settings

from core.compiled import Compiled
from core.errors import InvalidInput, NotFoundError
from core.mode import holds_worktrees
from workspace import snapshots, worktree_files

from . import permissions, reads
from .models import HistoryEvent, Message, Part, Session

# Every session-scoped API request reads its session: compiled once (core/compiled.py).
_OWN_SESSION = Compiled(
    lambda id, owner_id: Session.objects.filter(id=id, owner_id=owner_id)[:1], id=str, owner_id=int
)
# Every run's start reads its path with these three.
_TREE = Compiled(
    lambda session_id: Message.objects.filter(session_id=session_id).values_list("id", "parent_id"),
    session_id=str,
)
_MESSAGES = Compiled(lambda ids: Message.objects.filter(id__in=ids), ids=list)
_PARTS = Compiled(
    lambda ids: Part.objects.filter(message_id__in=ids).order_by("message_id", "order"), ids=list
)


def session_for_user(user, session_id: str) -> Session:  # noqa: ANN001
    """The session if ``user`` may see it; NotFoundError otherwise (no existence leak)."""
    if not getattr(user, "is_authenticated", False):
        raise NotFoundError("No such session.")
    session = _OWN_SESSION.first(id=session_id, owner_id=user.pk)
    if session is None:
        raise NotFoundError("No such session.")
    return session


def part_for_user(user, part_id: str) -> Part:  # noqa: ANN001
    """The part if ``user`` owns its session; NotFoundError otherwise."""
    part = (
        Part.objects.filter(id=part_id, session__owner_id=user.pk).first()
        if getattr(user, "is_authenticated", False) and len(part_id) <= 40
        else None
    )
    if part is None:
        raise NotFoundError("No such part.")
    return part


def sessions_for_user(user, query: str = ""):  # noqa: ANN001, ANN201
    sessions = Session.objects.filter(owner_id=user.pk).order_by("-id")
    if query:
        sessions = sessions.filter(title__icontains=query)
    return sessions


def path_ids(leaf_id: str | None, session_id: str | None = None) -> list[str]:
    """Ids of the messages root → ``leaf_id`` (a message of ``session_id``, looked up when not
    given): one indexed query for the session's (id, parent) pairs, then a walk in memory.
    A recursive CTE was tried first; PostgreSQL plans it as one full scan per level when the
    table's statistics are stale (a 2,000-message path took ~1 s until ANALYZE), while this
    stays linear whatever the planner knows. A plain query, not ``iterator()``: on PostgreSQL
    that is a server-side cursor, four round trips (declare, fetch, fetch, close) at every
    run's start for pairs that libpq holds in memory at once anyway."""
    if not leaf_id:
        return []
    if session_id is None:
        session_id = Message.objects.filter(id=leaf_id).values_list("session_id", flat=True).first()
        if session_id is None:
            return []
    parents = dict(_TREE.rows(session_id=session_id))
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
    by_id = {m.id: m for m in _MESSAGES.all(ids=ids)}
    parts: dict[str, list[Part]] = {}
    for part in _PARTS.all(ids=ids):
        parts.setdefault(part.message_id, []).append(part)
    result = []
    for mid in ids:
        message = by_id.get(mid)
        if message is not None:
            message.loaded_parts = parts.get(mid, [])
            result.append(message)
    return result


def active_path(session: Session, leaf_id: str | None = None) -> list[Message]:
    """The messages root → ``leaf_id`` (the head when not given) of ``session``, with their
    parts; a leaf of another session gives an empty path."""
    leaf = leaf_id if leaf_id is not None else session.head_id
    return messages_with_parts(path_ids(leaf, session.id))


def message_tree(session: Session) -> list[dict[str, Any]]:
    """Every message of the session, without parts: what a branch switcher needs (one query)."""
    rows = Message.objects.filter(session=session).order_by("id")
    return [
        {"id": mid, "parent_id": parent, "role": role, "run_id": run, "hidden": hidden}
        for mid, parent, role, run, hidden in rows.values_list(
            "id", "parent_id", "role", "run_id", "hidden"
        )
    ]


def all_messages(session: Session) -> list[Message]:
    ids = list(Message.objects.filter(session=session).order_by("id").values_list("id", flat=True))
    return messages_with_parts(ids)


def worktree_entry(session: Session, path: str) -> list[dict[str, Any]] | BinaryIO:
    """``path`` in the session's worktree: a directory as the list of the files under it
    (``.git`` aside; at most ``API_FILES_MAX`` entries), a regular file opened for reading
    (the caller streams and closes it). Opened by descriptor, no link followed, no FIFO
    waited on (``worktree_files``). InvalidInput for a path that leaves the worktree, is too
    long, goes through a link or names a FIFO, socket or device; NotFoundError when there is
    nothing there.

    In a process that holds no worktree (``core.mode.holds_worktrees()`` False), the same
    answers are read from the session's files as the central store last received them
    (``current_tree``), through the mirror (``reads.tree_entry``): never ``WORKSPACE_ROOT``."""
    if not holds_worktrees():
        found = reads.tree_entry(session, current_tree(session), path)
        return found if isinstance(found, list) else io.BytesIO(found)
    root = session.worktree
    try:
        parts = worktree_files.parts_of(root, path)
        fd, found = worktree_files.open_entry(root, parts)
    except worktree_files.PathRefused as exc:
        raise InvalidInput(str(exc)) from exc
    except (FileNotFoundError, NotADirectoryError) as exc:
        raise NotFoundError("No such file.") from exc
    except PermissionError as exc:
        raise InvalidInput("The file cannot be read (its permissions refuse it).") from exc
    if not stat.S_ISDIR(found.st_mode):
        return os.fdopen(fd, "rb")  # a FileResponse streams and closes it
    return worktree_files.list_tree(root, parts, limit=settings.API_FILES_MAX, opened=fd)


def current_tree(session: Session) -> str:
    """The session's files now, as a process without worktrees knows them: the snapshot the
    central store last received (each step's and each history move's, ``replicas``), else
    the last snapshot of the active path (a session none of whose snapshots reached it)."""
    if session.replicated_snapshot:
        return session.replicated_snapshot
    path = active_path(session)
    return files_at(path, len(path)) or snapshots.EMPTY_TREE


def fork_point(source: Session, message_id: str | None) -> str | None:
    if message_id:
        if not Message.objects.filter(id=message_id, session=source).exists():
            raise NotFoundError("No such message in this session.")
        return message_id
    revert = source.revert or {}
    if revert.get("message_id"):
        # A pending revert hides what follows its boundary: the fork stops before it.
        boundary = Message.objects.filter(id=revert["message_id"]).first()
        if boundary is not None:
            return boundary.id if revert.get("part_id") else boundary.parent_id
    return source.head_id


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
        "lineage_kind": session.lineage_kind or None,
        "alternative_group": session.alternative_group or None,
        "model": session.model,
        "system_prompt": session.system_prompt,
        "checkpoint": session.checkpoint,
        "context_tokens": session.context_tokens,
        "usage": session.usage or {},
        "permissions": permissions.in_force(session.permissions),
        "source": source_data(session.source),
        "created_at": _iso(session.created_at),
        "updated_at": _iso(session.updated_at),
    }


SOURCE_FIELDS = ("type", "url", "ref", "branch", "depth", "commit", "error", "name", "files")


def source_data(source: dict | None) -> dict[str, Any]:
    """Where the worktree's first files came from (docs/semantics.md §13.1: ``source``); ``{"type":
    "empty"}`` for a session that started empty. Never a credential."""
    if not source:
        return {"type": "empty"}
    out = {k: source[k] for k in SOURCE_FIELDS if k in source}
    if out.get("type") == "git":
        out.setdefault("commit", None)
    return out


_CLIP_DEPTH = 32


def clip(value: Any, budget: int, depth: int = 0) -> tuple[Any, int, bool]:
    """``value`` with its strings cut and its lists and objects shortened so that it holds
    about ``budget`` characters at most: ``(value, size, cut)``. Keeps the shape (a dict
    stays a dict), so a client renders a cut part as it renders a whole one."""
    if isinstance(value, str):
        if len(value) > budget:
            return value[: max(budget, 0)], max(budget, 0), True
        return value, len(value), False
    if isinstance(value, dict | list):
        if depth >= _CLIP_DEPTH:
            return ("…" if isinstance(value, dict | list) else value), 1, True
        used, cut = 2, False
        items = value.items() if isinstance(value, dict) else enumerate(value)
        out: Any = {} if isinstance(value, dict) else []
        for key, item in items:
            if used >= budget:
                cut = True
                break
            item, size, item_cut = clip(item, budget - used, depth + 1)
            used += size + (len(key) + 4 if isinstance(key, str) else 1)
            cut = cut or item_cut
            if isinstance(out, dict):
                out[key] = item
            else:
                out.append(item)
        return out, used, cut
    return value, len(str(value)), False


def part_data(part: Part, *, whole: bool = False) -> dict[str, Any]:
    """A part as the API shows it. In lists and events each field (text, a tool's input,
    output, error, metadata, and the extra data) is cut to ``API_PART_FIELD_MAX`` characters
    with ``truncated: true``; ``whole`` (``GET /api/parts/{id}/``) gives everything."""
    limit = None if whole else settings.API_PART_FIELD_MAX
    cut = False

    def field(value: Any) -> Any:
        nonlocal cut
        if limit is None:
            return value
        value, _size, was_cut = clip(value, limit)
        cut = cut or was_cut
        return value

    data: dict[str, Any] = {
        "id": part.id,
        "message_id": part.message_id,
        "session_id": part.session_id,
        "order": part.order,
        "type": part.type,
    }
    if part.type in (Part.Type.TEXT, Part.Type.REASONING, Part.Type.COMPACTION):
        data["text"] = field(part.text)
    if part.type == Part.Type.TOOL:
        data["call_id"] = part.call_id
        data["tool"] = part.tool
        data["state"] = {key: field(value) for key, value in (part.state or {}).items()}
    if part.data:
        data.update({key: field(value) for key, value in part.data.items()})
    if cut:
        data["truncated"] = True
        if part.type == Part.Type.PATCH:
            data["file_count"] = len((part.data or {}).get("files") or [])  # before the cut
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


# -- pages ------------------------------------------------------------------------------------
@dataclass(frozen=True)
class MessagePage:
    """A window of a list of messages (the active path, or every message in id order): the
    messages, and the cursors of the pages before (older) and after (newer) it, if any."""

    messages: list[Message]
    before: str | None
    after: str | None


def page_limit(raw: Any) -> int:
    if raw in (None, ""):
        return settings.API_PAGE_DEFAULT
    try:
        limit = int(raw)
    except (TypeError, ValueError):
        limit = 0
    if not 1 <= limit <= settings.API_PAGE_MAX:
        raise InvalidInput(f"limit must be a whole number from 1 to {settings.API_PAGE_MAX}.")
    return limit


def message_page(
    ids: list[str], *, limit: int, before: str | None = None, after: str | None = None
) -> MessagePage:
    """The page of ``ids`` (in list order) nearest the end, or just before ``before``, or
    just after ``after``. A page also stops at ``API_PAGE_MAX_BYTES`` of part fields (always
    one message at least), dropping the messages farthest from where it is anchored."""
    if before and after:
        raise InvalidInput("Give before or after, not both.")
    position = {mid: i for i, mid in enumerate(ids)}
    cursor = before or after
    if cursor is not None and cursor not in position:
        raise InvalidInput("The cursor is not a message of this list.")
    if after:
        start = position[after] + 1
        window = ids[start : start + limit]
    else:
        end = position[before] if before else len(ids)
        start = max(0, end - limit)
        window = ids[start:end]
    messages = messages_with_parts(window)
    budget = settings.API_PAGE_MAX_BYTES
    kept: list[Message] = []
    for message in messages if after else reversed(messages):
        size = sum(_part_size(p) for p in message.loaded_parts)
        if kept and size > budget:
            break
        kept.append(message)
        budget -= size
    if not after:
        kept.reverse()
    if not kept:
        return MessagePage([], before=None, after=None)
    first, last = position[kept[0].id], position[kept[-1].id]
    return MessagePage(
        kept,
        before=kept[0].id if first > 0 else None,
        after=kept[-1].id if last < len(ids) - 1 else None,
    )


def _part_size(part: Part) -> int:
    """About how many characters the part takes in a list (its fields are cut there)."""
    limit = settings.API_PART_FIELD_MAX
    size = 200 + min(len(part.text), limit)
    for value in (*(part.state or {}).values(), *(part.data or {}).values()):
        size += clip(value, limit)[1]
    return size


def session_message_ids(session: Session, *, tree: bool) -> list[str]:
    """The ids a message list pages over: the active path, or every message (``tree``)."""
    if tree:
        return list(
            Message.objects.filter(session=session).order_by("id").values_list("id", flat=True)
        )
    return path_ids(session.head_id, session.id)


def lineage(session: Session, user) -> dict[str, Any]:  # noqa: ANN001
    """The session's place among forks, as far as ``user`` may see: the chain of parents and
    the sessions forked from it (the caller's own only)."""

    def brief(s: Session) -> dict[str, Any]:
        return {
            "id": s.id,
            "title": s.title,
            "forked_from_session_id": s.forked_from_session_id,
            "forked_from_message_id": s.forked_from_message_id,
            "lineage_kind": s.lineage_kind or ("fork" if s.forked_from_session_id else None),
            "alternative_group": s.alternative_group or None,
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
        "origin": None if ancestors else fork_origin(session),
    }


def fork_origin(session: Session) -> dict[str, Any] | None:
    """Where a fork whose source the caller may not open came from (a share of another
    user's, the admin's fork of it, or a deleted session): the kind, and the source's title
    and owner as they were when it was forked (its fork event). None for a session that is
    not a fork."""
    events = HistoryEvent.objects.filter(session=session, kind="fork").order_by("id")
    event = events.only("data").first()
    if event is None and not session.forked_from_session_id:
        return None
    data = event.data if event else {}
    return {
        "kind": session.lineage_kind or "fork",
        "session_id": session.forked_from_session_id,
        "title": data.get("source_title"),
        "owner": data.get("source_owner"),
    }
