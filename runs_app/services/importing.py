"""Session import (docs/semantics.md §17.2): a new session of the caller from an export
(``export.session_document``), with the same tree, runs, head and files, under new ids.

The document is checked whole first (``import_checks``); nothing is written before it passes.
Then one transaction writes the rows (a few bulk statements whatever the size) and, last and
still inside it, the files, as a fork does: the snapshot objects go into the shared store
(content-addressed: the parts' snapshot ids name them as they are, so revert, diff and
continue work on the copy), the files into the new worktree, and the worktree is tracked.
If anything fails, no row remains and the worktree and git dir are removed.

The store is shared by every user, so an import carries every object it names: the only ids
it may name without their content (``missing_objects``, the objects the source's store had
lost) are ids the session it was exported from names too, when that session is the
importer's own. Otherwise a made-up document could name another user's file by the hash of
a guess and read it back through a diff.

New ids come from ``ids`` in the originals' order (ids sort by creation), so every list
ordered by id reads as it did. Links are mapped inside the copy; a continue's branch record
keeps the links it can map and drops those to messages a cleanup had deleted. Runs that had
not finished are imported ``cancelled``. Lineage to sessions outside the document (the
source itself, the session it was forked from, each run's root origin) is not kept as links,
since they may not exist here or not be the caller's: the ``import`` history event records
those ids. A model this deployment does not offer is replaced by the default (``AGENT_MODEL``),
and the event records the original.

A process that holds no worktree (issue 45, step 3: a web started with ``WORKSPACE_ROOT=""``)
writes the files through the central store instead, never under ``WORKSPACE_ROOT``: pushed
first as the new session's ref, recorded with the rows, then materialised on its home host
(``import_store``); the missing objects are checked against the web's mirror there.
"""

from __future__ import annotations

import shutil
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from core import ids, mode, models_catalog
from core.errors import InvalidInput
from sessions_app import host_calls, hosts, reads
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.services.sessions import check_session_quota, imported_title
from workspace import replication, snapshots, store

from ..models import Run, run_id
from . import import_store
from .export import snapshot_names
from .import_checks import ImportPlan, check_import

BATCH = 1000
UNFINISHED = {Run.Status.PENDING, Run.Status.RUNNING, Run.Status.REQUIRES_ACTION}


def import_session(*, user, document: Any) -> Session:  # noqa: ANN001
    """A new session of ``user`` from ``document`` (InvalidInput, 400, for anything wrong in
    it; QuotaExceeded, 429, past ``SESSIONS_PER_USER_MAX``)."""
    local = mode.embedded() or mode.holds_worktrees()
    if not local and not replication.enabled():
        raise host_calls.HostUnavailable(import_store.NEEDS_STORE)
    plan = check_import(document)
    borrowed = _check_missing_objects(user, plan)
    message_ids = {m["id"]: ids.message_id() for m in plan.messages}
    run_ids = {r["id"]: run_id() for r in plan.runs}
    session = _session(user, plan, message_ids)
    messages, parts, part_ids = _messages(session, plan, message_ids, run_ids)
    runs = _runs(session, plan, message_ids, run_ids)
    if plan.session["revert"]:
        revert = dict(plan.session["revert"])
        revert["message_id"] = message_ids[revert["message_id"]]
        revert["part_id"] = part_ids.get(revert["part_id"])
        session.revert = revert
    rows = (runs, messages, parts)
    if not local:
        return _import_through_store(user, session, plan, rows, borrowed)
    snap = snapshots.for_session(session)
    try:
        with transaction.atomic():
            _save(user, session, rows)
            # The files last, still inside the transaction: if they fail, no rows remain.
            _event(user, session, plan, import_store.write_files(snap, plan))
    except BaseException:
        shutil.rmtree(session.worktree, ignore_errors=True)
        shutil.rmtree(session.snapshot_dir, ignore_errors=True)
        raise
    session.refresh_from_db()
    return session


def _import_through_store(
    user,  # noqa: ANN001
    session: Session,
    plan: ImportPlan,
    rows: tuple[list[Run], list[Message], list[Part]],
    borrowed: snapshots.Snapshots | None,
) -> Session:
    """(A process that holds no worktree.) The files pushed to the central store as the
    session's ref and recorded with the rows, then materialised on its home host
    (``import_store``)."""
    with import_store.pushed(session.id, plan, borrowed) as (commit, tree):
        session.replicated_commit, session.replicated_snapshot = commit, tree
        session.replicated_at = timezone.now()
        with transaction.atomic():
            _save(user, session, rows)
            _event(user, session, plan, tree)
    return import_store.materialize(session, user)


def _save(user, session: Session, rows: tuple[list[Run], list[Message], list[Part]]) -> None:  # noqa: ANN001
    """The rows, in the caller's transaction."""
    runs, messages, parts = rows
    check_session_quota(user)
    session.title = imported_title(user, session.title)
    session.save(force_insert=True)
    created = [r.created_at for r in runs]
    Run.objects.bulk_create(runs, batch_size=BATCH)
    # ``created_at`` is auto_now_add: the insert stamped now; the originals go back.
    for run, when in zip(runs, created, strict=True):
        run.created_at = when
    Run.objects.bulk_update(runs, ["created_at"], batch_size=BATCH)
    Message.objects.bulk_create(messages, batch_size=BATCH)
    Part.objects.bulk_create(parts, batch_size=BATCH)


def _event(user, session: Session, plan: ImportPlan, tree: str) -> None:  # noqa: ANN001
    HistoryEvent.objects.create(
        session=session,
        kind="import",
        created_by=user,
        data={**plan.source, "snapshot": tree, "model": plan.session["model"]},
    )


