"""Recovery of the last unfinished turn (SEMANTICS 1.5), before a resumed run's first step."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING

from django.utils import timezone

from sessions_app import events
from sessions_app.models import Message, Part
from sessions_app.selectors import message_data

from ..tools import TOOLS

if TYPE_CHECKING:
    from ..engine import AgentLoop

UNFINISHED = {"pending", "running"}


def recover_path(loop: AgentLoop, *, mode: str) -> None:
    last = next((m for m in reversed(loop.history) if m.role == Message.Role.ASSISTANT), None)
    if last is None:
        return
    blocked = False
    for part in last.loaded_parts:
        if part.type != Part.Type.TOOL:
            continue
        status = (part.state or {}).get("status")
        tool = TOOLS.get(part.tool)
        if status == "completed":
            continue
        if status == "error":
            if tool is not None and tool.blocks_on_error:
                blocked = True
            continue
        if status not in UNFINISHED:
            continue
        if blocked:
            loop.interrupt(part, reason="blocked", now=time.time())
        elif tool is not None and not tool.side_effects:
            loop.run_tool(part)  # recall: no side effects, so running it again is safe
        else:
            loop.interrupt(part, reason=mode, now=time.time())  # never run twice
            blocked = True
    if last.completed_at is None:
        last.completed_at = timezone.now()
        if not last.error:
            last.error = {
                "reason": "UnfinishedAssistantMessage",
                "message": "Assistant message was not completed before recovery.",
                "metadata": {"recovered": True, "mode": mode},
            }
        loop.writer.touch(last, "completed_at", "error")
        loop.emit(events.MESSAGE_UPDATED, message=message_data(last))
    if loop.mode != "runs":  # mode "runs" writes at terminal states only
        loop.writer.flush()


def requeue_stale_runs() -> list[str]:
    """Sessions whose lock lease expired belong to a dead worker: enqueue the holder's run
    again (it resumes), or release the lock when the holder had already finished.

    The Redis broker would re-deliver the dead worker's task only after its visibility
    timeout; this sweep (every worker and the embedded server run it) does not wait that
    long. A duplicate delivery is harmless: ``run_agent`` takes a running run over only once
    its lease has expired, and skips a finished one."""
    from django.db import transaction
    from django.utils import timezone

    from sessions_app.models import Session
    from sessions_app.services import lock

    from ..executor import enqueue
    from ..models import Run

    requeued = []
    stale = Session.objects.filter(
        busy_run_id__isnull=False, lease_expires_at__lt=timezone.now()
    ).values_list("id", "busy_run_id")
    for session_id, run_id in stale:
        run = Run.objects.filter(id=run_id).only("status").first()
        if run is None or run.is_terminal:
            with transaction.atomic():
                Session.objects.select_for_update().filter(id=session_id).first()
                lock.hand_over(session_id, run_id, None)
            continue
        enqueue(run_id)
        requeued.append(run_id)
    return requeued


def start_sweeper() -> None:
    """A daemon thread that runs ``requeue_stale_runs`` every half lease (once per process)."""
    import os
    import threading

    from django.conf import settings
    from django.db import connection

    global _sweeper_pid
    if _sweeper_pid == os.getpid():
        return
    _sweeper_pid = os.getpid()

    def sweep() -> None:
        import logging

        log = logging.getLogger(__name__)
        interval = max(1.0, settings.RUN_LEASE_SECONDS / 2)
        while True:
            try:
                requeued = requeue_stale_runs()
                if requeued:
                    log.warning("re-enqueued runs with expired leases: %s", requeued)
            except Exception:
                log.exception("stale-run sweep failed")
            finally:
                connection.close()
            time.sleep(interval)

    threading.Thread(target=sweep, name="stale-run-sweeper", daemon=True).start()


_sweeper_pid = 0
