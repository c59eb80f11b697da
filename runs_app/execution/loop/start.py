"""Before the first step: a new prompt confirms a pending revert and interrupts the path's
unfinished tools, then writes the user message (one transaction with the revert's
confirmation); continue and regenerate move the head and
the files to where the branch hangs from (one transaction, marked applied so a resumed run
skips it); multitask "rollback" takes the interrupted run off the path."""

from __future__ import annotations

import time
from typing import Any

from django.db import transaction
from django.utils import timezone

from realtime import events
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path, message_data, session_data
from sessions_app.services.cleanup import cleanup_session

from ...models import Run
from .errors import UNFINISHED
from .recovery import turn_finished
from .state import LoopState


class StartPhase(LoopState):
    """Start-up: the prompt, or the branch a continue or a regenerate makes."""

    async def start_up(self) -> bool:
        """Everything before the first step: False when there is nothing to run. One trip to
        a database thread (a thread hop each was a wait for the interpreter each, while a
        burst of runs starts beside the streaming ones)."""
        return await self.db(self._start_rows)

    def _start_rows(self) -> bool:
        """(A database thread.) The path (or the branch), the prompt, the files' snapshot."""
        run = self.run
        prompting = run.mode == Run.Mode.PROMPT and run.input_message_id is None
        written: list[Message] = []
        if run.branch and not run.branch.get("applied"):
            self.start_branch()
        elif prompting and self.session.revert:
            written = self.confirm_and_prompt()
        else:
            self.history = active_path(self.session)
            if prompting:
                written = self.start_prompt()
        if not prompting and turn_finished(self.history):
            return False
        # Stored (and committed) by now: the new input said after its rows.
        for message in written:
            self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        self.tree = self.snap.track(journal=True)
        return True

    def confirm_and_prompt(self) -> list[Message]:
        """Rule 1.3 / 3.6: a new prompt confirms a pending revert first — in the prompt's own
        transaction, so no reader ever sees the path between the two (the reverted turns gone,
        the prompt not there yet: an empty chat and "later branches" for a moment), and the
        cleanup's events go out with the prompt's, after the commit."""
        with transaction.atomic():
            self.session = cleanup_session(
                session=self.session, holder_run_id=self.run.id, fence=self.fence
            )
            self.head_id = self.session.head_id
            self.history = active_path(self.session)
            return self.start_prompt()

    def start_prompt(self) -> list[Message]:
        """Rule 1.3: interrupt unfinished tools on the path, then write the user message (the
        messages written, for the caller to say once committed)."""
        if self.run.multitask_strategy == "rollback" and self.run.interrupted_run_id:
            with transaction.atomic():  # with the checkpoint below: fenced together
                self.roll_back_interrupted()
                written = self._start_prompt()
                self.fence()
            return written
        return self._start_prompt()

    def _start_prompt(self) -> list[Message]:
        now = time.time()
        for message in self.history:
            for part in message.loaded_parts:
                state = part.state or {}
                if part.type == Part.Type.TOOL and state.get("status") in UNFINISHED:
                    self.interrupt(part, reason="prompt", now=now)
        written = []
        for item in self.run.input or []:
            message = self.new_message(Message.Role.USER)
            message.completed_at = message.created_at
            self.new_part(message, Part.Type.TEXT, text=str(item.get("content", "")))
            written.append(message)
        if written:
            # Written with the input, in its transaction: a run resumed after a crash in
            # between would else write its input a second time.
            self.run.input_message_id = written[0].id
            self.writer.touch(self.run, "input_message_id")
        self.writer.flush()
        return written

    def start_branch(self) -> None:
        """Continue/regenerate (SEMANTICS 5): the head moves to the message the branch hangs
        from, the files go back to what they were there when the branch leaves the current
        head (recorded first, so nothing is lost), the new input is written, the replaced
        messages are hidden: one transaction, marked applied so a resumed run skips it."""
        branch = dict(self.run.branch)
        parent = branch.get("parent_message_id")
        files, before = branch.get("files"), None
        if files and parent != self.session.head_id:
            before = self.snap.track(journal=True)
            if before != files:
                self.snap.checkout(files, self.snap.patch(before, files))
        self.head_id = parent
        self.history = active_path(self.session, leaf_id=parent) if parent else []
        try:
            written = self.apply_branch(branch, parent, files, before)
        except BaseException:
            if before and before != files:
                # The branch is not on record: the files go back to what the head had (this
                # run holds the session, so nobody else moved them meanwhile).
                self.snap.checkout(before, self.snap.patch(files, before))
            raise
        self.session.head_id = self.head_id
        # The path is another one now, and the files maybe too: the summary follows both.
        summary = self.store_summary(files if before else self.snap.track(journal=True))
        for message in written:
            self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        self.emit(events.SESSION_UPDATED, session=session_data(self.session))
        if before and before != files:
            diff = self.snap.diff_stat(before, files)
            self.emit(events.SESSION_DIFF, diff=diff, summary=summary)

    def apply_branch(
        self, branch: dict[str, Any], parent: str | None, files: str | None, before: str | None
    ) -> list[Message]:
        """The branch's rows, in one transaction: its input, the head, the hidden messages,
        the history event."""
        written: list[Message] = []
        with transaction.atomic():
            for item in branch.get("input") or []:
                message = self.new_message(Message.Role.USER)
                message.completed_at = message.created_at
                self.new_part(message, Part.Type.TEXT, text=str(item.get("content", "")))
                written.append(message)
            stamp = timezone.now()
            if not written:
                Session.objects.filter(id=self.session.id).update(head_id=parent, updated_at=stamp)
            self.writer.flush()
            # The session published next carries the ``updated_at`` stored with this head:
            # the chat sets aside a session older than the one it holds (a late event), so
            # it must look neither older nor newer than it is.
            self.session.updated_at = (self.writer.head_stamped if written else None) or stamp
            branch["applied"] = True
            fields: dict[str, Any] = {"branch": branch}
            if written and self.run.input_message_id is None:
                fields["input_message_id"] = self.run.input_message_id = written[0].id
            Run.objects.filter(id=self.run.id).update(**fields)
            self.run.branch = branch
            if branch.get("hide"):
                Message.objects.filter(id__in=branch["hide"], session_id=self.session.id).update(
                    hidden=True
                )
            if branch.get("replaces"):
                Run.objects.filter(id=branch["replaces"]).update(replaced_by=self.run.id)
            HistoryEvent.objects.create(
                session_id=self.session.id,
                kind="regenerate" if self.run.mode == Run.Mode.REGENERATE else "continue",
                run_id=self.run.id,
                data={
                    "source_run_id": branch.get("source_run_id"),
                    "index": branch.get("index"),
                    "parent_message_id": parent,
                    "files_before": before,
                    "files": files if before else None,
                    "hidden": branch.get("hide") or [],
                },
            )
        return written

    def roll_back_interrupted(self) -> None:
        """multitask_strategy "rollback": the interrupted run's messages leave the active path
        (they stay stored, as a branch); the new run starts where that run started."""
        stopped = Run.objects.filter(id=self.run.interrupted_run_id).first()
        if stopped is None or stopped.input_message_id is None:
            return
        start = Message.objects.filter(id=stopped.input_message_id).first()
        if start is None or start.id not in {m.id for m in self.history}:
            return
        self.head_id = start.parent_id
        self.history = self.history[: [m.id for m in self.history].index(start.id)]
        self.writer.set_head(self.head_id) if self.head_id else None
        if self.head_id is None:
            Session.objects.filter(id=self.session.id).update(head=None)
        HistoryEvent.objects.create(
            session_id=self.session.id,
            kind="rollback",
            run_id=self.run.id,
            data={"reason": "multitask_strategy", "rolled_back_run_id": stopped.id},
        )
