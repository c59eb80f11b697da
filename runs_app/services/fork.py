"""Session fork (docs/semantics.md §5.5): a new session of the caller with a copy of one path of the
conversation (root → the fork point), the runs that made it, and the files as they were there.

The copy happens in the database, in a constant number of statements whatever the size of
the session, and the forking process never holds the history:

1. the path (root → fork point) is walked once, by a recursive CTE, into a temporary table
   that also gives each message its new id; the runs of those messages get theirs in a
   second one;
2. one ``INSERT … SELECT`` per table copies messages, parts and runs, every link (parent,
   run, input message, lineage) mapped through those two tables, so nothing in the copy
   points into the source.

New ids are made like ``ids.new_id`` makes them, at the fork's millisecond, with the row's
rank (in the original order) as the counter: the copies sort like their originals, after
every older row, and go to the right edge of each index instead of splitting its pages.
The suffix is ``md5(salt || old id)``, the salt being the new session's id.

The files' objects need no copy: snapshots share one content-addressed object store. The
fork's worktree is made of hard links to the source's files where no process writes a
worktree file in place (a shell command writes into an overlay layer merged by renames,
``workspace/layers``; the tools and checkouts write new files): ``linked_fork.materialize``,
whose cost is a directory entry per file, not its bytes. Where no overlay can be mounted the
fork is checked out from the tree recorded at the fork point (``materialize``, which also
fills the index's stat data, so the fork's first snapshot is a stat walk): every file
written, time and disk following the worktree's size.

A process that holds no worktree (a web process of several worker hosts) copies the rows the
same way and leaves the files to a job on the fork's host, the fork ``preparing`` meanwhile
(``fork_job.py``: the cheap path there when the source's files are on that host, else the
tree fetched from the central store).
"""

from __future__ import annotations

import json
import shutil
import time
from typing import Any

from django.db import connection, transaction

from core import ids
from sessions_app.models import HistoryEvent, Message, Part, Session, Share
from sessions_app.selectors import fork_point
from sessions_app.services.sessions import check_session_quota, fork_title
from sessions_app.services.sharing import withhold_clone_address
from workspace import snapshots

from ..models import Run
from . import fork_job

PATH = (
    "path(id, parent_id) AS ("
    " SELECT id, parent_id FROM sessions_app_message WHERE id = %s AND session_id = %s"
    " UNION ALL"
    " SELECT m.id, m.parent_id FROM sessions_app_message m JOIN path p ON m.id = p.parent_id)"
)
FORK_PATH, FORK_RUNS = "fork_path", "fork_runs"
# One table's copy: its model, its alias in the SELECT, the columns not copied as they are
# (column → SQL), the FROM clause, the parameters.
Copy = tuple[Any, str, dict[str, str], str, list]


def _hex(expr: str, width: int) -> str:
    if connection.vendor == "postgresql":
        return f"lpad(to_hex({expr}), {width}, '0')"
    return f"printf('%%0{width}x', {expr})"  # %% : the statements have parameters


def _new_id(column: str, rank: str) -> str:
    """SQL for the copy's id of the row whose id is ``column`` and whose rank is ``rank``,
    with the fork's millisecond and salt as the statement's first two parameters."""
    return (
        f"substr({column}, 1, 4) || {_hex(f'(%s + {rank} / 65536)', 12)}"
        f" || {_hex(f'({rank} %% 65536)', 4)} || substr(md5(%s || {column}), 1, 10)"
    )


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


def tree_at(source: Session, leaf: str | None) -> str | None:
    """The worktree's tree at ``leaf``: what the last step on its path left (the path is in
    the temporary table), else what the first step after it found; None when no step ran."""
    if leaf:
        with connection.cursor() as cursor:
            # Newest message of the path first; each probes its own parts, so the cost
            # follows the path back to the last step, not the size of the parts table.
            cursor.execute(
                "SELECT data FROM (SELECT p.id, (SELECT pt.data FROM sessions_app_part pt"
                " WHERE pt.message_id = p.id AND pt.type = %s"
                f' ORDER BY pt."order" DESC LIMIT 1) AS data FROM {FORK_PATH} p) steps'
                " WHERE data IS NOT NULL ORDER BY id DESC LIMIT 1",
                [Part.Type.STEP_FINISH],
            )
            row = cursor.fetchone()
        data = row[0] if row else None
        data = json.loads(data) if isinstance(data, str) else data
        if data and data.get("snapshot"):
            return data["snapshot"]
    started = (
        Part.objects.filter(session=source, type=Part.Type.STEP_START, message_id__gt=leaf or "")
        .order_by("message_id", "order")
        .values_list("data", flat=True)
        .first()
    )
    return (started or {}).get("snapshot")


