"""The steps of a run: before each, recovery and a compaction when due; a step snapshots
the files, streams the model into an assistant message, records and gates the tool batch, runs
it, and closes with the snapshot after (``close_step``: the step-finish and patch parts)."""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.utils import timezone

from realtime import events
from sessions_app.models import Message, Part, Session
from sessions_app.selectors import message_data
from workspace import change_journal, skipped_files, snapshots

from ...providers import ProviderError
from .errors import AwaitingApproval, ContextOverflow, LockLost
from .state import LoopState

log = logging.getLogger(__name__)


class StepPhase(LoopState):
    """The loop of steps, and one step from its snapshot before to its snapshot after."""

    async def loop(self) -> None:
        max_steps = self.run.max_steps or settings.AGENT_MAX_STEPS
        for index in range(max_steps):
            self.check()
            if self.limits.limits_spending():
                await self.db(self.check_budget)  # a step that crossed it has finished
            # Rule 1.5: before every step (a no-op after a step that finished normally).
            await self.recover(mode="resume")
            await self.compact()  # rule 10: when the next call would pass the budget
            try:
                called_tools = await self.step(index)
            except ContextOverflow as exc:
                # The model's own count passed its window: compact, then try once more.
                self.overflow_retried = True
                if not await self.compact(force=True):
                    raise ProviderError(
                        f"{exc.__cause__} There is nothing older to compact.",
                        kind="context_overflow",
                    ) from exc
                called_tools = await self.step(index)
            if not called_tools:
                return
        self.run.result = "max_steps"

    async def step(self, index: int) -> bool:
        before = self.tree or await self.db(self.snap.track)
        message = self.new_message(Message.Role.ASSISTANT)
        self.new_part(message, Part.Type.STEP_START, data={"snapshot": before, "step": index})
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        tool_parts: list[Part] = []
        try:
            for call in await self.stream(message):
                tool_parts.append(self.pending_tool(message, call))
            waiting = await self.gate(tool_parts) if tool_parts else False
            if (self.mode != Session.Checkpoint.RUNS and tool_parts) or waiting:
                # The batch is on record before any of it runs: after a crash, recovery sees
                # these calls and never runs a side-effect tool twice (rule 1.7).
                await self.db(self.writer.flush)
            if waiting:
                raise AwaitingApproval()
            for part in tool_parts:
                self.check()
                if (part.state or {}).get("status") != "pending":
                    continue  # denied by a rule: ended without running
                await self.run_tool(part)
                if self.mode == Session.Checkpoint.TOOL:
                    await self.db(self.writer.flush)
        except (LockLost, AwaitingApproval):
            raise  # not a line more / the step goes on once the owner has decided
        except ProviderError as exc:
            overflow = exc.kind == "context_overflow" and not self.overflow_retried
            if overflow and self.drop_step(message):
                raise ContextOverflow() from exc
            await self.db(
                self.close_step, message, index, before, ran_tools=bool(tool_parts), finished=False
            )
            raise
        except BaseException:
            # A step that ends in an error or an abort still records what it did to the files.
            await self.db(
                self.close_step, message, index, before, ran_tools=bool(tool_parts), finished=False
            )
            raise
        await self.db(
            self.close_step, message, index, before, ran_tools=bool(tool_parts), finished=True
        )
        return bool(tool_parts)

    def close_step(
        self, message: Message, index: int, before: str, *, ran_tools: bool, finished: bool
    ) -> None:
        if self.control.lost.is_set() or self.control.lease_stale():
            # It lost the run: no snapshot, no row (another worker may be running git on the
            # session's index right now). Raised from a step's error handler, this replaces
            # the error: the run stops without writing.
            self.control.lost.set()
            raise LockLost()
        try:
            # What the step's writers said they changed: its snapshot, and what it left out.
            said = change_journal.pending(self.snap.worktree, self.snap.git_dir).paths
            after = self.snap.track(journal=True) if ran_tools else before
            changed = self.snap.patch(before, after) if after != before else []
            skipped = skipped_files.skipped(self.snap, said, after) if changed else []
        except snapshots.SnapshotError:
            log.exception("snapshot after step %s of %s failed", index, self.run.id)
            return
        self.tree = after
        data: dict[str, Any] = {"snapshot": after, "step": index}
        if skipped:
            data["skipped"] = skipped
        if not finished:
            data["interrupted"] = True
        self.new_part(message, Part.Type.STEP_FINISH, data=data)
        if changed:
            self.new_part(message, Part.Type.PATCH, data={"snapshot": before, "files": changed})
        if finished:
            message.completed_at = timezone.now()
        self.writer.touch(message, "completed_at", "tokens", "structured")
        if finished and ran_tools and self.mode != Session.Checkpoint.RUNS:
            # A step without tool calls ends the run: its rows are written with the end, in
            # the same transaction (``Ending._record_end``).
            self.writer.flush()
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        if changed:
            self.publish_diff(before, after)

    def drop_step(self, message: Message) -> bool:
        """Give up a step that got nothing from the model (not a token, not written yet):
        its message leaves the path. False when it cannot (something streamed)."""
        produced = any(p.type != Part.Type.STEP_START for p in message.loaded_parts)
        if produced or not self.writer.is_new(message) or self.history[-1:] != [message]:
            return False
        self.history.pop()
        self.head_id = message.parent_id
        self.writer.discard(message, message.parent_id)
        self.emit(events.MESSAGE_REMOVED, message_id=message.id)
        return True
