"""One writer per run: the lease epoch.

Every execution of a run starts with ``lifecycle.begin``, which increments the run's
``lease_epoch`` (an UPDATE of the run row). Every write an execution makes — its
checkpoints, its streamed text, its usage rows, its history events, the summary of its
files — runs in a transaction that calls ``fence(run_id, epoch)``: a ``FOR SHARE`` read of
the run row *with the epoch this execution began under*. Its end and its park are
conditional UPDATEs of the run row on that epoch (``lifecycle.move``), which fence
themselves.

* If another execution has begun since (the old worker was stopped or starved past its
  lease, and the sweep handed the run to another worker), the epoch differs: ``fence``
  raises ``LeaseLost``, the transaction writes nothing, and the loop stops at once (its tool
  processes killed) without another write.
* If ``begin`` runs while a fenced transaction is open, its UPDATE waits for that
  transaction to commit: the new execution reads everything the old one wrote, and the old
  one's next fence fails. No write of a stale execution can land after a new one began.

A fenced transaction writes the session row (if it does) *before* its fence, so the lock
order of ``sessions_app/services/lock.py`` (the session row first, then run rows) holds;
an UPDATE of the run row from the web (``abort_requested``) waits for at most one
checkpoint.
"""

from __future__ import annotations

from django.db import connection

from ..models import Run


class LeaseLost(Exception):
    """This execution of a run is no longer the one that holds it: write nothing more."""


def fence(run_id: str, epoch: int, *, ending: bool = False) -> None:
    """Inside the transaction of a write of ``run_id``'s execution begun under ``epoch``:
    raise ``LeaseLost`` unless that execution still owns the run (and keep it so until the
    transaction ends). ``ending``: the transaction also records the run's end (an UPDATE of
    the run row), so the row is held for that now, before the other rows are written: held
    ``FOR SHARE`` first, the end's UPDATE would wait for the streamed-text writer's share of
    it while that writer waits for a part row this transaction wrote (a deadlock)."""
    table = Run._meta.db_table
    held = " FOR NO KEY UPDATE" if ending else " FOR SHARE"
    lock = held if connection.vendor == "postgresql" else ""
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT 1 FROM {table} WHERE id = %s AND lease_epoch = %s{lock}",  # noqa: S608
            [run_id, epoch],
        )
        if cursor.fetchone() is None:
            raise LeaseLost(run_id)


def owned(pairs: list[tuple[str, int]]) -> set[str]:
    """Inside a transaction: which of the (run id, epoch) ``pairs`` still own their runs,
    each held so (``FOR SHARE``) until the transaction ends. One statement."""
    if not pairs:
        return set()
    table = Run._meta.db_table
    lock = " FOR SHARE" if connection.vendor == "postgresql" else ""
    values = " OR ".join(["(id = %s AND lease_epoch = %s)"] * len(pairs))
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT id FROM {table} WHERE {values}{lock}",  # noqa: S608
            [x for pair in pairs for x in pair],
        )
        return {row[0] for row in cursor.fetchall()}