def _walk(cursor, source: Session, leaf: str, salt: str, now_ms: int) -> None:  # noqa: ANN001
    """The path and the runs on it, each row with its copy's id, in temporary tables."""
    for table in (FORK_PATH, FORK_RUNS):
        cursor.execute(f"DROP TABLE IF EXISTS {table}")
    cursor.execute(
        f"CREATE TEMPORARY TABLE {FORK_PATH}"
        " (id varchar(40) PRIMARY KEY, parent_id varchar(40), new_id varchar(40))"
    )
    cursor.execute(
        f"CREATE TEMPORARY TABLE {FORK_RUNS} (id varchar(40) PRIMARY KEY, new_id varchar(40))"
    )
    if connection.vendor == "postgresql":
        # Probe the history tables by key for each row of the path, whatever the planner
        # believes of their size (right after bulk growth its statistics say they are
        # small, and it would scan them whole): for this transaction only.
        cursor.execute(
            "SELECT set_config('enable_seqscan', 'off', true),"
            " set_config('enable_hashjoin', 'off', true),"
            " set_config('enable_mergejoin', 'off', true)"
        )
    cursor.execute(
        f"INSERT INTO {FORK_PATH} (id, parent_id, new_id) WITH RECURSIVE {PATH}"
        f" SELECT id, parent_id, {_new_id('id', 'rank')} FROM"
        " (SELECT id, parent_id, ROW_NUMBER() OVER (ORDER BY id) - 1 AS rank FROM path) ranked",
        [leaf, source.id, now_ms, salt],
    )
    cursor.execute(
        f"INSERT INTO {FORK_RUNS} (id, new_id) SELECT id, {_new_id('id', 'rank')} FROM"
        " (SELECT r.id, ROW_NUMBER() OVER (ORDER BY r.id) - 1 AS rank FROM"
        " (SELECT DISTINCT m.run_id FROM sessions_app_message m"
        f" JOIN {FORK_PATH} p ON p.id = m.id) d JOIN runs_app_run r ON r.id = d.run_id) ranked",
        [now_ms, salt],
    )


UNFINISHED = "r.status IN ('pending', 'running', 'requires_action')"


def _messages_copy(new_id: str) -> Copy:
    """The path's messages, in the new session, linked to the copies of their parent and run."""
    return (
        Message,
        "m",
        {
            "id": "p.new_id",
            "session_id": "%s",
            "run_id": "fr.new_id",
            "parent_id": "pp.new_id",
        },
        f"FROM {FORK_PATH} p JOIN sessions_app_message m ON m.id = p.id"
        f" LEFT JOIN {FORK_PATH} pp ON pp.id = p.parent_id"
        f" LEFT JOIN {FORK_RUNS} fr ON fr.id = m.run_id",
        [new_id],
    )


def _parts_copy(new_id: str, now_ms: int) -> Copy:
    """The parts of the path's messages, each under its message's copy, with a new id."""
    return (
        Part,
        "x",
        {"id": _new_id("x.id", "x.rank"), "message_id": "x.message_new", "session_id": "%s"},
        "FROM (SELECT pt.*, p.new_id AS message_new,"
        # Ranked by message, then order: the path table drives, the parts are probed.
        ' ROW_NUMBER() OVER (ORDER BY p.new_id, pt."order") - 1 AS rank'
        f" FROM {FORK_PATH} p JOIN sessions_app_part pt ON pt.message_id = p.id) x",
        [now_ms, new_id, new_id],
    )


