"""Sharing (docs/semantics.md §6): a link that pins a point of a session — its head and its files —
for others to read and fork, never to write. Re-sharing moves the pin (same link); revoking
makes the link answer 404. What the owner does later (revert, rollback, new turns) does not
change what the link shows or what a fork of it copies: both read the pinned path (never the
head; a null pin is the empty conversation) and the pinned snapshot (never the worktree). A
cleanup that deletes the pinned message kills the link (404). The owner's system prompt goes
with the link only when shared with ``include_system_prompt``. Where the files first came from
stays the owner's: neither the link nor another user's fork of it shows or keeps a clone's
address (``withheld_clone_text``; the fork's ``source`` is ``{"type": "share"}``)."""

from __future__ import annotations

import json
import re
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core.errors import NotAuthenticated, NotFoundError
from workspace import snapshots, tree_reads
from workspace.worktree_files import PATH_MAX

from ..models import Message, Part, Session, Share
from ..reads import snapshots_for_read
from ..selectors import (
    active_path,
    files_at,
    fork_point,
    message_data,
    message_page,
    path_ids,
)


def share_session(
    *,
    session: Session,
    user,  # noqa: ANN001
    include_system_prompt: bool = False,
) -> Share:
    """Pin the session's head (before a pending revert's boundary) and the files there."""
    message_id = fork_point(session, None)
    path = active_path(session, leaf_id=message_id) if message_id else []
    tree = files_at(path, len(path)) or snapshots.EMPTY_TREE
    with transaction.atomic():
        share = (
            Share.objects.select_for_update()
            .filter(session=session, revoked_at__isnull=True)
            .order_by("created_at")
            .first()
        )
        if share is None:
            share = Share(session=session, created_by=user)
        share.message_id = message_id
        share.snapshot = tree
        share.include_system_prompt = include_system_prompt
        share.pinned_at = timezone.now()
        share.save()
    return share


def revoke_share(*, session: Session) -> int:
    return Share.objects.filter(session=session, revoked_at__isnull=True).update(
        revoked_at=timezone.now()
    )


def share_for_token(token: str, user, *, for_fork: bool = False) -> Share:  # noqa: ANN001
    """The live share behind ``token``: 404 for a wrong or revoked one; reading needs a login
    unless ``SHARE_ANONYMOUS_READ``, forking always does."""
    share = (
        Share.objects.select_related("session", "session__owner")
        .filter(token=token, revoked_at__isnull=True)
        .first()
        if isinstance(token, str) and len(token) <= 64
        else None
    )
    if share is None or (
        share.message_id
        and not Message.objects.filter(id=share.message_id, session_id=share.session_id).exists()
    ):
        # Revoked, or its pinned message is gone (a cleanup): never fall back to the head.
        raise NotFoundError("No such shared conversation.")
    if not getattr(user, "is_authenticated", False) and (
        for_fork or not settings.SHARE_ANONYMOUS_READ
    ):
        raise NotAuthenticated(
            "Log in to fork this conversation."
            if for_fork
            else "Log in to see this shared conversation."
        )
    return share


def share_link(share: Share) -> dict[str, Any]:
    return {
        "token": share.token,
        "url": f"/s/{share.token}/",
        "message_id": share.message_id,
        "snapshot": share.snapshot,
        "include_system_prompt": share.include_system_prompt,
        "pinned_at": share.pinned_at.isoformat().replace("+00:00", "Z"),
    }


def live_share(session: Session) -> Share | None:
    """The session's link, if it has one that is not revoked."""
    return (
        Share.objects.filter(session=session, revoked_at__isnull=True)
        .order_by("created_at")
        .first()
    )


def shared_data(
    share: Share, *, limit: int | None = None, before: str | None = None
) -> dict[str, Any]:
    """What a share shows: a page of the pinned path (the page nearest the pin first;
    ``before`` names the id of the older page), the pinned files, and what the
    conversation did to them (from the files before its first step to the pin)."""
    session = share.session
    ids = path_ids(share.message_id, share.session_id) if share.message_id else []
    page = message_page(ids, limit=limit or settings.API_PAGE_DEFAULT, before=before)
    start = _first_snapshot(ids) or snapshots.EMPTY_TREE
    tree = share.snapshot or snapshots.EMPTY_TREE
    snap = snapshots_for_read(session, start, tree)
    return {
        **share_link(share),
        "session": {
            "id": session.id,
            "title": session.title,
            "owner": session.owner.get_username(),
            "model": session.model,
            "system_prompt": session.system_prompt if share.include_system_prompt else None,
            "created_at": session.created_at.isoformat().replace("+00:00", "Z"),
        },
        "messages": [_readable(message_data(m)) for m in page.messages],
        "previous_before": page.before,
        "files": tree_reads.list_tree(snap, tree),
        "diff": snap.diff_stat(start, tree),
    }


def _first_snapshot(ids: list[str]) -> str | None:
    """The files before the path's first step (path order is id order)."""
    first = (
        Part.objects.filter(message_id__in=ids, type=Part.Type.STEP_START)
        .order_by("message_id", "order")
        .values_list("data", flat=True)
        .first()
    )
    return (first or {}).get("snapshot")


def _readable(message: dict[str, Any]) -> dict[str, Any]:
    # A compaction's message is the divider that opens to its summary, not a bubble.
    message["compaction"] = any(p["type"] == "compaction" for p in message["parts"])
    for part in message["parts"]:
        if part["type"] == "text" and part.get("source") == "git":
            part["text"] = withheld_clone_text(part["text"])
        if part["type"] == "tool":
            part["input_text"] = json.dumps(
                (part.get("state") or {}).get("input") or {}, ensure_ascii=False, indent=1
            )
    return message


# The clone's first message ("Cloned <url> (<ref>) at <commit>: N files, B bytes.") as anyone
# but the owner sees it: the repository's address (possibly private) and ref stay the owner's.
_CLONE_COUNTS = re.compile(r": ([\d,]+ files, [\d,]+ bytes\.)$")


def withheld_clone_text(text: str) -> str:
    counts = _CLONE_COUNTS.search(text or "")
    tail = f": {counts[1]}" if counts else "."
    return f"Cloned a repository (its address stays with the owner){tail}"


def withhold_clone_address(session: Session) -> int:
    """Another user's copy (a share fork): its clone message without the address."""
    rows = list(
        Part.objects.filter(session=session, type=Part.Type.TEXT, data__source="git").only(
            "id", "text"
        )
    )
    for part in rows:
        part.text = withheld_clone_text(part.text)
    return Part.objects.bulk_update(rows, ["text"]) if rows else 0


def shared_file(share: Share, path: str) -> bytes:
    parts = path.split("/")
    # Over PATH_MAX no file has that name, and as git's argument it can exceed the kernel's
    # limit for one (E2BIG, an OSError: a 500).
    if not path or any(p in ("", ".", "..") for p in parts) or len(path) >= PATH_MAX:
        raise NotFoundError("No such file in this shared conversation.")
    snap = snapshots_for_read(share.session, share.snapshot)
    body = snap.read_blob(share.snapshot, path)
    if body is None:
        raise NotFoundError("No such file in this shared conversation.")
    return body
