from __future__ import annotations

import logging
import re
import shutil
from collections.abc import Callable
from contextlib import nullcontext

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import mode
from core.errors import ConflictError, InvalidInput, NotFoundError, SessionBusyError
from quotas_app import services as quotas
from realtime import events
from workspace import change_journal, replication, snapshots

from .. import hosts
from ..models import HistoryEvent, Message, Session
from ..repositories.checks import check_repository
from ..repositories.jobs import hold_for_clone
from ..selectors import active_path, files_at, session_data
from . import lock
from .changes import changes_summary, path_start
from .files_follow import FilesFollow

log = logging.getLogger(__name__)
REMOVE_TASK = "sessions_app.remove_session_files"  # sessions_app/tasks.py


def create_session(
    *,
    owner,  # noqa: ANN001
    title: str = "",
    model: str = "",
    system_prompt: str = "",
    checkpoint: str = "",
    permissions: dict | None = None,
    repository: dict | None = None,
) -> Session:
    """A new session of ``owner``. The arguments' shape (a checkpoint mode of
    ``Session.Checkpoint``, a model name ``scripted`` or ``openai:<model>``) is the API's to
    check (``sessions_app.api.serializers.sessions.SessionIn``); empty means the default.
    ``repository`` ({url, ref, depth, credential_id}): the session starts ``preparing`` and
    its worktree is cloned by a job (``repositories/jobs.py``)."""
    checkpoint = checkpoint or Session.Checkpoint.TOOL_BATCH
    model = model or settings.AGENT_MODEL
    source = check_repository(owner, repository) if repository else {}
    if source and not title:
        title = source["url"].rstrip("/").rsplit("/", 1)[-1].removesuffix(".git")
    with transaction.atomic():
        check_session_quota(owner)
        session = Session.objects.create(
            owner=owner,
            title=title[:200] or "New session",
            model=model,
            system_prompt=system_prompt,
            checkpoint=checkpoint,
            permissions=permissions or {},
            source=source,
            host=hosts.place(),  # its home host: where its runs and clone go
        )
        if mode.holds_worktrees():  # else its home host makes it (rehome.on_claim)
            session.worktree.mkdir(parents=True, exist_ok=True)
        if source:
            hold_for_clone(session)
    return session


def check_session_quota(owner) -> None:  # noqa: ANN001
    """Refuse a new session (created, forked or imported) past the owner's session limit
    (their quota, their groups', else ``SESSIONS_PER_USER_MAX``: ``quotas_app.limits``).
    Call inside the transaction that creates it: the owner's row is locked, so two requests
    at once cannot both take the last place."""
    quotas.check_sessions(
        user_id=owner.pk, count=lambda: Session.objects.filter(owner_id=owner.pk).count()
    )


def free_title(owner, make: Callable[[int], str]) -> str:  # noqa: ANN001
    """The first of ``make(1)``, ``make(2)``, … that none of ``owner``'s sessions is titled:
    a fork or an import never shows in the list under a title already there. Call inside
    the transaction that saves the session, after ``check_session_quota`` (the owner's row
    is locked, so two forks at once do not both take the same number)."""
    for first in range(1, 10_000, 50):
        names = [make(n)[:200] for n in range(first, first + 50)]
        taken = set(
            Session.objects.filter(owner_id=owner.pk, title__in=names).values_list(
                "title", flat=True
            )
        )
        for name in names:
            if name not in taken:
                return name
    return make(1)[:200]


def fork_title(owner, source_title: str) -> str:  # noqa: ANN001
    """``Fork of <title>``, then ``Fork 2 of <title>``, … (docs/semantics.md §5.5)."""
    base = source_title.strip()[:180]
    return free_title(owner, lambda n: f"Fork of {base}" if n == 1 else f"Fork {n} of {base}")


IMPORTED = re.compile(r" \(imported(?: \d+)?\)$")


def imported_title(owner, title: str) -> str:  # noqa: ANN001
    """``<title> (imported)``, then ``<title> (imported 2)``, … (an export of an import is
    not ``(imported) (imported)``)."""
    base = IMPORTED.sub("", title.strip())[:180]
    if not base:
        return free_title(owner, lambda n: "Imported session" + (f" {n}" if n > 1 else ""))
    return free_title(owner, lambda n: f"{base} (imported)" if n == 1 else f"{base} (imported {n})")


def rename_session(*, session: Session, title) -> Session:  # noqa: ANN001
    if not isinstance(title, str) or not title.strip():
        raise InvalidInput("title must be a non-empty string.")
    if len(title) > 200:
        raise InvalidInput("title must be at most 200 characters.")
    Session.objects.filter(id=session.id).update(title=title.strip(), updated_at=timezone.now())
    session.refresh_from_db()
    events.publish_on_commit(session.id, events.SESSION_UPDATED, session=session_data(session))
    return session