def _runs_copy(source: Session, new_id: str, *, same_owner: bool) -> Copy:
    """The runs of the path's messages, every link to another run or message mapped to its
    copy (or none, when that one is not on the path)."""
    return (
        Run,
        "r",
        {
            "id": "fr.new_id",
            "session_id": "%s",
            # A run still going in the source does not go on in the copy.
            "status": f"CASE WHEN {UNFINISHED} THEN 'cancelled' ELSE r.status END",
            "finished_at": (
                f"CASE WHEN {UNFINISHED} THEN CURRENT_TIMESTAMP ELSE r.finished_at END"
            ),
            "abort_requested": f"r.abort_requested AND NOT {UNFINISHED}",
            "input_message_id": "pi.new_id",
            "interrupted_run_id": "fi.new_id",
            "forked_from_run_id": "ff.new_id",
            "forked_from_message_index": (
                "CASE WHEN ff.new_id IS NOT NULL THEN r.forked_from_message_index END"
            ),
            # The root origin, kept across nested forks.
            "forked_from_session_id": "COALESCE(r.forked_from_session_id, %s)",
            "replaced_by": "fb.new_id",
            "branch": "NULL",
            "task_id": "''",
            # Who started the source's runs is not the forker's business (a share fork).
            "created_by_id": "r.created_by_id" if same_owner else "NULL",
        },
        f"FROM {FORK_RUNS} fr JOIN runs_app_run r ON r.id = fr.id"
        f" LEFT JOIN {FORK_PATH} pi ON pi.id = r.input_message_id"
        f" LEFT JOIN {FORK_RUNS} fi ON fi.id = r.interrupted_run_id"
        f" LEFT JOIN {FORK_RUNS} ff ON ff.id = r.forked_from_run_id"
        f" LEFT JOIN {FORK_RUNS} fb ON fb.id = r.replaced_by",
        [new_id, source.id],
    )


def _copy(
    cursor,  # noqa: ANN001
    source: Session,
    new_id: str,
    leaf: str,
    now_ms: int,
    *,
    same_owner: bool,
) -> None:
    """One ``INSERT … SELECT`` per table (messages, parts, runs), from the temporary tables
    of ``_walk``; then the new session's head and context size, and those tables dropped."""
    statements = [
        _messages_copy(new_id),
        _parts_copy(new_id, now_ms),
        _runs_copy(source, new_id, same_owner=same_owner),
    ]
    for model, alias, overrides, source_sql, params in statements:
        names, values = _columns(model, overrides, alias)
        cursor.execute(
            f"INSERT INTO {model._meta.db_table} ({names}) SELECT {values} {source_sql}", params
        )
    cursor.execute(
        "UPDATE sessions_app_session SET"
        f" head_id = (SELECT new_id FROM {FORK_PATH} WHERE id = %s),"
        " context_tokens = (SELECT COALESCE(SUM(LENGTH(text)), 0) / 4"
        " FROM sessions_app_part WHERE session_id = %s) WHERE id = %s",
        [leaf, new_id, new_id],
    )
    for table in (FORK_PATH, FORK_RUNS):
        cursor.execute(f"DROP TABLE {table}")


def fork_session(
    *,
    source: Session,
    user,  # noqa: ANN001
    message_id: str | None = None,
    title: str = "",
    kind: str = "",
) -> Session:
    """docs/semantics.md §5.5: the path root → ``message_id`` (default: the head, before a pending
    revert's boundary) and the files there. Reads only what is persisted, so forking a busy session
    is fine. ``kind`` ``"admin"``: the admin's fork action (the lists name it so)."""
    return copy_path(
        source=source,
        user=user,
        leaf=fork_point(source, message_id),
        title=title,
        system_prompt=source.system_prompt,
        kind=kind,
    )


