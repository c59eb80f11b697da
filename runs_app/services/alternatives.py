"""Alternatives (best-of-N) and adopt (docs/semantics.md §14.3).

* ``start_alternatives``: from a message, N forks (``lineage_kind`` ``alternative``, one
  ``alternative_group``) at the point before its turn, each with its own worktree, each
  running the same input at once. The owner's quotas are checked for all N before anything
  is made: a refusal names the limit and nothing starts.
* ``adopt``: a fork's messages after its fork point become a new branch of the session it was
  forked from (new ids; each part's ``adopted_from`` names its original), with the fork's
  files, and the head. The fork stays. Its runs come along as copies whose
  ``forked_from_session`` is the fork, so a total of own costs counts each call once.
"""

from __future__ import annotations

from contextlib import nullcontext

from django.db import transaction
from django.utils import timezone

from core import ids
from core.errors import ConflictError, InvalidInput, NotFoundError
from core.ids import message_id
from quotas_app import services as quotas
from realtime import events
from sessions_app import host_calls
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path, files_at, session_data
from sessions_app.services import lock
from sessions_app.services.changes import changes_summary, path_start
from sessions_app.services.files_follow import FilesFollow
from workspace import replication, snapshots

from ..models import Run
from ..models import run_id as new_run_id
from ..selectors import active_runs
from .fork import copy_path
from .runs import start_run

N_MIN, N_MAX = 2, 8


def _turn_start(path: list[Message], index: int) -> Message | None:
    while index >= 0 and path[index].role != Message.Role.USER:
        index -= 1
    return path[index] if index >= 0 else None


def _text(message: Message) -> str:
    return "".join(p.text for p in message.loaded_parts if p.type == Part.Type.TEXT)


def start_alternatives(
    *,
    session: Session,
    user,  # noqa: ANN001
    message_id: str,
    n: int,
    messages: list[dict] | None = None,
) -> dict:
    """``{group, sessions}``: ``n`` alternatives of ``message_id``'s turn (see the module)."""
    if not isinstance(n, int) or isinstance(n, bool) or not N_MIN <= n <= N_MAX:
        raise InvalidInput(f"n must be a whole number from {N_MIN} to {N_MAX}.")
    message = Message.objects.filter(id=message_id, session=session).first()
    if message is None:
        raise NotFoundError("No such message in this session.")
    path = active_path(session, leaf_id=message.id)
    start = _turn_start(path, len(path) - 1)
    if messages:
        fork_at = message.id  # the given input runs after the message
    else:
        if start is None or any(p.type == Part.Type.APPLIED for p in start.loaded_parts):
            raise InvalidInput("That message has no user turn to run again: give messages.")
        fork_at = start.parent_id  # its turn runs again, from just before it
        messages = [{"role": "user", "content": _text(start)}]
    quotas.check_room(
        user_id=user.pk,
        n=n,
        what="alternatives",
        sessions_held=lambda: Session.objects.filter(owner_id=user.pk).count(),
        active_runs=lambda: active_runs(user.pk),
    )
    group = ids.new_id("alt")
    forks: list[Session] = []
    for i in range(n):
        fork = copy_path(
            source=session,
            user=user,
            leaf=fork_at,
            title=f"{session.title} — alternative {i + 1} of {n}"[:200],
            system_prompt=session.system_prompt,
            then=messages,  # run by the job that makes its files on another host, if one does
        )
        Session.objects.filter(id=fork.id).update(
            lineage_kind="alternative", alternative_group=group
        )
        forks.append(fork)
    for fork in forks:
        if fork.status != Session.Status.PREPARING:
            start_run(session=fork, user=user, messages=messages)
    HistoryEvent.objects.create(
        session=session,
        kind="alternatives",
        created_by=user,
        data={"group": group, "message_id": message.id, "sessions": [f.id for f in forks]},
    )
    return {"group": group, "sessions": [f.id for f in forks]}


def adopt(*, session: Session, user, fork_id: str) -> Session:  # noqa: ANN001
    """Make ``fork_id``'s work after its fork point a new branch of ``session``, the head:
    here, or on the session's home host from a web process that holds no worktree (it
    rewrites the files: ``host_calls``, the call ``adopt`` registered by runs_app/apps.py)."""
    return host_calls.call("adopt", session=session, user=user, fork_id=fork_id)