def update_session(
    *,
    session: Session,
    title: str | None = None,
    model: str | None = None,
    permissions: dict | None = None,
) -> Session:
    """``PATCH``: the title, the model of the next runs and/or the session's own tool rules,
    in one transaction (each an UPDATE of its own column: a run's lock and head are never
    written back)."""
    with transaction.atomic():
        if title is not None:
            session = rename_session(session=session, title=title)
        if model is not None:
            Session.objects.filter(id=session.id).update(model=model, updated_at=timezone.now())
            session.refresh_from_db()
            events.publish_on_commit(
                session.id, events.SESSION_UPDATED, session=session_data(session)
            )
        if permissions is not None:
            session = set_permissions(session=session, rules=permissions)
    return session


def set_permissions(*, session: Session, rules: dict) -> Session:
    """Replace the session's own tool rules (checked by ``permissions.validate`` at the
    door). Allowed while a run waits: the calls still undecided are decided by the owner."""
    Session.objects.filter(id=session.id).update(permissions=rules, updated_at=timezone.now())
    session.refresh_from_db()
    events.publish_on_commit(session.id, events.SESSION_UPDATED, session=session_data(session))
    return session


def delete_session(*, session: Session) -> None:
    """Delete the session's rows, then its files where they are: here (a process that holds
    worktrees), or on its home host by a task on that host's queue once the deletion is
    committed (a web process that holds none: ``remove_files`` there)."""
    with transaction.atomic():
        locked = lock.lock_session(session.id)
        if locked.status != Session.Status.PREPARING and lock.is_busy(locked):
            raise SessionBusyError()
        # A clone in progress is cancelled: its job sees the session gone and stops git.
        sid, home, replicated = locked.id, locked.host, locked.replicated_commit
        locked.delete()
        if not (mode.embedded() or mode.holds_worktrees()):
            queue = mode.host_queue(home) if home else None  # else any host: the store's ref
            transaction.on_commit(
                lambda: mode.send_task(REMOVE_TASK, [sid, replicated], queue=queue)
            )
            return
    remove_files(sid, replicated)


def remove_files(session_id: str, replicated_commit: str = "") -> None:
    """(On the session's host, the session deleted.) Its worktree, snapshot git dir and
    journal removed (``rmtree`` removes a link, never what it points to), and its ref in the
    central store deleted while it still names ``replicated_commit`` (a failure is logged:
    the ref is then an orphan in the store, the files are removed all the same)."""
    gone = Session(id=session_id)
    if replication.enabled() and replicated_commit:
        try:
            snap = snapshots.for_session(gone)
            snap.ensure()
            replication.delete(snap, session_id, replicated_commit)
        except (replication.ReplicationError, snapshots.SnapshotError, OSError) as exc:
            log.warning("session %s: its ref in the central store kept: %s", session_id, exc)
    shutil.rmtree(gone.worktree, ignore_errors=True)
    shutil.rmtree(gone.snapshot_dir, ignore_errors=True)
    change_journal.remove(gone.worktree)


def newest_leaf(message: Message) -> Message:
    """The newest message in the subtree under ``message`` that has no children: one query
    for the session's (id, parent) pairs, then a walk in memory."""
    children: dict[str, list[str]] = {}
    for mid, parent in (
        Message.objects.filter(session_id=message.session_id)
        .values_list("id", "parent_id")
        .iterator()
    ):
        if parent:
            children.setdefault(parent, []).append(mid)
    leaves, stack = [], [message.id]
    while stack:
        mid = stack.pop()
        below = children.get(mid)
        if below:
            stack.extend(below)
        else:
            leaves.append(mid)
    newest = max(leaves)  # ids sort by creation time
    return message if newest == message.id else Message.objects.get(id=newest)


def switch_head(*, session: Session, message_id: str, user=None) -> Session:  # noqa: ANN001
    """Show another branch: the head moves to the newest leaf under ``message_id`` and the
    files go back to what that branch left (as a continue puts them back), so the Files panel
    never lists a file the shown branch did not make. What the worktree held before is
    recorded first, in the history event, so nothing is lost."""
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if locked.revert:
            raise ConflictError(
                "A revert is pending: unrevert or confirm it before switching branches."
            )
        message = Message.objects.filter(session=locked, id=message_id).first()
        if message is None:
            raise NotFoundError("No such message in this session.")
        previous = locked.head_id
        locked.head = newest_leaf(message)
        path = active_path(locked)
        target = files_at(path, 10**9) if locked.head_id != previous else None
        snap = snapshots.for_session(locked)
        current = snap.track(journal=True) if target else None
        moving = bool(target and current != target)
        diff: list[dict] = []
        # The file writes and every statement after them follow the transaction (FilesFollow).
        with follow.writing(snap, current) if moving else nullcontext():
            if moving:
                snap.checkout(target, snap.patch(current, target))
                diff = snap.diff_stat(current, target)
            if locked.head_id != previous:
                now = target or snap.peek(journal=True)
                locked.summary = changes_summary(snap, path_start(path), now)
            locked.save(update_fields=["head", "summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind="head",
                created_by=user,
                data={"from_head": previous, "to_head": locked.head_id, "files_before": current},
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if diff:
                events.publish_on_commit(
                    locked.id, events.SESSION_DIFF, diff=diff, summary=locked.summary
                )
    return locked