def _session(user, plan: ImportPlan, message_ids: dict[str, str]) -> Session:  # noqa: ANN001
    data = plan.session
    model = data["model"]
    if not model or models_catalog.check(model):
        model = settings.AGENT_MODEL
    head = data["head_message_id"]
    return Session(
        id=ids.session_id(),
        owner=user,
        title=data["title"],  # made "… (imported)" when it is saved
        model=model,
        system_prompt=data["system_prompt"],
        checkpoint=data["checkpoint"],
        permissions=data["permissions"],
        # The message rows come later in the same transaction (the key is checked at commit).
        head_id=message_ids[head] if head else None,
        summary=data["summary"],
        usage=data["usage"],
        context_tokens=data["context_tokens"],
        host=hosts.place(),  # a new session: placed like one (sessions_app/hosts.py)
    )


def _messages(
    session: Session,
    plan: ImportPlan,
    message_ids: dict[str, str],
    run_ids: dict[str, str],
) -> tuple[list[Message], list[Part], dict[str, str]]:
    messages, parts, part_ids = [], [], {}
    for m in plan.messages:
        new_id = message_ids[m["id"]]
        messages.append(
            Message(
                id=new_id,
                session=session,
                run_id=run_ids[m["run_id"]] if m["run_id"] else None,
                parent_id=message_ids[m["parent_id"]] if m["parent_id"] else None,
                role=m["role"],
                created_at=m["created_at"],
                completed_at=m["completed_at"],
                error=m["error"],
                model=m["model"],
                tokens=m["tokens"],
                structured=m["structured"],
                hidden=m["hidden"],
            )
        )
        for p in sorted(m["parts"], key=lambda p: p["order"]):
            part_ids[p["id"]] = ids.part_id()
            parts.append(
                Part(
                    id=part_ids[p["id"]],
                    message_id=new_id,
                    session=session,
                    order=p["order"],
                    type=p["type"],
                    text=p["text"],
                    call_id=p["call_id"],
                    tool=p["tool"],
                    state=p["state"],
                    data=p["data"],
                )
            )
    return messages, parts, part_ids


def _runs(
    session: Session, plan: ImportPlan, message_ids: dict[str, str], run_ids: dict[str, str]
) -> list[Run]:
    now = timezone.now()
    runs = []
    for r in plan.runs:
        unfinished = r["status"] in UNFINISHED
        runs.append(
            Run(
                id=run_ids[r["id"]],
                session=session,
                mode=r["mode"],
                # A run still going in the source does not go on in the copy.
                status=Run.Status.CANCELLED if unfinished else r["status"],
                result=r["result"],
                input=r["input"],
                input_message_id=_mapped(r["input_message_id"], message_ids),
                output_schema=r["output_schema"],
                output=r["output"],
                error=r["error"],
                model=r["model"],
                checkpoint=r["checkpoint"],
                multitask_strategy=r["multitask_strategy"],
                max_steps=r["max_steps"],
                abort_requested=r["abort_requested"] and not unfinished,
                interrupted_run_id=_mapped(r["interrupted_run_id"], run_ids),
                forked_from_run_id=_mapped(r["forked_from_run_id"], run_ids),
                forked_from_message_index=r["forked_from_message_index"],
                branch=_branch(r["branch"], message_ids, run_ids),
                replaced_by=_mapped(r["replaced_by"], run_ids),
                usage=r["usage"],
                attempts=r["attempts"],
                created_at=r["created_at"] or now,
                started_at=r["started_at"],
                finished_at=r["finished_at"] or (now if unfinished else None),
            )
        )
    return runs


def _mapped(old: str | None, mapping: dict[str, str]) -> str | None:
    return mapping.get(old) if old else None


def _branch(
    branch: dict[str, Any] | None, message_ids: dict[str, str], run_ids: dict[str, str]
) -> dict[str, Any] | None:
    if branch is None:
        return None
    branch = dict(branch)
    if "parent_message_id" in branch:
        branch["parent_message_id"] = _mapped(branch["parent_message_id"], message_ids)
    for key in ("source_run_id", "replaces"):
        if key in branch:
            branch[key] = _mapped(branch[key], run_ids)
    if "hide" in branch:
        branch["hide"] = [message_ids[m] for m in branch["hide"] if m in message_ids]
    return branch


def _check_missing_objects(user, plan: ImportPlan) -> snapshots.Snapshots | None:  # noqa: ANN001
    """InvalidInput unless every id the document names without carrying it is named by the
    snapshots of the session it was exported from, one of ``user``'s (an export of a session
    whose store had lost objects imports back; nobody else's objects can be named): the
    store those were read from (the source's, or the web's mirror in a process without
    worktrees, ``reads.snapshots_for_read``), None when none was."""
    if not plan.missing:
        return None
    source = Session.objects.filter(id=plan.source["source_session_id"], owner=user).first()
    named: set[str] = set()
    snap = None
    if source is not None:
        parts = list(Part.objects.filter(session_id=source.id).only("data"))
        runs = list(Run.objects.filter(session=source).only("branch"))
        roots = snapshot_names(source, parts, runs)
        snap = reads.snapshots_for_read(source, *sorted(roots), strict=False)
        held = [
            sha for sha, kind, _size in store.object_info(snap, sorted(roots)) if kind == "tree"
        ]
        reachable, lost = store.objects_named(snap, held)
        named = roots | reachable | lost
    stray = sorted(plan.missing - named)
    if stray:
        raise InvalidInput(
            f"missing_objects: the export lacks the object {stray[0]}, and no snapshot of the"
            " session it was exported from (one of yours) names it. An import carries every"
            " object it names."
        )
    return snap
