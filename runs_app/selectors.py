from __future__ import annotations

from typing import Any

from django.http import Http404

from sessions_app.selectors import _iso

from .models import Run


def run_for_user(user, run_id: str) -> Run:  # noqa: ANN001
    if not getattr(user, "is_authenticated", False):
        raise Http404("No such run.")
    run = Run.objects.select_related("session").filter(id=run_id, session__owner_id=user.pk).first()
    if run is None:
        raise Http404("No such run.")
    return run


def run_data(run: Run) -> dict[str, Any]:
    return {
        "id": run.id,
        "session_id": run.session_id,
        "mode": run.mode,
        "status": run.status,
        "result": run.result if run.result in ("stop", "compact") else None,
        "stop_reason": run.result,
        "output": run.output,
        "error": run.error,
        "input_message_id": run.input_message_id,
        "forked_from_run_id": run.forked_from_run_id,
        "forked_from_message_index": run.forked_from_message_index,
        "forked_from_session_id": run.forked_from_session_id,
        "multitask_strategy": run.multitask_strategy,
        "checkpoint": run.checkpoint,
        "model": run.model,
        "usage": run.usage or {},
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }
