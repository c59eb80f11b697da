"""Session fork (SEMANTICS 5.5): a new session of the caller with a copy of one path of the
conversation (root → the fork point), the runs that made it, and the files as they were there.

The copy happens in the database: one ``INSERT … SELECT`` per table, the path found by a
recursive CTE, new ids computed in SQL. So a fork costs the same number of statements
whatever the size of the session, and the forking process never holds the history.

A copied row's id keeps the original's prefix and time part (so the copies sort like their
originals, and newer messages of the fork sort after them) with a new random-looking suffix:
``md5(salt || old id)``, where the salt is the new session's id. The same function maps every
link (parent, run, input message, lineage), so nothing in the copy points into the source.
The files need no copy either: snapshots share one content-addressed object store, and the
fork's worktree is checked out from the tree recorded at the fork point.
"""

from __future__ import annotations

import hashlib
import shutil
from typing import Any

from django.db import connection, transaction
from django.db.models.expressions import RawSQL

from .. import ids, snapshots
from ..errors import NotFoundError
from ..models import HistoryEvent, Message, Part, Session

PATH = (
    "path(id, parent_id) AS ("
    " SELECT id, parent_id FROM sessions_app_message WHERE id = %s AND session_id = %s"
    " UNION ALL"
    " SELECT m.id, m.parent_id FROM sessions_app_message m JOIN path p ON m.id = p.parent_id)"
)

PATH_IDS = f"WITH RECURSIVE {PATH} SELECT id FROM path"


def copy_id(salt: str, old: str) -> str:
    """What ``_remap`` computes in SQL, for the rows Python names (the new head)."""
    return old[:20] + hashlib.md5((salt + old).encode()).hexdigest()[:10]


def _remap(column: str) -> str:
    return f"(substr({column}, 1, 20) || substr(md5(f.salt || {column}), 1, 10))"


def _when(condition: str, value: str) -> str:
    return f"CASE WHEN {condition} THEN {value} END"


def _columns(model: Any, overrides: dict[str, str], alias: str) -> tuple[str, str]:
    """The INSERT column list and the SELECT list: every concrete column of ``model``,
    copied as is unless ``overrides`` says how to compute it."""
    quote = connection.ops.quote_name
    names, values = [], []
    for field in model._meta.concrete_fields:
        column = field.column
        names.append(quote(column))
        values.append(overrides.get(column, f"{alias}.{quote(column)}"))
    return ", ".join(names), ", ".join(values)


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


def tree_at(source: Session, leaf: str | None) -> str | None:
    """The worktree's tree at ``leaf``: what the last step on its path left, else what the
    first step after it found; None when no step ever ran."""
    if leaf:
        finished = (
            Part.objects.filter(
                message_id__in=RawSQL(
                    f"WITH RECURSIVE {PATH} SELECT id FROM path", [leaf, source.id]
                ),
                type=Part.Type.STEP_FINISH,
            )
            .order_by("-message_id", "-order")
            .values_list("data", flat=True)
            .first()
        )
        if finished and finished.get("snapshot"):
            return finished["snapshot"]
    started = (
        Part.objects.filter(session=source, type=Part.Type.STEP_START, message_id__gt=leaf or "")
        .order_by("message_id", "order")
        .values_list("data", flat=True)
        .first()
    )
    return (started or {}).get("snapshot")


