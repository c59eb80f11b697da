"""Sharing (SEMANTICS 6): a link that pins a point of a session — its head and its files —
for others to read and fork, never to write. Re-sharing moves the pin (same link); revoking
makes the link answer 404. What the owner does later (revert, rollback, new turns) does not
change what the link shows: the pinned message's path is never deleted by those moves, and
the files come from the pinned snapshot, not the worktree."""

from __future__ import annotations

import json
from typing import Any

from django.conf import settings
from django.db import transaction
from django.http import Http404
from django.utils import timezone

from .. import snapshots
from ..errors import NotAuthenticated
from ..models import Session, Share
from ..selectors import active_path, files_at, message_data
from .fork import fork_point, fork_session


def share_session(*, session: Session, user) -> Share:  # noqa: ANN001
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
    if share is None:
        raise Http404("No such shared conversation.")
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
    }


def shared_data(share: Share) -> dict[str, Any]:
    """What a share shows: the pinned path, the pinned files, and what the conversation did
    to them (from the files before its first step to the pin)."""
    session = share.session
    path = active_path(session, leaf_id=share.message_id) if share.message_id else []
    snap = snapshots.for_session(session)
    start = files_at(path, 0) or snapshots.EMPTY_TREE
    tree = share.snapshot or snapshots.EMPTY_TREE
    return {
        **share_link(share),
        "session": {
            "id": session.id,
            "title": session.title,
            "owner": session.owner.get_username(),
            "model": session.model,
            "created_at": session.created_at.isoformat().replace("+00:00", "Z"),
        },
        "messages": [_readable(message_data(m)) for m in path],
        "files": snap.list_tree(tree),
        "diff": snap.diff_stat(start, tree),
    }


def _readable(message: dict[str, Any]) -> dict[str, Any]:
    for part in message["parts"]:
        if part["type"] == "tool":
            part["input_text"] = json.dumps(
                (part.get("state") or {}).get("input") or {}, ensure_ascii=False, indent=1
            )
    return message


def shared_file(share: Share, path: str) -> bytes:
    parts = path.split("/")
    if not path or any(p in ("", ".", "..") for p in parts):
        raise Http404("No such file in this shared conversation.")
    body = snapshots.for_session(share.session).read_blob(share.snapshot, path)
    if body is None:
        raise Http404("No such file in this shared conversation.")
    return body


def fork_shared(*, share: Share, user, title: str = "") -> Session:  # noqa: ANN001
    """The caller's own copy of what the share pins: chat and files, lineage to the source."""
    return fork_session(
        source=share.session,
        user=user,
        message_id=share.message_id,
        title=title or f"Fork of {share.session.title}".strip(),
        tree=share.snapshot or None,
    )
