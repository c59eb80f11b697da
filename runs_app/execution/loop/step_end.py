"""The end of a step (docs/semantics.md §1.7): the files' snapshot after it, its ``step-finish`` and
``patch`` parts — for a step of this execution (``steps.step``) and for one an earlier
execution left open or parked (``recovery.recover``), so that what a step's tools did to the
files is always in a snapshot."""

from __future__ import annotations

import logging
from typing import Any

from django.utils import timezone

from realtime import events
from sessions_app import replicas
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data
from workspace import change_journal, skipped_files, snapshots

from . import recorder
from .context import RunContext
from .errors import LockLost

log = logging.getLogger(__name__)


def close_step(
    ctx: RunContext, message: Message, index: int, before: str, *, ran_tools: bool, finished: bool
) -> None:
    """(A database thread.) The step that began at snapshot ``before`` ends: the files' snapshot
    after it, its ``step-finish`` part (``interrupted`` unless ``finished``) and the ``patch``
    of what it changed; written now when it ran tools (else with the end)."""
    if ctx.control.lost.is_set() or ctx.control.lease_stale():
        # It lost the run: no snapshot, no row (another worker may be running git on the
        # session's index right now). Raised from a step's error handler, this replaces
        # the error: the run stops without writing.
        ctx.control.lost.set()
        raise LockLost()
    try:
        # What the step's writers said they changed: its snapshot, and what it left out.
        said = change_journal.pending(ctx.snap.worktree, ctx.snap.git_dir).paths
        after = ctx.snap.track(journal=True) if ran_tools else before
        changed = ctx.snap.patch(before, after) if after != before else []
        skipped = skipped_files.skipped(ctx.snap, said, after) if changed else []
    except snapshots.SnapshotError:
        log.exception("snapshot after step %s of %s failed", index, ctx.run.id)
        return
    ctx.tree = after
    # Inside the step (sync): a host lost after this step loses none of its files
    # (docs/operations.md, "Replicated snapshots"). Off without SNAPSHOT_REMOTE.
    replicas.replicate(ctx.session.id, ctx.snap, after, still_holds=lambda: not _lost(ctx))
    data: dict[str, Any] = {"snapshot": after, "step": index}
    if skipped:
        data["skipped"] = skipped
    if not finished:
        data["interrupted"] = True
    recorder.new_part(ctx, message, Part.Type.STEP_FINISH, data=data)
    if changed:
        recorder.new_part(
            ctx, message, Part.Type.PATCH, data={"snapshot": before, "files": changed}
        )
    if finished:
        message.completed_at = timezone.now()
    ctx.writer.touch(message, "completed_at", "tokens", "structured")
    if finished and ran_tools and ctx.mode != Session.Checkpoint.RUNS:
        # A step without tool calls ends the run: its rows are written with the end, in
        # the same transaction (``end.record_end``).
        ctx.writer.flush()
    recorder.emit(ctx, events.MESSAGE_UPDATED, message=message_data(message))
    if changed:
        recorder.publish_diff(ctx, before, after)


def _lost(ctx: RunContext) -> bool:
    return ctx.control.lost.is_set() or ctx.control.lease_stale()