def _copy_rows(source: Session, new_id: str, leaf: str) -> None:
    from runs_app.models import Run

    ctes = (
        f"WITH RECURSIVE {PATH},"
        " f(salt, session, source) AS (SELECT %s, %s, %s),"
        " copied(id) AS (SELECT r.id FROM runs_app_run r WHERE r.session_id = %s AND r.id IN"
        " (SELECT m.run_id FROM sessions_app_message m JOIN path p ON p.id = m.id))"
    )
    params = [leaf, source.id, new_id, new_id, source.id, source.id]
    copied = "IN (SELECT id FROM copied)"
    unfinished = "r.status IN ('pending', 'running')"
    statements = [
        (
            Message,
            "m",
            {
                "id": _remap("m.id"),
                "session_id": "f.session",
                "run_id": _when(f"m.run_id {copied}", _remap("m.run_id")),
                "parent_id": _when("m.parent_id IS NOT NULL", _remap("m.parent_id")),
            },
            "FROM sessions_app_message m JOIN path p ON p.id = m.id CROSS JOIN f",
        ),
        (
            Part,
            "pt",
            {
                "id": _remap("pt.id"),
                "message_id": _remap("pt.message_id"),
                "session_id": "f.session",
            },
            "FROM sessions_app_part pt JOIN path p ON pt.message_id = p.id CROSS JOIN f",
        ),
        (
            Run,
            "r",
            {
                "id": _remap("r.id"),
                "session_id": "f.session",
                # A run still going in the source does not go on in the copy.
                "status": f"CASE WHEN {unfinished} THEN 'cancelled' ELSE r.status END",
                "finished_at": (
                    f"CASE WHEN {unfinished} THEN CURRENT_TIMESTAMP ELSE r.finished_at END"
                ),
                "abort_requested": "r.abort_requested AND NOT " + unfinished,
                "input_message_id": _when(
                    "r.input_message_id IN (SELECT id FROM path)", _remap("r.input_message_id")
                ),
                "interrupted_run_id": _when(
                    f"r.interrupted_run_id {copied}", _remap("r.interrupted_run_id")
                ),
                "forked_from_run_id": _when(
                    f"r.forked_from_run_id {copied}", _remap("r.forked_from_run_id")
                ),
                "forked_from_message_index": _when(
                    f"r.forked_from_run_id {copied}", "r.forked_from_message_index"
                ),
                # The root origin, kept across nested forks.
                "forked_from_session_id": "COALESCE(r.forked_from_session_id, f.source)",
                "replaced_by": _when(f"r.replaced_by {copied}", _remap("r.replaced_by")),
                "branch": "NULL",
                "task_id": "''",
            },
            f"FROM runs_app_run r CROSS JOIN f WHERE r.id {copied}",
        ),
    ]
    with connection.cursor() as cursor:
        for model, alias, overrides, source_sql in statements:
            names, values = _columns(model, overrides, alias)
            cursor.execute(
                f"INSERT INTO {model._meta.db_table} ({names}) {ctes} SELECT {values} {source_sql}",
                params,
            )
        cursor.execute(
            "UPDATE sessions_app_session SET context_tokens ="
            " (SELECT COALESCE(SUM(LENGTH(text)), 0) / 4"
            " FROM sessions_app_part WHERE session_id = %s) WHERE id = %s",
            [new_id, new_id],
        )


def fork_session(
    *,
    source: Session,
    user,  # noqa: ANN001
    message_id: str | None = None,
    title: str = "",
) -> Session:
    """Rule 5.5. Reads only what is persisted, so forking a busy session is fine."""
    leaf = fork_point(source, message_id)
    new_id = ids.session_id()
    fork = Session(
        id=new_id,
        owner=user,
        title=(title or f"Fork of {source.title}".strip())[:200],
        model=source.model,
        system_prompt=source.system_prompt,
        checkpoint=source.checkpoint,
        head_id=copy_id(new_id, leaf) if leaf else None,
        forked_from_session=source,
        forked_from_message_id=leaf,
    )
    snap = snapshots.for_session(fork)
    try:
        tree = tree_at(source, leaf)
        snap.adopt_objects_of(snapshots.for_session(source))
        if tree:
            snap.materialize(tree)
        else:
            snap.ensure()
        with transaction.atomic():
            fork.save(force_insert=True)
            if leaf:
                _copy_rows(source, new_id, leaf)
            HistoryEvent.objects.create(
                session=fork,
                kind="fork",
                created_by=user,
                data={"source_session_id": source.id, "message_id": leaf, "snapshot": tree},
            )
    except BaseException:
        shutil.rmtree(fork.worktree, ignore_errors=True)
        shutil.rmtree(fork.snapshot_dir, ignore_errors=True)
        raise
    fork.refresh_from_db()
    return fork
