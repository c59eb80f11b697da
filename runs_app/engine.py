"""The agent loop: the steps of one run. ``run_agent(run_id)`` is what the Celery task and
the embedded executor run.

1. ``lifecycle.begin``: the run goes pending → running under the session's busy lock (a
   lease the heartbeat renews);
2. start-up: ``prompt`` interrupts unfinished tools and writes the user message; ``resume``
   recovers the last unfinished turn (SEMANTICS 1.5, ``AgentLoop.recover``);
3. steps: snapshot, stream the model into parts, run the tool batch, snapshot again, checkpoint;
4. ``lifecycle.finish``: the end is recorded and the session handed to the next queued run.
"""

from __future__ import annotations

import json
import logging
import threading
import time
from typing import Any

import jsonschema
from django.conf import settings
from django.db import (
    InterfaceError,
    OperationalError,
    close_old_connections,
    connection,
    transaction,
)
from django.utils import timezone

from sessions_app import events, snapshots
from sessions_app.logs import log_context
from sessions_app.models import HistoryEvent, Message, Part, Session
from sessions_app.selectors import active_path, message_data, part_data, session_data
from sessions_app.services import lock
from sessions_app.services.revert import cleanup_session

from . import lifecycle, runtime
from .checkpoint import Checkpointer
from .models import Run
from .providers import ProviderError, get_provider
from .providers.base import Finish, ReasoningDelta, StructuredOutput, TextDelta, ToolCall
from .selectors import run_data
from .tools import TOOLS, ToolContext, ToolError, available_tools
from .transcript import model_messages

log = logging.getLogger(__name__)

UNFINISHED = {"pending", "running"}


class Aborted(Exception):
    pass


class LockLost(Exception):
    pass


class Heartbeat(threading.Thread):
    """Renews the lease and watches for an abort, so the loop only reads two Events.

    An abort arrives at once through the abort bus; the database flag is also read every
    ``RUN_ABORT_POLL_SECONDS`` in case a notification was lost. The thread holds no database
    connection between its visits, so a running run costs one connection, not two.

    A heartbeat that cannot renew the lease stops the run (``lost``): a lease that is not
    renewed expires, and then another worker may take the session over while this one would
    still write. Whatever goes wrong in here — the renewal failing, the database away, a
    bug — ends in ``lost``, never in a silent exit that leaves the loop running unrenewed."""

    def __init__(self, session_id: str, run_id: str) -> None:
        super().__init__(name=f"heartbeat-{run_id}", daemon=True)
        self.session_id, self.run_id = session_id, run_id
        self.bus = runtime.abort_bus()
        self.abort = self.bus.register(run_id)
        self.lost = threading.Event()
        self.stop = threading.Event()

    def run(self) -> None:
        renew_every = max(0.2, settings.RUN_LEASE_SECONDS / 3)
        poll_every = settings.RUN_ABORT_POLL_SECONDS
        last_renew = last_poll = time.monotonic()
        try:
            while not self.stop.wait(min(0.1, poll_every)):
                now = time.monotonic()
                if now - last_poll < poll_every and now - last_renew < renew_every:
                    continue
                try:
                    if now - last_poll >= poll_every:
                        last_poll = now
                        if Run.objects.filter(id=self.run_id, abort_requested=True).exists():
                            self.abort.set()
                    if now - last_renew >= renew_every:
                        last_renew = now
                        if not lock.renew(self.session_id, self.run_id):
                            self.lost.set()
                            return
                finally:
                    connection.close()
        except Exception:
            log.exception("heartbeat of %s failed: the run stops", self.run_id)
            self.lost.set()
        finally:
            self.bus.unregister(self.run_id)
            connection.close()


