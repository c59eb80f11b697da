"""The agent loop: the steps of one run, as a coroutine on the process's run host
(``runs_app/host.py``), which carries many runs at once. What blocks — database statements,
git, file tools — runs in the host's threads (``await self.db(...)``); the model's stream,
waits, events and abort checks stay on the loop.

1. ``lifecycle.begin``: the run goes pending → running under the session's busy lock (a
   lease the heartbeat renews);
2. start-up: ``prompt`` interrupts unfinished tools and writes the user message; ``resume``
   recovers the last unfinished turn (SEMANTICS 1.5, ``AgentLoop.recover``);
3. steps: snapshot, stream the model into parts, run the tool batch, snapshot again, checkpoint;
4. ``lifecycle.finish``: the end is recorded and the session handed to the next queued run.
"""

from __future__ import annotations

import asyncio
import difflib
import json
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any, TypeVar

from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    transaction,
)
from django.utils import timezone

from quotas_app import clock
from quotas_app import services as quotas
from quotas_app.limits import Limits
from quotas_app.limits import effective as effective_limits
from sessions_app import events, metrics, models_catalog, permissions, snapshots
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path, message_data, part_data, session_data
from sessions_app.services.revert import changes_summary, cleanup_session, path_start

from . import compaction, lifecycle, output_schema, sandbox
from .checkpoint import Checkpointer, storable
from .control import RunControl, RunHostLike
from .fencing import LeaseLost
from .models import Run
from .providers import ProviderError, get_provider
from .providers.base import Finish, ReasoningDelta, StructuredOutput, TextDelta, ToolCall
from .selectors import run_data
from .tools import (
    TOOLS,
    ToolContext,
    ToolError,
    ToolInterrupted,
    available_tools,
    current_text,
)
from .transcript import model_messages

log = logging.getLogger(__name__)
T = TypeVar("T")

UNFINISHED = {"pending", "running"}


class Aborted(Exception):
    pass


# The run's lease is gone (the keeper could not renew it in time, or a write found another
# execution's epoch): not a row more.
LockLost = LeaseLost


class ContextOverflow(Exception):
    """The model refused the transcript as too long before answering anything: the step is
    given up, to be tried once more after a compaction."""


class AwaitingApproval(Exception):
    """A tool call of the batch waits for the owner's decision: the run parks (8.2)."""


class BudgetReached(Exception):
    """The owner's tokens per day or cost per month ran out during the run: it stops before
    its next model call (its last step finished) and ends ``error`` with reason ``quota``."""

    def __init__(self, overrun: quotas.Overrun) -> None:
        super().__init__(overrun.message)
        self.overrun = overrun


