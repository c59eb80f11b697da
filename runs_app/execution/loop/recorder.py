"""The one place a run's rows and events meet: a row is made (``new_message``,
``new_part``) or changed (``writer.touch``) in the loop's buffer, and its event is held with it
(``emit``) until the checkpoint that stores it (``Checkpointer.flush``) publishes it — so what a
browser sees was stored first. Text and tool-output deltas are the exception, by design:
they go out at once and are stored with the part every ``STREAM_FLUSH_SECONDS``."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data, part_data
from sessions_app.services.changes import changes_summary, path_start

from .errors import UNFINISHED
from .state import LoopState


class Recorder(LoopState):
    """Making rows, changing them and saying so: buffered with their events, every write fenced."""

    def emit(self, type: str, **payload: Any) -> None:
        """An event about this run's rows: published once they are stored (held for the
        checkpoint that writes them). ``checkpoint=runs`` stores them only at the end, so
        there they go out at once, marked ``"stored": false`` (the chat reads the run back
        when it ends)."""
        if self.control.lost.is_set():
            return  # another execution may own the run: it says what happens now
        if self.mode == Session.Checkpoint.RUNS and self.writer.pending:
            payload["stored"] = False
        elif self.writer.hold(type, payload):
            return
        events.publish(self.session.id, type, **payload)

    def new_part(self, message: Message, type: str, **fields: Any) -> Part:
        parts = message.loaded_parts
        part = Part(
            message_id=message.id, session_id=self.session.id, order=len(parts), type=type, **fields
        )
        parts.append(part)
        self.writer.add(part)
        return part

    def new_message(self, role: str) -> Message:
        message = Message(
            session_id=self.session.id,
            run_id=self.run.id,
            parent_id=self.head_id,
            role=role,
            model=self.run.model if role == Message.Role.ASSISTANT else "",
            created_at=timezone.now(),
        )
        message.loaded_parts = []
        self.writer.add(message)
        self.history.append(message)
        self.head_id = message.id
        self.writer.set_head(message.id)
        return message

    def fence(self) -> None:
        """Inside a transaction: ``LeaseLost`` unless this execution still owns the run."""
        self.writer.fence()

    def interrupt(self, part: Part, *, reason: str, now: float | None = None) -> None:
        state = dict(part.state or {})
        state.update(
            status="error",
            error="Tool execution was interrupted.",
            metadata={**(state.get("metadata") or {}), "interrupted": True, "reason": reason},
        )
        state.setdefault("time", {})["end"] = now or time.time()
        part.state = state
        self.writer.touch(part, "state")
        self.emit(events.PART_UPDATED, part=part_data(part))

    def publish_diff(self, before: str, after: str) -> None:
        diff = self.snap.diff_stat(before, after)
        self.emit(events.SESSION_DIFF, diff=diff, summary=self.store_summary(after))

    def store_summary(self, now: str) -> dict[str, int]:
        """The session's ``summary`` with its files at ``now``, counted over the path as this
        loop holds it (its rows may not all be written yet): what ``GET …/diff/`` lists."""
        summary = changes_summary(self.snap, path_start(self.history), now)
        with transaction.atomic():
            Session.objects.filter(id=self.session.id).update(summary=summary)
            self.fence()
        self.session.summary = summary
        return summary

    def fail_last_message(self, text: str) -> None:
        message = self.history[-1] if self.history else None
        if (
            message is None
            or message.role != Message.Role.ASSISTANT
            or message.run_id != self.run.id
        ):
            return
        # A call it put on record and never finished ends with it, as the message does: a
        # run that ended in an error shows no call still pending or running (never run
        # twice: a resume sees it interrupted, rule 1.5).
        now = time.time()
        for part in message.loaded_parts:
            status = (part.state or {}).get("status")
            if part.type == Part.Type.TOOL and status in UNFINISHED:
                self.interrupt(part, reason="error", now=now)
        message.error = {"reason": "ProviderError", "message": text, "metadata": {}}
        message.completed_at = timezone.now()
        self.writer.touch(message, "error", "completed_at")
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