def adopt_here(*, session: Session, user, fork_id: str) -> Session:  # noqa: ANN001
    """``adopt`` where the session's worktree is."""
    fork = Session.objects.filter(
        id=fork_id, owner_id=user.pk, forked_from_session_id=session.id
    ).first()
    if fork is None:
        raise NotFoundError("No such fork of this session.")
    if Run.objects.filter(session=fork).exclude(status__in=Run.TERMINAL).exists():
        raise ConflictError("That fork's run has not ended: adopt it when it has.")
    point = fork.forked_from_message_id
    if point and not Message.objects.filter(id=point, session=session).exists():
        raise ConflictError("The message that fork started from is gone from this session.")
    copied = len(active_path(session, leaf_id=point)) if point else 0
    fork_path = active_path(fork)
    new = fork_path[copied:]
    if not new:
        raise InvalidInput("That fork has no messages after its fork point.")
    tree = files_at(fork_path, len(fork_path)) or snapshots.EMPTY_TREE
    _fetch_fork(session, fork, tree)
    with FilesFollow(session.id) as follow, transaction.atomic():
        locked = lock.lock_idle_session(session.id)
        if locked.revert:
            raise ConflictError("A revert is pending: unrevert or confirm it before adopting.")
        snap = snapshots.for_session(locked)
        snap.adopt_objects_of(snapshots.for_session(fork))
        current = snap.track(journal=True)
        changed = snap.patch(current, tree) if tree != current else []
        with follow.writing(snap, current) if changed else nullcontext():
            if changed:
                snap.checkout(tree, changed)
            head = _copy_branch(locked, fork, point, new)
            locked.head_id = head
            path = active_path(locked)
            locked.summary = changes_summary(snap, path_start(path), tree)
            locked.save(update_fields=["head", "summary", "updated_at"])
            HistoryEvent.objects.create(
                session=locked,
                kind="adopt",
                created_by=user,
                data={"fork_id": fork.id, "head": head, "files_before": current, "snapshot": tree},
            )
            events.publish_on_commit(
                locked.id, events.SESSION_UPDATED, session=session_data(locked)
            )
            if changed:
                events.publish_on_commit(
                    locked.id,
                    events.SESSION_DIFF,
                    diff=snap.diff_stat(current, tree),
                    summary=locked.summary,
                )
    return locked


def _fetch_fork(session: Session, fork: Session, tree: str) -> None:
    """The fork's tree in the session's store: a fork on another host (issue 45) has its
    objects in the central store, not in this host's (the fork's replicated ref fetched)."""
    if not (replication.enabled() and fork.replicated_commit) or tree == snapshots.EMPTY_TREE:
        return  # one host (or a shared volume): the host's store holds every session's objects
    snap = snapshots.for_session(session)
    snap.ensure()
    if snap.run(["cat-file", "-e", f"{tree}^{{tree}}"]).code != 0:
        try:
            replication.fetch(snap, fork.id)
        except replication.ReplicationError as exc:
            raise ConflictError(f"The fork's files cannot be fetched: {exc}") from None


# On the allow-list of calls on a home host (as runs.py adds ``cancel``).
host_calls.register("adopt", adopt_here, frozenset({"fork_id"}))


def _copy_branch(locked: Session, fork: Session, point: str | None, new: list[Message]) -> str:
    """Copy ``new`` (a path of ``fork``'s messages) under ``point`` in ``locked``, with their
    parts and runs, under new ids: the last copy's id."""
    run_ids = {m.run_id for m in new if m.run_id}
    runs: dict[str, str] = {}
    for run in Run.objects.filter(id__in=run_ids).order_by("id"):
        old = run.id
        run.id = new_run_id()
        runs[old] = run.id
        run.session = locked
        run.forked_from_session_id = fork.id  # counted once: in the fork, as its own
        run.input_message_id = None
        run.interrupted_run_id = None
        run.forked_from_run_id = None
        run.replaced_by = None
        run.branch = None
        run.task_id = ""
        run.save(force_insert=True)
    # Two inserts whatever the branch's length: the messages (ids made here, in order, so
    # each names its parent), then every part.
    parent, now = point, timezone.now()
    copies: list[Message] = []
    for message in new:
        copies.append(
            Message(
                id=message_id(),
                session=locked,
                parent_id=parent,
                role=message.role,
                run_id=runs.get(message.run_id or ""),
                created_at=message.created_at,
                completed_at=message.completed_at or now,
                error=message.error,
                model=message.model,
                tokens=message.tokens,
                structured=message.structured,
            )
        )
        parent = copies[-1].id
    Message.objects.bulk_create(copies)
    Part.objects.bulk_create(
        Part(
            message=copy,
            session=locked,
            order=p.order,
            type=p.type,
            text=p.text,
            call_id=p.call_id,
            tool=p.tool,
            state=p.state,
            data={
                **(p.data or {}),
                "adopted_from": {"session_id": fork.id, "message_id": m.id, "part_id": p.id},
            },
        )
        for m, copy in zip(new, copies, strict=True)
        for p in m.loaded_parts
    )
    return parent
