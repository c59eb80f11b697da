"""The agent loop: the steps of one run, as a coroutine on the process's run host
(``runs_app/host.py``), which carries many runs at once. What blocks — database statements,
git, file tools — runs in the host's threads (``await self.db(...)``); the model's stream,
waits, events and abort checks stay on the loop.

A run's walk, from the Celery task to its end:

1. ``tasks.run_agent_task`` hands the run to the process's host (``host.run_agent``), which claims
   it: ``lifecycle.begin`` moves it pending → running under the session's busy lock (a lease
   the host's keeper renews) and gives this execution its epoch;
2. ``AgentLoop.execute`` → ``phases``: start-up (``loop/start.py``: a prompt's user message,
   or a continue's or regenerate's branch; a resume recovers, ``loop/recovery.py``);
3. ``loop`` (``loop/steps.py``): per step, recovery and compaction when due, then ``step``:
   the snapshot before, the model's stream (``loop/model.py``), the tool gate
   (``loop/gate.py``: allow, deny, or park for the owner), the tool calls
   (``loop/tool_calls.py``), the snapshot after and the checkpoint;
4. ``finish`` (``loop/end.py``): the end recorded by ``lifecycle.finish`` and the session
   handed to the next queued run; ``ended_by`` says how an exception ends it.

Every row and event goes through ``loop/recorder.py`` (buffered with its event, published
once stored, every write fenced by the epoch); the usage through ``loop/usage.py``.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError

from quotas_app.limits import effective as effective_limits
from realtime import events
from sessions_app.selectors import active_path

from ..models import Run
from ..providers import ProviderError
from ..selectors import run_data
from .loop.end import Ending
from .loop.errors import Aborted, AwaitingApproval, BudgetReached, ContextOverflow, LockLost
from .loop.gate import ToolGate, approval_preview
from .loop.model import ModelStream
from .loop.recorder import Recorder
from .loop.recovery import Recovery, turn_finished
from .loop.start import StartPhase
from .loop.steps import StepPhase
from .loop.tool_calls import ToolRunner
from .loop.usage import UsageMeter

log = logging.getLogger(__name__)

__all__ = [
    "Aborted",
    "AgentLoop",
    "AwaitingApproval",
    "BudgetReached",
    "ContextOverflow",
    "LockLost",
    "approval_preview",
    "turn_finished",
]


class AgentLoop(
    StartPhase, StepPhase, ModelStream, ToolGate, ToolRunner, Recovery, Ending, UsageMeter, Recorder
):
    async def execute(self) -> None:
        try:
            await self._execute()
        except LockLost:
            # Its end (or its park) was refused: another execution owns the run now.
            self.control.lost.set()
            log.warning("run %s lost its lock before its end was recorded", self.run.id)

    async def _execute(self) -> None:
        status, error = Run.Status.COMPLETED, None
        try:
            if not await self.phases():
                return  # it ended on the way (a compaction run, a resume with nothing left)
        except AwaitingApproval:
            await self.park()
            return
        except LockLost:
            # The lease is gone: another worker may hold the session now. Nothing more is
            # written (not even what is buffered), its tools are stopped: that worker
            # resumes from the checkpoint.
            self.control.lost.set()
            log.warning("run %s lost its lock; it stops without writing", self.run.id)
            return
        except Exception as exc:
            status, error = self.ended_by(exc)
        finally:
            close = getattr(self.provider, "aclose", None)
            if close is not None:
                await close()
        await self.finish(status, error)

    async def phases(self) -> bool:
        """Start-up, then the steps (``loop``); False when the run already ended here."""
        run = self.run
        self.limits = await self.db(effective_limits, self.session.owner_id)
        # The session's "busy" for this run was said when it was given the session (its
        # admission, a hand-over, a decision that resumed it).
        self.emit(events.RUN_UPDATED, run=run_data(run))
        if run.mode == Run.Mode.COMPACT:
            # "Compact now": the summary, nothing else (SEMANTICS 10, result "compact").
            self.history = await self.db(active_path, self.session)
            await self.compact(force=True)
            run.result = "compact"
            await self.finish(Run.Status.COMPLETED, None)
            return False
        async with self.host.starting():
            if not await self.start_up():
                # Resume with nothing unfinished: the turn had ended; no model call, no tool.
                await self.finish(Run.Status.COMPLETED, None)
                return False
        await self.loop()
        return True

    def ended_by(self, exc: Exception) -> tuple[str, dict | None]:
        """The run's end for what stopped its steps (called in the ``except``: a bug is
        logged with its traceback); an error is also said on the last assistant message."""
        if isinstance(exc, BudgetReached):
            overrun = exc.overrun
            error = {"type": "QuotaExceeded", "reason": "quota", "limit": overrun.name}
            return Run.Status.ERROR, {**error, "message": overrun.message}
        if isinstance(exc, Aborted):
            return Run.Status.CANCELLED, None
        if isinstance(exc, ProviderError):
            message, kind = str(exc), "ProviderError"
        elif isinstance(exc, OperationalError | InterfaceError):
            # The database went away under the loop (a restart, a killed connection). What
            # was checkpointed is kept; the run ends here and can be resumed or continued.
            log.warning("run %s lost its database connection: %s", self.run.id, exc)
            message, kind = (
                f"The database connection was lost during the run ({str(exc).strip()}). "
                "What was saved before is kept: resume or continue the run.",
                "DatabaseError",
            )
        else:
            log.exception("run %s failed", self.run.id)
            message, kind = str(exc), exc.__class__.__name__
        self.fail_last_message(message)
        return Run.Status.ERROR, {"type": kind, "message": message}
