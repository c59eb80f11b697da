from __future__ import annotations

from typing import Any

from core.compiled import Compiled
from core.errors import NotFoundError
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import _iso, all_messages
from sessions_app.services import lock

from .models import Run
from .transcript import entries

# Every run start reads its run: compiled once (core/compiled.py).
_RUN = Compiled(lambda id: Run.objects.filter(id=id)[:1], id=str)


def run_row(run_id: str) -> Run | None:
    """The run ``run_id``, or None."""
    return _RUN.first(id=run_id)


def run_for_user(user, run_id: str) -> Run:  # noqa: ANN001
    """The run if ``user`` owns its session; NotFoundError otherwise (no existence leak)."""
    if not getattr(user, "is_authenticated", False):
        raise NotFoundError("No such run.")
    run = Run.objects.select_related("session").filter(id=run_id, session__owner_id=user.pk).first()
    if run is None:
        raise NotFoundError("No such run.")
    return run


def session_runs(session: Session, *, replaced: bool = False) -> list[Run]:
    """The session's runs, oldest first; those a regenerate replaced only with ``replaced``."""
    runs = Run.objects.filter(session=session).order_by("id")
    if not replaced:
        runs = runs.filter(replaced_by__isnull=True)
    return list(runs)


def active_runs(user_id: int, exclude: str = "") -> int:
    """The runs of ``user_id``'s sessions that have not ended (pending, running, waiting for
    approval): what ``concurrent_runs`` counts."""
    return (
        Run.objects.filter(session__owner_id=user_id)
        .exclude(status__in=Run.TERMINAL)
        .exclude(id=exclude)
        .count()
    )


def _branch_data(branch: dict | None) -> dict | None:
    if not branch:
        return None
    keys = ("parent_message_id", "continue_from", "index", "source_run_id", "applied")
    return {k: branch.get(k) for k in keys}


def waiting_calls(run: Run) -> list[Part]:
    """The tool calls that ``run`` waits on, in call order: the session's undecided calls
    (one run at most waits in a session, as it holds it; a resume or a fork's run may wait on
    calls another run made)."""
    return list(
        Part.objects.filter(
            session_id=run.session_id,
            type=Part.Type.TOOL,
            state__status="pending",
            state__approval__status="requested",
        ).order_by("message_id", "order")
    )


def required_action(run: Run) -> dict[str, Any] | None:
    """What a ``requires_action`` run waits for (docs/semantics.md §8.2; one query; None
    otherwise)."""
    if run.status != Run.Status.REQUIRES_ACTION:
        return None
    calls = [
        {
            "part_id": p.id,
            "tool": p.tool,
            "input": (p.state or {}).get("input"),
            "preview": ((p.state or {}).get("approval") or {}).get("preview", ""),
        }
        for p in waiting_calls(run)
    ]
    return {"type": "approve_tools", "tool_calls": calls}


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
        "replaced_by": run.replaced_by,
        "branch": _branch_data(run.branch),
        "multitask_strategy": run.multitask_strategy,
        "checkpoint": run.checkpoint,
        "model": run.model,
        "usage": run.usage or {},
        "required_action": required_action(run),
        "created_at": _iso(run.created_at),
        "started_at": _iso(run.started_at),
        "finished_at": _iso(run.finished_at),
    }


def _preview(message: Message, limit: int = 80) -> str:
    text = " ".join(
        "".join(p.text for p in message.loaded_parts if p.type == Part.Type.TEXT).split()
    )
    if not text:
        tools = [p.tool for p in message.loaded_parts if p.type == Part.Type.TOOL]
        text = ("tools: " + ", ".join(tools)) if tools else ""
    return text if len(text) <= limit else text[: limit - 1] + "…"


def checkpoint_timeline(session: Session) -> list[dict[str, Any]]:
    """docs/semantics.md §5.7: per run, each persisted tool-safe point of its transcript (its input,
    each finished tool batch, its answers) with the K that ``continue_from`` takes for it, the
    snapshot of the files there, and a preview. Three queries whatever the session's size;
    K comes from one pass over the tree (a message's K is its parent's plus its entries)."""
    messages = all_messages(session)
    by_id = {m.id: m for m in messages}
    ends, trees = _indexes_and_trees(messages, by_id, system=1 if session.system_prompt else 0)
    newest: dict[str, Message] = {}
    for m in messages:
        if m.run_id and (m.run_id not in newest or m.id > newest[m.run_id].id):
            newest[m.run_id] = m
    timeline = []
    for run in Run.objects.filter(session=session).order_by("id"):
        chain = []
        current = newest.get(run.id)
        while current is not None and current.run_id == run.id:
            chain.append(current)
            current = by_id.get(current.parent_id) if current.parent_id else None
        for m in reversed(chain):
            if m.completed_at is not None and entries(m):
                timeline.append(_checkpoint(run, m, ends[m.id], trees.get(m.id)))
    return timeline


def _indexes_and_trees(
    messages: list[Message], by_id: dict[str, Message], *, system: int
) -> tuple[dict[str, int], dict[str, str | None]]:
    """For every message: the K after it (its parent's plus its transcript entries; the
    system prompt counts one) and the files' tree there (its last ``step-finish``'s
    snapshot, else its parent's). Each message is resolved once, its ancestors first."""
    ends: dict[str, int] = {}
    trees: dict[str, str | None] = {}
    for message in messages:
        chain = []
        current: Message | None = message
        while current is not None and current.id not in ends:
            chain.append(current)
            current = by_id.get(current.parent_id) if current.parent_id else None
        for m in reversed(chain):
            parent = m.parent_id if m.parent_id in ends else None
            ends[m.id] = (ends[parent] if parent else system) + len(entries(m))
            finish = next(
                (
                    p.data.get("snapshot")
                    for p in reversed(m.loaded_parts)
                    if p.type == Part.Type.STEP_FINISH and p.data.get("snapshot")
                ),
                None,
            )
            trees[m.id] = finish or (trees[parent] if parent else None)
    return ends, trees


def _checkpoint(run: Run, m: Message, index: int, tree: str | None) -> dict[str, Any]:
    """One point of the timeline: message ``m`` of ``run``, K ``index``, files ``tree``."""
    has_tools = any(p.type == Part.Type.TOOL for p in m.loaded_parts)
    step = next(
        (p.data.get("step") for p in m.loaded_parts if p.type == Part.Type.STEP_START),
        None,
    )
    return {
        "run_id": run.id,
        "run_status": run.status,
        "message_id": m.id,
        "role": m.role,
        "kind": "input"
        if m.role == Message.Role.USER
        else ("tool-batch" if has_tools else "answer"),
        "step": step,
        "index": index,
        "snapshot": tree,
        "preview": _preview(m),
        "hidden": m.hidden,
        "created_at": _iso(m.created_at),
    }


def held_by_another(session: Session, run_id: str) -> bool:
    """Whether another run holds ``session``: its lease is live, or it lapsed while that run
    has not ended (its worker died or was stopped: the sweep starts it again, and the session
    is its own until it ends — a new run that took it would run beside the old one, and jump
    the runs queued behind it)."""
    holder = session.busy_run_id
    if not holder or holder == run_id:
        return False
    if lock.is_busy(session):
        return True
    return Run.objects.filter(id=holder).exclude(status__in=Run.TERMINAL).exists()