class AgentLoop:
    def __init__(self, run: Run, *, host: RunHostLike, control: RunControl) -> None:
        self.run = run
        self.host = host
        self.control = control
        self.session: Session = run.session
        self.provider = get_provider(run.model or self.session.model or settings.AGENT_MODEL)
        self.tools = {t.name: t for t in available_tools()}
        self.snap = snapshots.for_session(self.session)
        # Every write of this execution is fenced by the epoch ``begin`` gave it.
        self.epoch: int = run.lease_epoch
        self.writer = Checkpointer(
            self.session.id, run_id=run.id, epoch=self.epoch, lost=control.lost.is_set
        )
        self.mode = run.checkpoint or self.session.checkpoint
        self.history: list[Message] = []
        self.head_id: str | None = self.session.head_id
        self.tree: str | None = None
        # What the run used so far (a resumed run adds to it); ``usage_start``: before this
        # execution, so the session's sum gets only what this one adds.
        self.usage: dict[str, Any] = dict(run.usage or {})
        self.usage_start: dict[str, Any] = dict(self.usage)
        self.overflow_retried = False
        # Whether ``recover`` has dealt with the step an earlier execution left open: until
        # then, an end of this execution closes that step itself (``_record_end``).
        self.recovered = False
        # The owner's limits, read once per execution (``execute``): the budget checked
        # between steps, the worktree's size bound for the tools.
        self.limits = Limits()

    # -- helpers ------------------------------------------------------------------------------
    def aborted(self) -> bool:
        return self.control.stopped()

    def check(self) -> None:
        if self.control.lost.is_set() or self.control.lease_stale():
            # Also when the keeper has not said so yet: a process that was stopped past its
            # lease wakes up here, before its next tool, write or event.
            self.control.lost.set()
            raise LockLost()
        if self.control.abort.is_set():
            raise Aborted()

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` in one of the host's database threads (it blocks; the loop must not)."""
        return await self.host.blocking(fn, *args, **kwargs)

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

    # -- phases -------------------------------------------------------------------------------
    async def execute(self) -> None:
        try:
            await self._execute()
        except LockLost:
            # Its end (or its park) was refused: another execution owns the run now.
            self.control.lost.set()
            log.warning("run %s lost its lock before its end was recorded", self.run.id)

    async def _execute(self) -> None:
        run = self.run
        status, error = Run.Status.COMPLETED, None
        try:
            self.limits = await self.db(effective_limits, self.session.owner_id)
            self.emit(events.RUN_UPDATED, run=run_data(run))
            self.emit(events.SESSION_STATUS, status="busy", run_id=run.id)
            if run.mode == Run.Mode.COMPACT:
                # "Compact now": the summary, nothing else (SEMANTICS 10, result "compact").
                self.history = await self.db(active_path, self.session)
                await self.compact(force=True)
                run.result = "compact"
                await self.finish(Run.Status.COMPLETED, None)
                return
            async with self.host.starting():
                if not await self.start_up():
                    # Resume with nothing unfinished: the turn had ended; no model call, no tool.
                    await self.finish(Run.Status.COMPLETED, None)
                    return
            await self.loop()
        except AwaitingApproval:
            await self.park()
            return
        except BudgetReached as exc:
            status = Run.Status.ERROR
            error = {
                "type": "QuotaExceeded",
                "reason": "quota",
                "limit": exc.overrun.name,
                "message": exc.overrun.message,
            }
        except Aborted:
            status = Run.Status.CANCELLED
        except LockLost:
            # The lease is gone: another worker may hold the session now. Nothing more is
            # written (not even what is buffered), its tools are stopped: that worker
            # resumes from the checkpoint.
            self.control.lost.set()
            log.warning("run %s lost its lock; it stops without writing", run.id)
            return
        except ProviderError as exc:
            status, error = Run.Status.ERROR, {"type": "ProviderError", "message": str(exc)}
            self.fail_last_message(str(exc))
        except (OperationalError, InterfaceError) as exc:
            # The database went away under the loop (a restart, a killed connection). What
            # was checkpointed is kept; the run ends here and can be resumed or continued.
            log.warning("run %s lost its database connection: %s", run.id, exc)
            message = (
                f"The database connection was lost during the run ({str(exc).strip()}). "
                "What was saved before is kept: resume or continue the run."
            )
            status, error = Run.Status.ERROR, {"type": "DatabaseError", "message": message}
            self.fail_last_message(message)
        except Exception as exc:
            log.exception("run %s failed", run.id)
            status, error = Run.Status.ERROR, {"type": exc.__class__.__name__, "message": str(exc)}
            self.fail_last_message(str(exc))
        finally:
            close = getattr(self.provider, "aclose", None)
            if close is not None:
                await close()
        await self.finish(status, error)

    async def start_up(self) -> bool:
        """Everything before the first step: False when there is nothing to run."""
        run = self.run
        prompting = run.mode == Run.Mode.PROMPT and run.input_message_id is None
        if prompting and self.session.revert:
            # Rule 1.3 / 3.6: a new prompt confirms a pending revert first.
            self.session = await self.db(
                cleanup_session, session=self.session, holder_run_id=run.id, fence=self.fence
            )
            self.head_id = self.session.head_id
        if run.branch and not run.branch.get("applied"):
            await self.db(self.start_branch)
        else:
            self.history = await self.db(active_path, self.session)
        if prompting:
            await self.db(self.start_prompt)
        elif turn_finished(self.history):
            return False
        self.tree = await self.db(self.snap.track)
        return True

    def fence(self) -> None:
        """Inside a transaction: ``LeaseLost`` unless this execution still owns the run."""
        self.writer.fence()

    def start_prompt(self) -> None:
        """Rule 1.3: interrupt unfinished tools on the path, then write the user message."""
        if self.run.multitask_strategy == "rollback" and self.run.interrupted_run_id:
            with transaction.atomic():  # with the checkpoint below: fenced together
                self.roll_back_interrupted()
                self._start_prompt()
                self.fence()
            return
        self._start_prompt()

    def _start_prompt(self) -> None:
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
        for message in written:
            self.emit(events.MESSAGE_UPDATED, message=message_data(message))

    def start_branch(self) -> None:
        """Continue/regenerate (SEMANTICS 5): the head moves to the message the branch hangs
        from, the files go back to what they were there when the branch leaves the current
        head (recorded first, so nothing is lost), the new input is written, the replaced
        messages are hidden: one transaction, marked applied so a resumed run skips it."""
        branch = dict(self.run.branch)
        parent = branch.get("parent_message_id")
        files, before = branch.get("files"), None
        if files and parent != self.session.head_id:
            before = self.snap.track()
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
        summary = self.store_summary(files if before else self.snap.track())
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
            if not written:
                Session.objects.filter(id=self.session.id).update(
                    head_id=parent, updated_at=timezone.now()
                )
            self.writer.flush()
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

    async def recover(self, *, mode: str) -> None:
        """Rule 1.5, on the last assistant message of the path: completed and error tools
        are kept; unfinished tools without side effects run again; with side effects they
        are interrupted (never run twice), and so is every unfinished tool after an
        interrupt or a blocking error; an unfinished message is completed with an error."""
        last = next((m for m in reversed(self.history) if m.role == Message.Role.ASSISTANT), None)
        if last is None:
            self.recovered = True
            return
        parked = parked_step(last)
        left_open = open_step(last) if parked is None else None
        if parked is not None and any(
            approval_of(p) == "requested" and (p.state or {}).get("status") == "pending"
            for p in last.loaded_parts
        ):
            raise AwaitingApproval()  # still undecided: ask again (8.4)
        blocked = False
        for part in last.loaded_parts:
            if part.type != Part.Type.TOOL:
                continue
            state = part.state or {}
            status = state.get("status")
            tool = TOOLS.get(part.tool)
            if status == "completed":
                continue
            if status == "error":
                denied = (state.get("metadata") or {}).get("denied")
                if tool is not None and tool.blocks_on_error and not denied:
                    blocked = True
                continue
            if status not in UNFINISHED:
                continue
            if blocked:
                self.interrupt(part, reason="blocked", now=time.time())
            elif status == "pending" and approval_of(part) == "allowed":
                await self.run_tool(part)  # decided, never started: its first execution
            elif tool is not None and not tool.side_effects:
                await self.run_tool(part)  # recall: no side effects, so running it again is safe
            else:
                self.interrupt(part, reason=mode, now=time.time())  # never run twice
                blocked = True
        if parked is not None:
            # The step that stopped for approvals ends now, as it would have then.
            index, before = parked
            try:
                await self.db(self.close_step, last, index, before, ran_tools=True, finished=True)
            finally:
                self.recovered = open_step(last) is None  # as below
            return
        if left_open is not None:
            # A step an execution left open (its worker died, or lost the run, between a
            # tool and the step's snapshot) ends interrupted, with what its tools did to the
            # files: else that would be in the worktree and in no snapshot (SEMANTICS 1.7).
            index, before = left_open
            try:
                await self.db(self.close_step, last, index, before, ran_tools=True, finished=False)
            finally:
                # Closed once its parts are made (they wait for the next flush), even when
                # what follows them failed (a diff event): the end must not close it again.
                self.recovered = open_step(last) is None
        else:
            self.recovered = True
        if last.completed_at is None:
            last.completed_at = timezone.now()
            if not last.error:
                last.error = {
                    "reason": "UnfinishedAssistantMessage",
                    "message": "Assistant message was not completed before recovery.",
                    "metadata": {"recovered": True, "mode": mode},
                }
            self.writer.touch(last, "completed_at", "error")
            self.emit(events.MESSAGE_UPDATED, message=message_data(last))
        if self.mode != Session.Checkpoint.RUNS:  # "runs" writes at terminal states only
            await self.db(self.writer.flush)

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
            if exc.kind == "context_overflow" and not self.overflow_retried:
                if self.drop_step(message):
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

    async def model_events(
        self, prompt: list[dict[str, Any]], specs: list[dict[str, Any]]
    ) -> AsyncIterator[Any]:
        """The model's stream; a call refused for its rate before any token is tried again
        after the provider's ``Retry-After`` (else 1, 2, 4… s), ``AGENT_RATE_LIMIT_RETRIES``
        times, then the run ends with an error saying so."""
        attempt, waited = 0, 0.0
        while True:
            started = False
            try:
                async for event in self.provider.astream(prompt, specs, should_abort=self.aborted):
                    started = True
                    yield event
                return
            except ProviderError as exc:
                if started or exc.kind != "rate_limit":
                    raise
                delay = exc.retry_after if exc.retry_after is not None else 2.0**attempt
                if attempt >= settings.AGENT_RATE_LIMIT_RETRIES:
                    raise ProviderError(
                        f"{exc} Tried {attempt + 1} times over {waited:.0f} s; try again later.",
                        kind="rate_limit",
                    ) from exc
                if delay > settings.AGENT_RATE_LIMIT_MAX_WAIT:
                    raise ProviderError(
                        f"{exc} It asks to wait {delay:.0f} s; try again later.",
                        kind="rate_limit",
                    ) from exc
                attempt += 1
                waited += delay
                log.warning("run %s: rate limited, trying again in %.1f s", self.run.id, delay)
                await self.pause(delay)

    async def pause(self, seconds: float) -> None:
        """Wait, stopping at once for an abort or a lost lease."""
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            self.check()
            await asyncio.sleep(min(0.05, max(0.0, end - time.monotonic())))
        self.check()

    def pending_tool(self, message: Message, call: ToolCall) -> Part:
        part = self.new_part(
            message,
            Part.Type.TOOL,
            call_id=call.call_id,
            tool=call.name,
            state={
                "status": "pending",
                "input": call.arguments,
                "output": None,
                "error": None,
                "metadata": {},
                "time": {"start": None, "end": None},
            },
        )
        self.emit(events.PART_UPDATED, part=part_data(part))
        return part

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
            after = self.snap.track() if ran_tools else before
            changed = self.snap.patch(before, after) if after != before else []
            skipped = self.snap.skipped() if changed else []
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
        if finished and self.mode != Session.Checkpoint.RUNS:
            self.writer.flush()
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        if changed:
            self.publish_diff(before, after)

    def count(self, usage: dict[str, Any]) -> dict[str, Any]:
        """One model call's usage with its cost (the model's price in ``AGENT_MODELS``),
        added to the run's: what the call's message records."""
        model = self.run.model or self.session.model or settings.AGENT_MODEL
        spent = {k: int(v or 0) for k, v in usage.items()}
        spent["cost_usd"] = models_catalog.cost(model, spent)
        self.usage = models_catalog.add_usage(self.usage, {**spent, "calls": 1})
        metrics.count_tokens(model, spent)
        return spent

    def record_usage(self, message: Message) -> None:
        """The call's usage row (the message's ``tokens``), written with the message by the
        next flush; the owner's day and month counters follow in that transaction."""
        self.writer.add_usage(
            quotas.usage_record(
                user_id=self.session.owner_id,
                session_id=self.session.id,
                run_id=self.run.id,
                message_id=message.id,
                model=self.run.model or self.session.model or settings.AGENT_MODEL,
                usage=message.tokens,
            )
        )

    def check_budget(self) -> None:
        """Between steps: stop (``BudgetReached``) once the owner's tokens per day or cost per
        month is reached, counting this run's calls not written yet."""
        now = clock.now()
        pending = quotas.pending_spent(self.writer.pending_usage, now)
        overrun = quotas.overrun(self.session.owner_id, self.limits, pending=pending)
        if overrun is not None:
            raise BudgetReached(overrun)

    @staticmethod
    def reported(
        usage: dict[str, Any],
        prompt: list[dict[str, Any]],
        parts: dict[str, Part],
        calls: list[ToolCall],
    ) -> dict[str, Any]:
        """The call's usage as the provider reported it; what it left out (some servers
        send none while streaming) estimated as characters / 4, and marked ``estimated``."""
        usage = dict(usage)
        estimated = False
        if not usage.get("input_tokens"):
            usage["input_tokens"] = compaction.estimate_tokens(prompt)
            estimated = True
        if "output_tokens" not in usage:
            produced = sum(len(p.text) for p in parts.values())
            produced += sum(len(c.raw_arguments or json.dumps(c.arguments)) for c in calls)
            usage["output_tokens"] = produced // 4
            estimated = True
        if estimated:
            usage["estimated"] = 1
        return usage

    def usage_added(self) -> dict[str, Any]:
        """What this execution used (the run's usage minus what it had when it began)."""
        added = {}
        for key, value in self.usage.items():
            before = self.usage_start.get(key, 0)
            if value != before:
                added[key] = round(value - before, 8) if key == "cost_usd" else value - before
        return added

    async def compact(self, *, force: bool = False) -> bool:
        """SEMANTICS 10: when the transcript the next model call would be sent passes the
        model's budget (or ``force``), summarise the path before the latest user message
        with a model call of its own and write the summary as a message on the path. True
        when it did."""
        model = self.run.model or self.session.model or settings.AGENT_MODEL
        limit = compaction.budget(model)
        before = compaction.estimate_tokens(
            model_messages(self.history, self.session.system_prompt)
        )
        if not force and before <= limit:
            return False
        cut = compaction.cut_point(self.history)
        if cut is None:
            return False  # the latest turn alone: nothing older to summarise
        request = compaction.summary_request(self.history, cut, self.session.system_prompt, limit)
        summary: list[str] = []
        spent: dict[str, Any] = {}
        async for event in self.model_events(request, []):
            if isinstance(event, TextDelta):
                summary.append(event.text)
            elif isinstance(event, Finish):
                spent = self.count(event.usage)
            self.check()
        message = self.new_message(Message.Role.ASSISTANT)
        message.completed_at = timezone.now()
        message.tokens = spent
        self.record_usage(message)
        part = self.new_part(
            message,
            Part.Type.COMPACTION,
            text="".join(summary).strip(),
            data={"replaced": cut, "tokens_before": before},
        )
        part.data["tokens_after"] = compaction.estimate_tokens(
            model_messages(self.history, self.session.system_prompt)
        )
        await self.db(self.writer.flush)
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        log.info(
            "run %s compacted %d messages (%d → %d tokens)",
            self.run.id,
            cut,
            before,
            part.data["tokens_after"],
        )
        return True

    async def stream(self, message: Message) -> list[ToolCall]:
        specs = [t.spec() for t in self.tools.values()]
        prompt = model_messages(self.history[:-1], self.session.system_prompt)
        calls: list[ToolCall] = []
        parts: dict[str, Part] = {}
        last_flush = time.monotonic()
        async for event in self.model_events(prompt, specs):
            if isinstance(event, TextDelta | ReasoningDelta):
                kind = Part.Type.TEXT if isinstance(event, TextDelta) else Part.Type.REASONING
                part = parts.get(kind)
                if part is None:
                    part = parts[kind] = self.new_part(message, kind, text="")
                    self.emit(events.PART_UPDATED, part=part_data(part))
                offset = len(part.text)
                part.text += event.text
                self.writer.touch(part, "text")
                events.publish_delta(
                    self.session.id,
                    message_id=message.id,
                    part_id=part.id,
                    offset=offset,
                    text=event.text,
                    reasoning=kind == Part.Type.REASONING,
                )
                if (
                    self.mode != Session.Checkpoint.RUNS
                    and time.monotonic() - last_flush >= settings.STREAM_FLUSH_SECONDS
                ):
                    if self.writer.is_new(part):
                        await self.db(self.writer.flush, durable=False)  # the row, first
                    else:
                        # Written with every other run's streamed text, one statement per tick.
                        self.host.stream_text(part, self.control)
                    last_flush = time.monotonic()
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, StructuredOutput):
                message.structured = event.value
                self.run.output = event.value
            elif isinstance(event, Finish):
                message.tokens = self.count(self.reported(event.usage, prompt, parts, calls))
                self.record_usage(message)
            self.check()
        for part in parts.values():
            self.emit(events.PART_UPDATED, part=part_data(part))
        return calls

    async def run_tool(self, part: Part) -> None:
        state = dict(part.state or {})
        state["status"] = "running"
        state["time"] = {"start": time.time(), "end": None}
        part.state = state
        self.writer.touch(part, "state")
        # Live progress, like the output deltas that follow it: shown before it is stored
        # (the call itself is on record, pending, before any tool of the batch runs).
        if not self.control.lost.is_set():
            events.publish(self.session.id, events.PART_UPDATED, part=part_data(part))
        tool = self.tools.get(part.tool)
        if "approval" in state and self.mode != Session.Checkpoint.RUNS:
            # A call run after a decision: "running" is on record before it runs, so a crash
            # now never runs it twice (pending + allowed means "not started yet").
            await self.db(self.writer.flush)
        if tool is None and part.tool != "shell":
            tool = TOOLS.get(part.tool)
        try:
            if tool is None:
                reason = sandbox.unavailable_reason() if part.tool == "shell" else ""
                raise ToolError(reason or f"Unknown or disabled tool: {part.tool}.")
            ctx = ToolContext(
                worktree=self.session.worktree,
                tree_limit=self.limits.worktree_bytes or 0,
                should_abort=self.aborted,
                output=self.tool_output(part),
                # The loop holds the session's lock: a shell command over the worktree's
                # limits is undone from a snapshot taken just before it (SEMANTICS 11.7).
                snapshots=self.snap,
            )
            args = state.get("input") or {}
            if tool.afn is not None:
                state["output"] = await tool.arun(ctx, args)
            else:
                state["output"] = await self.host.in_tool_thread(tool.run, ctx, args)
            state["status"] = "completed"
        except ToolInterrupted as exc:
            # Stopped part-way (its process tree is gone): the part keeps what it printed and
            # ends interrupted, so a resume never runs it again (rule 1.5).
            if self.control.lost.is_set():
                raise LockLost() from exc  # not a line more: another worker may own it
            state["output"] = exc.output
            part.state = state
            self.interrupt(part, reason="cancelled")
            raise Aborted() from exc
        except ToolError as exc:
            if self.control.lost.is_set():
                raise LockLost() from exc  # stopped because it lost the run: not a line more
            if self.aborted():
                # Left unfinished on purpose: resume decides (recall or interrupt), rule 1.5.
                raise Aborted() from exc
            state.update(status="error", error=str(exc))
        except Exception as exc:  # a tool bug must not kill the run; the model sees the error
            log.exception("tool %s failed", part.tool)
            state.update(status="error", error=f"{exc.__class__.__name__}: {exc}")
        state["time"] = {**state["time"], "end": time.time()}
        part.state = state
        self.writer.touch(part, "state")
        self.emit(events.PART_UPDATED, part=part_data(part))

    def tool_output(self, part: Part) -> Callable[[str], Awaitable[None]]:
        """What a running tool prints: into its part's ``state.output``, out to the browsers
        as ``tool-output-delta`` (framed like text deltas), and written every
        ``STREAM_FLUSH_SECONDS`` so that a reload mid-command shows the output so far."""
        last_write = time.monotonic()

        async def output(text: str) -> None:
            nonlocal last_write
            state = part.state
            so_far = state.get("output") or ""
            state["output"] = so_far + text
            events.publish_tool_output(
                self.session.id,
                message_id=part.message_id,
                part_id=part.id,
                offset=len(so_far),
                text=text,
            )
            now = time.monotonic()
            due = now - last_write >= settings.STREAM_FLUSH_SECONDS
            if due and self.mode != Session.Checkpoint.RUNS and not self.control.stopped():
                last_write = now
                self.writer.touch(part, "state")
                await self.db(self.writer.flush, durable=False)

        return output

    async def gate(self, parts: list[Part]) -> bool:
        """SEMANTICS 8.1: decide each call of the batch by the session's rules before any
        runs. ``deny`` ends it as a tool error; ``ask`` marks it requested (with a preview
        of what it would do). True when some call waits for the owner."""
        rules = permissions.in_force(self.session.permissions)
        decisions = [permissions.decide(rules, p.tool, (p.state or {}).get("input")) for p in parts]
        if all(d == "allow" for d in decisions):
            return False
        asking = "ask" in decisions
        previews = await self.db(self.previews, parts, decisions)
        now = time.time()
        for part, decision in zip(parts, decisions, strict=True):
            state = dict(part.state or {})
            if decision == "deny":
                state.update(
                    status="error",
                    error=f"Denied by this session's permissions: {part.tool} is not allowed here.",
                    metadata={**(state.get("metadata") or {}), "denied": True, "by": "rule"},
                    time={"start": None, "end": now},
                )
            elif decision == "ask":
                state["approval"] = {"status": "requested", "preview": previews.get(part.id, "")}
            elif asking:
                state["approval"] = {"status": "allowed", "by": "rule"}
            part.state = state
            self.writer.touch(part, "state")
            self.emit(events.PART_UPDATED, part=part_data(part))
        return asking

    def previews(self, parts: list[Part], decisions: list[str]) -> dict[str, str]:
        """What an asked call would do: the command; for file tools, the diff of the write."""
        return {
            part.id: approval_preview(
                self.session.worktree, part.tool, (part.state or {}).get("input")
            )
            for part, decision in zip(parts, decisions, strict=True)
            if decision == "ask"
        }

    async def park(self) -> None:
        """The run stops before calls that wait for the owner: its rows are written, the
        session stays held (``waiting``) with no lease to renew, and the coroutine ends —
        no worker, thread or process waits with it."""
        close = getattr(self.provider, "aclose", None)
        if close is not None:
            await close()
        if self.control.lost.is_set():
            raise LockLost()
        self.run.usage = self.usage
        await self.db(self._record_park)

    def _record_park(self) -> None:
        self.writer.flush()
        lifecycle.park(self.run, epoch=self.epoch, usage_added=self.usage_added())
        self.usage_start = dict(self.usage)

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
        message.error = {"reason": "ProviderError", "message": text, "metadata": {}}
        message.completed_at = timezone.now()
        self.writer.touch(message, "error", "completed_at")
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))

    def structured_error(self) -> dict | None:
        """Rule 1.9: the run's output must validate against its output_schema."""
        run = self.run
        if not run.output_schema:
            return None
        if run.output is None:
            text = next(
                (
                    "".join(p.text for p in m.loaded_parts if p.type == Part.Type.TEXT)
                    for m in reversed(self.history)
                    if m.role == Message.Role.ASSISTANT and m.run_id == run.id
                ),
                "",
            )
            try:
                run.output = json.loads(text) if text.strip() else None
            except (ValueError, RecursionError):  # not JSON, too many digits, too deep
                run.output = None
        if run.output is None:
            return {
                "type": "StructuredOutputError",
                "message": "The model returned no structured output for output_schema.",
            }
        # Bounded in time, RE2 patterns, never raises (output_schema.py): user input both.
        message = output_schema.mismatch(run.output, run.output_schema)
        return {"type": "StructuredOutputError", "message": message} if message else None

    async def finish(self, status: str, error: dict | None) -> None:
        run = self.run
        if self.control.lost.is_set():
            # Stopped by its keeper (an abort seen on the way out is not the owner's): the
            # execution that takes the run over decides how it ends.
            raise LockLost()
        if status == Run.Status.COMPLETED and run.output_schema:
            # Up to output_schema.MAX_SECONDS of Python: off the loop the other runs share.
            error = await asyncio.to_thread(self.structured_error)
            if error:
                status = Run.Status.ERROR
        run.error = error
        run.finished_at = timezone.now()
        run.usage = self.usage
        if status == Run.Status.COMPLETED and not run.result:
            run.result = "stop"
        await self.db(self._record_end, status)

    def _record_end(self, status: str) -> None:
        if not self.recovered and status != Run.Status.COMPLETED:
            # Ended (an error, a cancel) before ``recover`` closed the step an earlier
            # execution of the run left open: it is closed with this end, as
            # ``lifecycle.end_abandoned`` would close it — unless this execution's closing of
            # it only waits for this flush (its own flush failed).
            made = lifecycle.open_step_parts(self.run, self.session)
            for part in made if made and not self.writer.closes(made[0].message_id) else []:
                self.writer.add(part)
                self.emit(events.PART_UPDATED, part=part_data(part))
        self.writer.flush()
        # The model's structured output and an error's sentence are data too (11.5).
        self.run.output, self.run.error = storable(self.run.output), storable(self.run.error)
        lifecycle.finish(self.run, status, epoch=self.epoch, usage_added=self.usage_added())


def turn_finished(history: list[Message]) -> bool:
    """The last turn ended: its last message is a completed assistant message that called
    no tools (the model stopped)."""
    if not history:
        return True
    last = history[-1]
    return (
        last.role == Message.Role.ASSISTANT
        and last.completed_at is not None
        and not last.error  # cut short (a dropped stream, a failed call): resume goes on
        and not any(p.type == Part.Type.TOOL for p in last.loaded_parts)
    )


def approval_of(part: Part) -> str | None:
    return ((part.state or {}).get("approval") or {}).get("status")


def parked_step(message: Message) -> tuple[int, str] | None:
    """(step index, snapshot before it) of an assistant message whose step stopped for
    approvals and has not ended yet (no ``step-finish``); else None."""
    if not any(
        p.type == Part.Type.TOOL and "approval" in (p.state or {}) for p in message.loaded_parts
    ):
        return None
    return open_step(message)


def open_step(message: Message) -> tuple[int, str] | None:
    """(step index, snapshot before it) of an assistant message whose step has not ended
    (a ``step-start``, no ``step-finish``); else None."""
    parts = message.loaded_parts
    if any(p.type == Part.Type.STEP_FINISH for p in parts):
        return None
    start = next((p for p in parts if p.type == Part.Type.STEP_START), None)
    if start is None or not (start.data or {}).get("snapshot"):
        return None
    return int(start.data.get("step") or 0), start.data["snapshot"]


PREVIEW_MAX = 20_000
PREVIEW_DIFF_BYTES = 1_000_000


def approval_preview(worktree: Any, tool: str, args: Any) -> str:
    """The approval card's "what will happen": the command, or the unified diff a file
    tool would make (cut at ``PREVIEW_MAX`` characters)."""
    args = args if isinstance(args, dict) else {}
    if tool == "shell":
        return f"$ {args.get('command', '')}"[:PREVIEW_MAX]
    if tool not in ("write", "append", "delete"):
        return json.dumps(args)[:PREVIEW_MAX]
    path = args.get("path")
    content = args.get("content") if isinstance(args.get("content"), str) else ""
    try:
        # Read as the tools read: by descriptor, never through a link (worktree_files).
        size, old = current_text(worktree, path, limit=PREVIEW_DIFF_BYTES)
        if size > PREVIEW_DIFF_BYTES or len(content) > PREVIEW_DIFF_BYTES:
            # A diff of megabytes would take long to make and nobody reads it in a card.
            return (
                f"{tool} {path}: {size:,} bytes now, {len(content):,} bytes given"
                " (too large to show as a diff)"
            )
    except (ToolError, OSError):
        return f"{tool} {path!r}"[:PREVIEW_MAX]
    new = {"write": content, "append": old + content + "\n", "delete": ""}[tool]
    diff = difflib.unified_diff(
        old.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{path}" if old or tool != "write" else "/dev/null",
        tofile=f"b/{path}" if tool != "delete" else "/dev/null",
    )
    return "".join(diff)[:PREVIEW_MAX] or f"{tool} {path} (no change)"
