"""Seeded history: a session of N finished runs written in bulk, for trying the UI and the
history moves on long conversations, and for the benchmarks and the statement-count tests.

Each run is what a scripted turn with one tool call leaves: the user message, an assistant
message that calls ``read`` (its result in the tool part), and the final assistant answer.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from core import ids
from sessions_app.models import Message, Part, Session
from workspace.snapshots import EMPTY_TREE

from ..models import Run


def _step(mid: str, sid: str, order: int, kind: str, step: int) -> Part:
    return Part(
        message_id=mid,
        session_id=sid,
        order=order,
        type=kind,
        data={"snapshot": EMPTY_TREE, "step": step},
    )


def seed_runs(session: Session, runs: int, *, batch_size: int = 2000) -> Session:
    """``runs`` finished turns appended to ``session``'s head, written in bulk in one
    transaction; the session's head moves to the last answer."""
    base = timezone.now() - timedelta(days=1)
    run_rows, messages, parts = [], [], []
    parent = session.head_id
    for i in range(runs):
        run = _run(session, i, base)
        created = base + timedelta(milliseconds=4 * i)
        user, call, answer = ids.message_id(), ids.message_id(), ids.message_id()
        run.input_message_id = user
        run_rows.append(run)
        for mid, role, parent_id in (
            (user, Message.Role.USER, parent),
            (call, Message.Role.ASSISTANT, user),
            (answer, Message.Role.ASSISTANT, call),
        ):
            messages.append(
                Message(
                    id=mid,
                    session_id=session.id,
                    run_id=run.id,
                    parent_id=parent_id,
                    role=role,
                    created_at=created,
                    completed_at=created,
                    model="" if role == Message.Role.USER else "scripted",
                )
            )
        parts += _turn_parts(session.id, i, user=user, call=call, answer=answer)
        parent = answer
    with transaction.atomic():
        Run.objects.bulk_create(run_rows, batch_size=batch_size)
        Message.objects.bulk_create(messages, batch_size=batch_size)
        Part.objects.bulk_create(parts, batch_size=batch_size)
        Session.objects.filter(id=session.id).update(head_id=parent)
    session.refresh_from_db()
    return session


def _run(session: Session, i: int, base: datetime) -> Run:
    """The ``i``-th seeded run, completed (not saved)."""
    return Run(
        id=ids.new_id("run"),
        session_id=session.id,
        mode=Run.Mode.PROMPT,
        status=Run.Status.COMPLETED,
        result="stop",
        input=[{"role": "user", "content": f"question {i}"}],
        model="scripted",
        created_at=base,
        finished_at=base,
    )


def _turn_parts(sid: str, i: int, *, user: str, call: str, answer: str) -> list[Part]:
    """The parts of the ``i``-th turn: the question, the ``read`` call with its result
    between its step's start and finish, and the answer in a second step."""
    return [
        Part(
            message_id=user,
            session_id=sid,
            type="text",
            text=f"Question {i}: what does notes/{i}.txt say about the plan?",
        ),
        _step(call, sid, 0, "step-start", 0),
        Part(
            message_id=call,
            session_id=sid,
            order=1,
            type="tool",
            call_id=f"call_{i}",
            tool="read",
            state={
                "status": "completed",
                "input": {"path": f"notes/{i}.txt"},
                "output": f"Note {i}: the plan is on track; next review on day {i + 1}.",
                "error": None,
                "metadata": {},
                "time": {"start": 0, "end": 0},
            },
        ),
        _step(call, sid, 2, "step-finish", 0),
        _step(answer, sid, 0, "step-start", 1),
        Part(
            message_id=answer,
            session_id=sid,
            order=1,
            type="text",
            text=f"Answer {i}: the note says the plan is on track, review on day {i + 1}.",
        ),
        _step(answer, sid, 2, "step-finish", 1),
    ]
