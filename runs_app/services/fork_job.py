"""A fork's files made on its host (issue 45, step 5: forks across hosts).

A process that holds the worktrees (``core.mode.holds_worktrees``: embedded mode, one host, a
shared volume) makes a fork's files itself, in the fork's transaction (``services/fork.py``).
A web process of several worker hosts holds none: it copies the fork's rows as always, places
the fork (``place``: its source's host while that one is live and not draining, else the live
host with the fewest sessions) and holds it ``preparing`` for a job, exactly as a clone is held
(``hold``: ``lock.hold_for_job``); after the commit the job goes to the fork host's queue
(``FORK_TASK``, ``runs_app/tasks.py``).

The job (``prepare``) makes the files in a staging directory on that host:

* the source's snapshot store is on this host and holds the tree of the fork point: the cheap
  path of a fork made in one process (``fill_from``: the source's files by hard link where
  commands write into layers, ``linked_fork``; else a checkout from the shared object store);
* else the source's ref is fetched from the central store into the fork's snapshot store
  (``replication.fetch``; every replicated step of the source is on that ref's chain) and the
  tree of the fork point is materialised (``linked_rehome``: by hard link from a session or
  a kept checkout of that tree on this host, else checked out of the store).

Then, holding the fork's row and only while the job still holds its busy lock (a stale job
writes nothing), the staged files become the fork's worktree; the fork's first snapshot is
pushed to the central store (``replicas.replicate``, lease-checked the same way) so that a
later re-home of the fork finds it; the job releases the fork (idle, its summary written). A
job that fails leaves the fork as a failed clone is left (``fail``: idle, no files, a
sentence in ``source.error``).
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import os
import shutil
import threading
from pathlib import Path

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from core import ids, mode
from core.errors import NotFoundError
from realtime import events
from sessions_app import hosts, rehome, replicas
from sessions_app.models import Part, Session
from sessions_app.selectors import session_data
from sessions_app.services import lock
from sessions_app.services.changes import changes_summary
from workspace import linked_fork, linked_rehome, replication, sandbox, snapshots

from .runs import start_run

log = logging.getLogger(__name__)
FORK_TASK = "runs_app.prepare_fork"
STAGING = ".staging"  # beside the worktrees, where a clone stages its files too


class Stale(Exception):
    """The job no longer holds the fork (deleted, or taken over after its lease)."""


def files_here() -> bool:
    """Whether this process makes a fork's files itself (it holds the worktrees)."""
    return mode.holds_worktrees()


def place(source: Session) -> str:
    """The fork's home: its source's while that host is live and not draining (the cheap
    path, by hard link), else the live host with the fewest sessions (``hosts.place``)."""
    if source.host and hosts.live_hosts().filter(name=source.host, draining=False).exists():
        return source.host
    return hosts.place()


def hold(fork: Session, source_id: str, tree: str | None, then: list | None = None) -> str:
    """Inside the transaction that creates ``fork``: hold it ``preparing`` for the job (whose
    id this returns) that makes its files on its host, started after the commit. ``then``:
    the messages of a run the job starts once the files are there (an alternative's)."""
    job = ids.prepare_id()
    lock.hold_for_job(fork, job, settings.REPO_CLONE_TIMEOUT + 120)
    args = [fork.id, job, source_id, tree or "", then]
    transaction.on_commit(lambda: enqueue(*args))
    return job


def enqueue(fork_id: str, job: str, source_id: str, tree: str, then: list | None) -> None:
    """Start the job: a thread when work runs in this process, else the task on the fork
    host's queue. A broker away fails the fork with a sentence."""
    try:
        if mode.in_process():
            threading.Thread(
                target=_prepare_and_close,
                args=(fork_id, job, source_id, tree, then),
                daemon=True,
                name=f"fork-{job}",
            ).start()
        else:
            queue = hosts.queue_for_session(fork_id)
            mode.send_task(FORK_TASK, [fork_id, job, source_id, tree, then], queue=queue)
    except Exception as exc:
        log.warning("fork %s: could not enqueue its files (%s)", fork_id, exc)
        fail(fork_id, job, "The fork's files could not be made: try the fork again.")


def _prepare_and_close(
    fork_id: str, job: str, source_id: str, tree: str, then: list | None
) -> None:
    try:
        prepare(fork_id, job, source_id, tree, then)
    finally:
        connection.close()


def prepare(fork_id: str, job: str, source_id: str, tree: str, then: list | None = None) -> None:
    """The job (see the module): the fork's files at ``tree`` ("" for none) on this host;
    then the run of ``then``'s messages, if any."""
    fork = Session.objects.filter(id=fork_id, busy_run_id=job).first()
    if fork is None:
        return  # deleted or taken over: nothing to do
    rehome.on_claim(fork)  # a dead home moves here (a fork has no replicated files yet)
    failure = None
    try:
        staged = _staged(fork)
    except OSError as exc:
        fail(fork_id, job, f"The fork's files could not be made: {exc.strerror}.")
        return
    try:
        if tree:
            fill_from(staged, Session(id=source_id), tree)
        else:
            staged.ensure()
        summary = _summary(fork_id, staged, tree) if tree else {}
        _move_in(fork_id, job, staged)
        if tree:
            replicas.replicate(
                fork_id,
                snapshots.for_session(fork),
                tree,
                still_holds=lambda: lock.held_by(fork_id, job),
            )
        if not lock.release_job(fork_id, job, summary=summary, updated_at=timezone.now()):
            raise Stale
        _published(fork_id, then)
    except (Stale, NotFoundError):
        log.info("fork %s: job %s no longer holds it; nothing written", fork_id, job)
    except (replication.ReplicationError, snapshots.SnapshotError) as exc:
        failure = f"The fork's files could not be made: {exc}"
    except Exception:
        log.exception("fork %s: making its files failed", fork_id)
        failure = "The fork's files could not be made on the server."
    finally:
        shutil.rmtree(staged.worktree.parent, ignore_errors=True)
        shutil.rmtree(staged.git_dir, ignore_errors=True)
    if failure:
        fail(fork_id, job, failure)