def copy_path(
    *,
    source: Session,
    user,  # noqa: ANN001
    leaf: str | None,
    title: str = "",
    tree: str | None = None,
    system_prompt: str = "",
    kind: str = "",
    then: list | None = None,
) -> Session:
    """A new session of ``user`` with exactly the path root → ``leaf`` (``None``: the empty
    conversation; never "the head") and the files of ``tree`` (default: the tree recorded at
    ``leaf``). Untitled, it is ``Fork of <title>`` (``Fork 2 of …`` when the user has that
    one). ``kind`` is its ``lineage_kind`` (``share``, ``admin``, ``alternative``). ``then``:
    the messages of a run its files' job starts, when a job makes them (the fork comes back
    ``preparing``); else the caller starts it."""
    fork = _new_session(source, user, leaf, title=title, system_prompt=system_prompt, kind=kind)
    here = fork_job.files_here()
    if not here:
        fork.host = fork_job.place(source)  # its files are made there (fork_job.py)
    now_ms = int(time.time() * 1000)
    try:
        with transaction.atomic(), connection.cursor() as cursor:
            check_session_quota(user)
            fork.title = fork.title or fork_title(user, source.title)
            fork.save(force_insert=True)
            if leaf:
                _walk(cursor, source, leaf, fork.id, now_ms)
            tree = tree or tree_at(source, leaf)
            same_owner = source.owner_id == user.pk
            if leaf:
                _copy(cursor, source, fork.id, leaf, now_ms, same_owner=same_owner)
                if not same_owner:
                    withhold_clone_address(fork)
            _record(fork, source, user, leaf, tree)
            if here:
                # The files last, still inside the transaction: if git fails, no rows remain.
                _copy_files(fork, source, snapshots.for_session(fork), tree)
            else:
                # Made on the fork's host by a job holding the fork (fork_job.py).
                fork_job.hold(fork, source.id, tree, then)
    except BaseException:
        if here:
            shutil.rmtree(fork.worktree, ignore_errors=True)
            shutil.rmtree(fork.snapshot_dir, ignore_errors=True)
        raise
    fork.refresh_from_db()
    return fork


def _record(fork: Session, source: Session, user, leaf: str | None, tree: str | None) -> None:  # noqa: ANN001
    """The fork's history event."""
    HistoryEvent.objects.create(
        session=fork,
        kind="fork",
        created_by=user,
        data={
            "source_session_id": source.id,
            "message_id": leaf,
            "snapshot": tree,
            # Where it came from, as the forker saw it then: the lineage panel names it when
            # the source is not the forker's to open (a share, the admin).
            "source_title": source.title,
            "source_owner": source.owner.get_username(),
        },
    )


def _new_session(
    source: Session,
    user,  # noqa: ANN001
    leaf: str | None,
    *,
    title: str,
    system_prompt: str,
    kind: str,
) -> Session:
    """The fork's row, not saved yet: the source's settings, lineage to ``leaf``."""
    return Session(
        id=ids.session_id(),
        owner=user,
        title=title[:200],
        lineage_kind=kind,
        model=source.model,
        system_prompt=system_prompt,
        checkpoint=source.checkpoint,
        forked_from_session=source,
        forked_from_message_id=leaf,
        source=_origin(source, user, kind),
        # The source's home: the hard-linked copy stays on one disk (``fork_job.place`` when
        # this process holds no worktree).
        host=source.host,
    )


def _origin(source: Session, user, kind: str) -> dict:  # noqa: ANN001
    """Where the fork's files first came from. The owner's own fork keeps the source's origin
    whole (it pushes there, with the clone's credential). Another user's copy (a share link,
    the admin's fork) keeps none of it — no URL, branch, commit, host key or credential: the
    URL may be private, and with it they could push the owner's turns there with a credential
    of their own. It says only how it was made (``{"type": "share"}``), and cannot be pushed."""
    if source.owner_id == user.pk:
        return dict(source.source or {})
    return {"type": kind or "share"}


def _copy_files(
    fork: Session, source: Session, snap: snapshots.Snapshots, tree: str | None
) -> None:
    """The fork's snapshot store (the source's objects adopted, a shallow clone's boundary
    kept) and its worktree made at ``tree`` by the cheap path (``fork_job.materialize_local``),
    with the summary of what the copied path changed."""
    source_snap = snapshots.for_session(source)
    fork_job.adopt_objects(snap, source_snap)
    if not tree:
        snap.ensure()
        return
    fork_job.materialize_local(snap, source_snap, tree)
    summary = fork_job.summary_of(fork.id, snap, tree)
    Session.objects.filter(id=fork.id).update(summary=summary)


def fork_shared(*, share: Share, user, title: str = "") -> Session:  # noqa: ANN001
    """The caller's own copy of exactly what the share pins — the pinned path (none for an
    empty pin) and the pinned files — with lineage to the source (docs/semantics.md §6.3, §6.4)."""
    source = share.session
    return copy_path(
        source=source,
        user=user,
        leaf=share.message_id,
        title=title,
        kind="share",
        tree=share.snapshot or snapshots.EMPTY_TREE,
        system_prompt=source.system_prompt if share.include_system_prompt else "",
    )
