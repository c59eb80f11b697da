"""What a run's execution leaves unfinished when it does not end the run itself — its worker
died (``lifecycle.end_abandoned``), or the run waited for its owner and was cancelled
(``lifecycle.cancel_waiting``) — closed as an abort closes it (docs/semantics.md §1.7, §8.4): the
step left open, the tool calls that will never run or finish, the message never completed.

Only rows of parts and messages are written here; the run's status and the session's holder
are the lifecycle's, which calls these inside the transaction that holds the session row."""

from __future__ import annotations

import logging
import time
from collections.abc import Iterable

from django.db import transaction
from django.utils import timezone

from core import mode
from realtime import events
from sessions_app import rehome
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import active_path, part_data
from sessions_app.services import lock
from workspace import replication, snapshots

from ..models import Run
from ..tools import TOOLS

log = logging.getLogger(__name__)


def crashed_error(attempts: int) -> dict:
    """The error of a run ended because its executions kept stopping without ending it."""
    times = "once" if attempts == 1 else f"{attempts} times in a row"
    return {
        "type": "RunCrashed",
        "message": (
            f"The run stopped without finishing {times} (its worker crashed or was stopped), "
            "so it was not started again. What it saved is kept: continue or resume it."
        ),
    }


def close_open_step(
    run: Run, session: Session, prepared: list[Part], *, lost: tuple[str, str] | None = None
) -> None:
    """The step a dead execution left open (a ``step-start``, no ``step-finish``) ends as an
    abort's would (docs/semantics.md §1.7): its ``step-finish``, interrupted, with the files as they
    are now, and the ``patch`` of what the step changed — else what its tools did before the
    worker died would be in the worktree and in no snapshot (a revert would lose it).
    ``prepared``: those parts found before the row lock, written as they are unless the
    step's message changed since (an execution wrote to it meanwhile: found again).
    ``lost``: this host made the files anew (``claim_for_abandon``), the calls they lack are
    said to be lost first (``lose_on_abandon``)."""
    if lost:
        lose_on_abandon(session, lost)
    first = prepared[0] if prepared else None
    if first and Part.objects.filter(message_id=first.message_id, order__gte=first.order).exists():
        prepared = open_step_parts(run, session)
    for part in Part.objects.bulk_create(prepared):
        events.publish_on_commit(run.session_id, events.PART_UPDATED, part=part_data(part))


def open_step_parts(run: Run, session: Session) -> list[Part]:
    """(Reads, and git; writes nothing.) The parts that close the step an execution of
    ``run`` left open — its ``step-finish``, interrupted, with the files as they are now, and
    the ``patch`` of what the step changed — or none when its last step ended."""
    message = (
        Message.objects.filter(run_id=run.id, role=Message.Role.ASSISTANT).order_by("-id").first()
    )
    if message is None:
        return []
    parts = list(Part.objects.filter(message=message).order_by("order"))
    if any(p.type == Part.Type.STEP_FINISH for p in parts):
        return []
    start = next((p for p in parts if p.type == Part.Type.STEP_START), None)
    before = (start.data or {}).get("snapshot") if start else None
    if not before:
        return []
    snap = snapshots.for_session(session)
    try:
        after = snap.track(journal=True)
        changed = snap.patch(before, after) if after != before else []
    except snapshots.SnapshotError:
        log.exception("run %s: the files of its open step could not be recorded", run.id)
        return []
    order = parts[-1].order + 1
    step = (start.data or {}).get("step", 0)
    made = [
        Part(
            message=message,
            session_id=run.session_id,
            order=order,
            type=Part.Type.STEP_FINISH,
            data={"snapshot": after, "step": step, "interrupted": True},
        )
    ]
    if changed:
        made.append(
            Part(
                message=message,
                session_id=run.session_id,
                order=order + 1,
                type=Part.Type.PATCH,
                data={"snapshot": before, "files": changed},
            )
        )
    return made


def interrupt_calls(session_id: str, parts: Iterable[Part], reason: str) -> None:
    """Each tool call of ``parts`` (which will never run, or never finish) ends in error,
    interrupted for ``reason``, as an abort ends its calls; events to ``session_id``."""
    now = time.time()
    for part in parts:
        state = dict(part.state or {})
        state.update(
            status="error",
            error="Tool execution was interrupted.",
            metadata={**(state.get("metadata") or {}), "interrupted": True, "reason": reason},
        )
        state.setdefault("time", {})["end"] = now
        part.state = state
        part.save(update_fields=["state"])
        events.publish_on_commit(session_id, events.PART_UPDATED, part=part_data(part))


def end_crashed_calls(run: Run, error: dict) -> None:
    """A run ended in error after its executions crashed: its unfinished tool calls and its
    unfinished messages end, so that a resume does not call again what crashed every
    attempt."""
    unfinished = Part.objects.filter(
        message__run_id=run.id, type=Part.Type.TOOL, state__status__in=["pending", "running"]
    )
    interrupt_calls(run.session_id, unfinished, "crashed")
    Message.objects.filter(run_id=run.id, completed_at__isnull=True).update(
        completed_at=timezone.now(),
        error={"reason": error.get("type", "RunCrashed"), "message": error.get("message", "")},
    )


# -- A host lost mid-step (docs/semantics.md §16.5) ---------------------------------------------
# ``claim_files`` is what a host does before it works on a session whose files it may lack: the
# run's claim (``host.py``) and the end of an abandoned run (``lifecycle.end_abandoned``, which
# may run on a host that never had the session). The files are made from the central store
# (``rehome.on_claim``), noted on this host's disk as lost with the old home (``rehome.mark_lost``)
# until the calls that tree lacks (``lost_calls``) are said to be lost: by the run's recovery
# through its fenced writer (``loop/recovery.py``), or at an abandoned run's end under the
# session's row lock (``lose_on_abandon``).

LOST_WITH_HOST = (
    "Lost with host {host} before its change was replicated: the files are as of the last"
    " replicated step; run it again if it is still needed."
)


def claim_files(session: Session) -> tuple[str, str] | None:
    """(A database thread of a host.) ``rehome.on_claim``, and the tree this host's files are
    and the host the session was lost with, while they are not that host's: materialised from
    the central store, or — a session never replicated, its worktree not here — none (the
    empty tree). Else None."""
    if (
        not session.replicated_snapshot
        and replication.enabled()
        and rehome.worktree_missing(session)
    ):
        rehome.mark_lost(session, snapshots.EMPTY_TREE)
    rehome.on_claim(session)
    return rehome.lost_mark(session)


def claim_for_abandon(session: Session) -> tuple[str, str] | None:
    """``claim_files`` for the end of an abandoned run, where this process holds worktrees and
    a central store is on (one host or a shared volume: the files are where they were)."""
    if not (mode.holds_worktrees() and replication.enabled()):
        return None
    return claim_files(session)


def lost_calls(history: list[Message], tree: str) -> list[Part]:
    """The completed tool calls of ``history`` that may change files (``side_effects``) and
    come after the last step boundary whose snapshot is ``tree``: their changes are not in
    it. When no boundary of the path has that snapshot (the files were moved apart from the
    conversation), only the calls of a step left open, which no snapshot holds."""
    found: list[Part] = []
    for message in reversed(history):
        if message.role != Message.Role.ASSISTANT:
            continue
        for part in reversed(message.loaded_parts):
            if part.type in (Part.Type.STEP_START, Part.Type.STEP_FINISH):
                if (part.data or {}).get("snapshot") == tree:
                    return found
            elif part.type == Part.Type.TOOL and _changes_files(part):
                found.append(part)
    last = next((m for m in reversed(history) if m.role == Message.Role.ASSISTANT), None)
    if last is None or open_step(last) is None:
        return []
    starts = [i for i, p in enumerate(last.loaded_parts) if p.type == Part.Type.STEP_START]
    lost = {id(p) for p in found}
    return [p for p in last.loaded_parts[starts[-1] :] if id(p) in lost]


def _changes_files(part: Part) -> bool:
    """A completed call of a tool that may change files (a read, a list, a wait do not)."""
    tool = TOOLS.get(part.tool)
    completed = (part.state or {}).get("status") == "completed"
    return completed and (tool is None or tool.side_effects)


def lost_state(part: Part, host: str, now: float) -> dict:
    """``part``'s state as a call lost with ``host``: an error that says so, its output kept."""
    state = dict(part.state or {})
    state.update(
        status="error",
        error=LOST_WITH_HOST.format(host=host or "its earlier host"),
        metadata={**(state.get("metadata") or {}), "lost_with_host": host},
    )
    state.setdefault("time", {}).setdefault("end", now)
    return state


def lose_on_abandon(locked: Session, lost: tuple[str, str]) -> None:
    """(Under the session's row lock, the run ended under a new epoch.) The calls of the
    session's path that ``lost`` (tree, host) lacks become errors that say so."""
    tree, host = lost
    now = time.time()
    for part in lost_calls(active_path(locked), tree):
        part.state = lost_state(part, host, now)
        Part.objects.filter(id=part.id).update(state=part.state)
        events.publish_on_commit(locked.id, events.PART_UPDATED, part=part_data(part))
    transaction.on_commit(lambda: rehome.clear_lost_mark(locked))


def lose_moved(moved: list[tuple[str, str, str]]) -> int:
    """The sweep moved these idle sessions (session, dead home, new home) off dead hosts
    (``rehome.sweep_dead``): with a central store, their files will be made from it, so a
    call whose change only the dead host's disk held (a run that ended, in error, before its
    step's snapshot reached the store) is said to be lost now, not at the session's next run
    — which may never come. On a shared volume nothing was lost. How many calls."""
    if not replication.enabled():
        return 0
    count = 0
    now = time.time()
    for sid, old, _ in moved:
        with transaction.atomic():
            locked = lock.lock_session(sid)
            if locked.busy_run_id:
                continue  # its run's recovery says it (``claim_files``)
            if locked.revert:
                # A pending revert's files were replicated by the revert itself, and the calls
                # after its boundary are out of the files by the revert, not lost.
                continue
            tree = locked.replicated_snapshot or snapshots.EMPTY_TREE
            for part in lost_calls(active_path(locked), tree):
                part.state = lost_state(part, old, now)
                Part.objects.filter(id=part.id).update(state=part.state)
                events.publish_on_commit(sid, events.PART_UPDATED, part=part_data(part))
                count += 1
    return count


def open_step(message: Message) -> tuple[int, str] | None:
    """(step index, snapshot before it) of an assistant message whose step has not ended
    (a ``step-start``, no ``step-finish``); else None."""
    parts = message.loaded_parts
    # The last step's: a continued answer holds a step per model call (docs/semantics.md §1.12).
    starts = [i for i, p in enumerate(parts) if p.type == Part.Type.STEP_START]
    if not starts or any(p.type == Part.Type.STEP_FINISH for p in parts[starts[-1] :]):
        return None
    start = parts[starts[-1]]
    if not (start.data or {}).get("snapshot"):
        return None
    return int(start.data.get("step") or 0), start.data["snapshot"]