class AgentLoop:
    def __init__(self, run: Run) -> None:
        self.run = run
        self.session: Session = run.session
        self.provider = get_provider(run.model or self.session.model or settings.AGENT_MODEL)
        self.tools = {t.name: t for t in available_tools()}
        self.snap = snapshots.for_session(self.session)
        self.writer = Checkpointer(self.session.id)
        self.mode = run.checkpoint or self.session.checkpoint
        self.heartbeat = Heartbeat(self.session.id, run.id)
        self.history: list[Message] = []
        self.head_id: str | None = self.session.head_id
        self.tree: str | None = None
        self.first_tree: str | None = None
        self.usage: dict[str, int] = {}

    # -- helpers ------------------------------------------------------------------------------
    def aborted(self) -> bool:
        return self.heartbeat.abort.is_set() or self.heartbeat.lost.is_set()

    def check(self) -> None:
        if self.heartbeat.lost.is_set():
            raise LockLost()
        if self.heartbeat.abort.is_set():
            raise Aborted()

    def emit(self, type: str, **payload: Any) -> None:
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
    def execute(self) -> None:
        run = self.run
        self.heartbeat.start()
        status, error = Run.Status.COMPLETED, None
        try:
            run.status = Run.Status.RUNNING
            self.emit(events.RUN_UPDATED, run=run_data(run))
            self.emit(events.SESSION_STATUS, status="busy", run_id=run.id)
            prompting = run.mode == Run.Mode.PROMPT and run.input_message_id is None
            if prompting and self.session.revert:
                # Rule 1.3 / 3.6: a new prompt confirms a pending revert first.
                self.session = cleanup_session(session=self.session, holder_run_id=run.id)
                self.head_id = self.session.head_id
            if run.branch and not run.branch.get("applied"):
                self.start_branch()
            else:
                self.history = active_path(self.session)
            if prompting:
                self.start_prompt()
            elif turn_finished(self.history):
                # Resume with nothing unfinished: the turn had ended; no model call, no tool.
                self.finish(Run.Status.COMPLETED, None)
                return
            self.loop()
        except Aborted:
            status = Run.Status.CANCELLED
        except LockLost:
            # The lease is gone: another worker may hold the session now. Nothing more is
            # written (not even what is buffered): that worker resumes from the checkpoint.
            log.warning("run %s lost its lock; it stops without writing", run.id)
            self.heartbeat.stop.set()
            return
        except ProviderError as exc:
            status, error = Run.Status.ERROR, {"type": "ProviderError", "message": str(exc)}
            self.fail_last_message(str(exc))
        except (OperationalError, InterfaceError) as exc:
            # The database went away under the loop (a restart, a killed connection). What
            # was checkpointed is kept; the run ends here and can be resumed or continued.
            log.warning("run %s lost its database connection: %s", run.id, exc)
            close_old_connections()
            connection.close()
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
            self.heartbeat.stop.set()
        self.finish(status, error)

    def start_prompt(self) -> None:
        """Rule 1.3: interrupt unfinished tools on the path, then write the user message."""
        if self.run.multitask_strategy == "rollback" and self.run.interrupted_run_id:
            self.roll_back_interrupted()
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
        self.writer.flush()
        if written:
            Run.objects.filter(id=self.run.id).update(input_message_id=written[0].id)
            self.run.input_message_id = written[0].id
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
        for message in written:
            self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        self.emit(events.SESSION_UPDATED, session=session_data(self.session))
        if before and before != files:
            diff = self.snap.diff_stat(before, files)
            self.emit(events.SESSION_DIFF, diff=diff, summary=snapshots.summary_of(diff))

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

    def loop(self) -> None:
        self.tree = self.first_tree = self.snap.track()
        max_steps = self.run.max_steps or settings.AGENT_MAX_STEPS
        for index in range(max_steps):
            self.check()
            # Rule 1.5: before every step (a no-op after a step that finished normally).
            self.recover(mode="resume")
            called_tools = self.step(index)
            if not called_tools:
                return
        self.run.result = "max_steps"

    def recover(self, *, mode: str) -> None:
        """Rule 1.5, on the last assistant message of the path: completed and error tools
        are kept; unfinished tools without side effects run again; with side effects they
        are interrupted (never run twice), and so is every unfinished tool after an
        interrupt or a blocking error; an unfinished message is completed with an error."""
        last = next((m for m in reversed(self.history) if m.role == Message.Role.ASSISTANT), None)
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
                self.interrupt(part, reason="blocked", now=time.time())
            elif tool is not None and not tool.side_effects:
                self.run_tool(part)  # recall: no side effects, so running it again is safe
            else:
                self.interrupt(part, reason=mode, now=time.time())  # never run twice
                blocked = True
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
            self.writer.flush()

    def step(self, index: int) -> bool:
        before = self.tree or self.snap.track()
        message = self.new_message(Message.Role.ASSISTANT)
        self.new_part(message, Part.Type.STEP_START, data={"snapshot": before, "step": index})
        self.emit(events.MESSAGE_UPDATED, message=message_data(message))
        tool_parts: list[Part] = []
        try:
            for call in self.stream(message):
                tool_parts.append(self.pending_tool(message, call))
            if self.mode != Session.Checkpoint.RUNS and tool_parts:
                # The batch is on record before any of it runs: after a crash, recovery sees
                # these calls and never runs a side-effect tool twice (rule 1.7).
                self.writer.flush()
            for part in tool_parts:
                self.check()
                self.run_tool(part)
                if self.mode == Session.Checkpoint.TOOL:
                    self.writer.flush()
        except BaseException:
            # A step that ends in an error or an abort still records what it did to the files.
            self.close_step(message, index, before, ran_tools=bool(tool_parts), finished=False)
            raise
        self.close_step(message, index, before, ran_tools=bool(tool_parts), finished=True)
        return bool(tool_parts)

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

    def stream(self, message: Message) -> list[ToolCall]:
        specs = [t.spec() for t in self.tools.values()]
        prompt = model_messages(self.history[:-1], self.session.system_prompt)
        calls: list[ToolCall] = []
        parts: dict[str, Part] = {}
        last_flush = time.monotonic()
        for event in self.provider.stream(prompt, specs, should_abort=self.aborted):
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
                    self.writer.flush()
                    last_flush = time.monotonic()
            elif isinstance(event, ToolCall):
                calls.append(event)
            elif isinstance(event, StructuredOutput):
                message.structured = event.value
                self.run.output = event.value
            elif isinstance(event, Finish):
                for key, value in event.usage.items():
                    self.usage[key] = self.usage.get(key, 0) + int(value or 0)
                message.tokens = dict(event.usage)
            self.check()
        for part in parts.values():
            self.emit(events.PART_UPDATED, part=part_data(part))
        return calls

    def run_tool(self, part: Part) -> None:
        state = dict(part.state or {})
        state["status"] = "running"
        state["time"] = {"start": time.time(), "end": None}
        part.state = state
        self.writer.touch(part, "state")
        self.emit(events.PART_UPDATED, part=part_data(part))
        tool = self.tools.get(part.tool) or (TOOLS.get(part.tool) if part.tool != "shell" else None)
        state = dict(state)
        try:
            if tool is None:
                raise ToolError(f"Unknown or disabled tool: {part.tool}.")
            ctx = ToolContext(worktree=self.session.worktree, should_abort=self.aborted)
            state["output"] = tool.run(ctx, state.get("input") or {})
            state["status"] = "completed"
        except ToolError as exc:
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

    def publish_diff(self, before: str, after: str) -> None:
        diff = self.snap.diff_stat(before, after)
        summary = snapshots.summary_of(self.snap.diff_stat(self.first_tree or before, after))
        Session.objects.filter(id=self.session.id).update(summary=summary)
        self.emit(events.SESSION_DIFF, diff=diff, summary=summary)

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
            except json.JSONDecodeError:
                run.output = None
        if run.output is None:
            return {
                "type": "StructuredOutputError",
                "message": "The model returned no structured output for output_schema.",
            }
        try:
            jsonschema.validate(run.output, run.output_schema)
        except jsonschema.ValidationError as exc:
            return {
                "type": "StructuredOutputError",
                "message": f"The structured output does not match output_schema: {exc.message}",
            }
        except jsonschema.SchemaError as exc:
            return {
                "type": "StructuredOutputError",
                "message": f"Invalid output_schema: {exc.message}",
            }
        return None

    def finish(self, status: str, error: dict | None) -> None:
        run = self.run
        if status == Run.Status.COMPLETED and run.output_schema:
            error = self.structured_error()
            if error:
                status = Run.Status.ERROR
        self.writer.flush()
        run.status, run.error = status, error
        run.finished_at = timezone.now()
        run.usage = self.usage
        if status == Run.Status.COMPLETED and not run.result:
            run.result = "stop"
        lifecycle.finish(run)


def turn_finished(history: list[Message]) -> bool:
    """The last turn ended: its last message is a completed assistant message that called
    no tools (the model stopped)."""
    if not history:
        return True
    last = history[-1]
    return (
        last.role == Message.Role.ASSISTANT
        and last.completed_at is not None
        and not any(p.type == Part.Type.TOOL for p in last.loaded_parts)
    )


def run_agent(run_id: str) -> bool:
    """Run (or resume) one run to its end (see ``lifecycle.begin`` for why delivering it
    twice is safe). Returns False when the session is still held by another worker's live
    lease and the delivery should be retried later."""
    close_old_connections()
    try:
        begun = lifecycle.begin(run_id)
        if begun.run is None:
            return not begun.retry
        with log_context(run_id=begun.run.id, session_id=begun.run.session_id):
            AgentLoop(begun.run).execute()
        return True
    finally:
        close_old_connections()
