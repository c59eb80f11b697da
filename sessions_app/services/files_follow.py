"""The worktree follows a history move's transaction (``FilesFollow``).

A move (revert, unrevert, a files-only rewind, a head switch, an applied change…) writes the
files inside its transaction, holding the session row so no run can start in between. When
the transaction does not commit, the worktree goes back to the tree it had before the writes,
so the database and the files never disagree about where the session is.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import TracebackType

from django.db import DatabaseError, transaction

from core.errors import SessionBusyError
from workspace import snapshots

from .. import replicas
from . import lock

log = logging.getLogger(__name__)


class FilesFollow:
    """The worktree follows the move's transaction: if it does not commit, the files go back
    to ``before`` (Django has no on_rollback hook, so this watches both ways out).

    * An exception inside the atomic block (a statement fails, the connection drops): the
      files are put back right there, while the session row is still held, so no run can
      start on half-moved files (``writing``).
    * The commit itself fails (the exception comes out of ``atomic``): the row lock is gone
      with the transaction, so it is taken again before the files are put back; if a run
      took the session meanwhile, its files are its own and are left alone (logged).

    A hook registered with ``on_commit`` before any other of the move marks the commit, so
    an exception from a later hook (an event publish) does not undo a committed move.

        with FilesFollow(session_id) as follow, transaction.atomic():
            locked = lock.lock_idle_session(...)
            with follow.writing(snap, before):
                ...file writes, then the statements...
    """

    def __init__(self, session_id: str) -> None:
        self.session_id = session_id
        self.snap: snapshots.Snapshots | None = None
        self.before: str | None = None  # set while the files differ from the database's view
        self.committed = False

    def __enter__(self) -> FilesFollow:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        if exc_type is None or self.before is None or self.committed:
            return
        try:
            with transaction.atomic():
                lock.lock_idle_session(self.session_id)
                self._put_back()
        except SessionBusyError:
            log.error(
                "session %s: the move's commit failed and a run took the session before its "
                "files could be put back to %s; they are left as the run found them",
                self.session_id,
                self.before,
            )
        except DatabaseError:
            # The database is gone, so no run can take the session either: put them back.
            self._put_back()

    @contextmanager
    def writing(self, snap: snapshots.Snapshots, before: str) -> Iterator[None]:
        """Around the file writes and every statement after them, inside the atomic block
        and after the session row is locked. ``before``: the worktree's tree now."""
        self.snap, self.before = snap, before
        transaction.on_commit(self._mark_committed)
        # The files as the move left them go to the central store (off without SNAPSHOT_REMOTE).
        transaction.on_commit(lambda: replicas.after_move(self.session_id, snap))
        try:
            yield
        except BaseException:
            self._put_back()
            raise

    def _mark_committed(self) -> None:
        self.committed = True

    def _put_back(self) -> None:
        snap, before, self.before = self.snap, self.before, None
        if snap is None or before is None:
            return
        try:
            snap.restore(before, journal=True)
        except Exception:  # the original error is the one to report; this one is logged
            log.exception("session %s: could not put the files back to %s", self.session_id, before)