def _staged(fork: Session) -> snapshots.Snapshots:
    """The fork's snapshot store and worktree made aside, under names of this job's: its git
    dir beside the final one (its link to the shared object store is the same relative
    path), its worktree in the staging directory of clones."""
    final = snapshots.for_session(fork)
    scratch = ids.prepare_id()
    staging = Path(settings.WORKSPACE_ROOT) / STAGING / f"{fork.id}-{scratch}"
    staging.mkdir(parents=True, mode=0o700)
    return dataclasses.replace(
        final,
        git_dir=final.git_dir.with_name(f"{final.git_dir.name}.{scratch}"),
        worktree=staging / "tree",
    )


def fill_from(fork: snapshots.Snapshots, source: Session, tree: str) -> None:
    """``fork``'s empty worktree filled with ``tree``: from the source's files when its
    store is on this host and holds the tree (the cheap path), else checked out of this
    host's object store when the tree is there already, else from the central store."""
    fork.ensure()
    theirs = snapshots.for_session(source)
    if theirs.git_dir.is_dir():
        adopt_objects(fork, theirs)
        if _has_tree(fork, tree):
            materialize_local(fork, theirs, tree)
            return
    if not _has_tree(fork, tree):
        replication.fetch(fork, source.id)
        if not _has_tree(fork, tree):
            raise replication.ReplicationError(
                f"the central store has no snapshot {tree[:12]} of the source session."
            )
    linked_rehome.materialize(fork, tree)  # by hard link from a same-tree session, if any


def adopt_objects(fork: snapshots.Snapshots, source: snapshots.Snapshots) -> None:
    """The fork's store sees the source's objects; a shallow clone's boundary is kept."""
    fork.adopt_objects_of(source)
    shallow = source.git_dir / "shallow"  # a shallow clone's boundary (push)
    if shallow.is_file():
        fork.ensure()
        shutil.copyfile(shallow, fork.git_dir / "shallow")


def materialize_local(fork: snapshots.Snapshots, source: snapshots.Snapshots, tree: str) -> None:
    """The cheap path: where no process writes a worktree file in place, the fork's files
    are the source's by hard link (``linked_fork``); else checked out from the store."""
    if tree == snapshots.EMPTY_TREE:
        fork.ensure()
    elif sandbox.uses_layers(source.worktree):
        linked_fork.materialize(fork, tree, source)
    else:
        fork.materialize(tree)


def _has_tree(snap: snapshots.Snapshots, tree: str) -> bool:
    return snap.run(["cat-file", "-e", f"{tree}^{{tree}}"]).code == 0


def summary_of(fork_id: str, snap: snapshots.Snapshots, tree: str) -> dict:
    """What the fork's copied path changed: from the files its first step found to ``tree``."""
    start = (
        # The copy holds only the path, its rows in path order.
        Part.objects.filter(session_id=fork_id, type=Part.Type.STEP_START)
        .order_by("message_id", "order")
        .values_list("data", flat=True)
        .first()
    )
    return changes_summary(snap, (start or {}).get("snapshot"), tree)


def _summary(fork_id: str, snap: snapshots.Snapshots, tree: str) -> dict:
    """``summary_of``, or none when the store lacks the path's first tree (a summary is not
    worth failing a fork for)."""
    try:
        return summary_of(fork_id, snap, tree)
    except snapshots.SnapshotError as exc:
        log.info("fork %s: no summary (%s)", fork_id, exc)
        return {}


def _move_in(fork_id: str, job: str, staged: snapshots.Snapshots) -> None:
    """The staged store and files become the fork's, holding its row, only while ``job``
    holds the fork (``Stale`` else: nothing moved)."""
    with transaction.atomic():
        locked = lock.lock_session(fork_id)
        if locked.busy_run_id != job:
            raise Stale
        worktree, git_dir = locked.worktree, locked.snapshot_dir
        with contextlib.suppress(FileNotFoundError):
            worktree.rmdir()  # an empty worktree a look at the fork may have made
        shutil.rmtree(git_dir, ignore_errors=True)  # and its empty store
        os.rename(staged.git_dir, git_dir)
        os.rename(staged.worktree, worktree)


def fail(fork_id: str, job: str, sentence: str) -> None:
    """The fork's files were not made: it is idle with ``source.error``, as a clone that
    failed (its worktree stays empty); only while ``job`` still holds it."""
    with transaction.atomic():
        try:
            locked = lock.lock_session(fork_id)
        except NotFoundError:
            return  # deleted meanwhile
        if locked.busy_run_id != job:
            return
        source = {**locked.source, "error": sentence[:500]}
        lock.release_job(fork_id, job, source=source, updated_at=timezone.now())
        locked.refresh_from_db()
        events.publish_on_commit(fork_id, events.SESSION_UPDATED, session=session_data(locked))


def _published(fork_id: str, then: list | None) -> None:
    """The fork made, announced; its run started when one waits for the files."""
    fork = Session.objects.select_related("owner").get(id=fork_id)
    events.publish(fork_id, events.SESSION_UPDATED, session=session_data(fork))
    if then:
        start_run(session=fork, user=fork.owner, messages=then)
