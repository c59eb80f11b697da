"""The agent loop: the steps of one run, as a coroutine on the process's run host
(``runs_app/execution/host.py``), which carries many runs at once. What blocks — database
statements, git, file tools — runs in the host's threads (``await ctx.db(...)``); the model's
stream, waits, events and abort checks stay on the loop.

The loop is phases handed one explicit context (``context.RunContext``: the run, its
control, the writer, the path, the usage): each phase a module of functions, whose calls to
another phase are imports. A run's walk, from the Celery task to its end:

1. ``tasks.run_agent_task`` hands the run to the process's host (``host.submit``), which
   claims it: ``lifecycle.begin`` moves it pending → running under the session's busy lock
   (a lease the host's keeper renews) and gives this execution its epoch;
2. ``execute`` (here) → ``phases``: start-up (``start.py``: a prompt's user message, or a
   continue's or regenerate's branch; a resume recovers, ``recovery.py``);
3. ``steps.run_steps``: per step, recovery and compaction when due, then ``steps.step``: the
   snapshot before, the model's stream (``model.py``), the tool gate (``gate.py``: allow,
   deny, or park for the owner), the tool calls (``tool_calls.py``), the snapshot after and
   the checkpoint (``step_end.py``);
4. ``end.finish``: the end recorded by ``lifecycle.finish`` and the session handed to the
   next queued run; ``ended_by`` says how an exception ends it.

Every row and event goes through ``recorder.py`` (buffered with its event, published once
stored, every write fenced by the epoch; the streamed text handed to the host's text
writer); the usage through ``usage.py``.
"""

from __future__ import annotations

import logging

from django.db import InterfaceError, OperationalError

from quotas_app.limits import effective as effective_limits
from realtime import events
from sessions_app.selectors import active_path

from ...models import Run
from ...providers import ProviderError
from ...selectors import run_data
from ..control import RunControl, RunHostLike
from ..text_writer import TextWriter
from . import end, gate, model, recorder, start, steps
from .context import RunContext
from .errors import Aborted, AwaitingApproval, BudgetReached, LockLost

log = logging.getLogger(__name__)


async def execute(
    run: Run,
    *,
    host: RunHostLike,
    control: RunControl,
    texts: TextWriter,
    materialized: tuple[str, str] | None = None,
) -> None:
    """Carry ``run`` (begun: running, this execution's epoch) to its end, or its park.
    ``materialized``: (tree, lost host) when its claim filled the worktree from the central
    store (``RunContext.materialized_tree``)."""
    ctx = RunContext.of(run, host=host, control=control, texts=texts, materialized=materialized)
    try:
        await _execute(ctx)
    except LockLost:
        # Its end (or its park) was refused: another execution owns the run now.
        ctx.control.lost.set()
        log.warning("run %s lost its lock before its end was recorded", ctx.run.id)


async def _execute(ctx: RunContext) -> None:
    status, error = Run.Status.COMPLETED, None
    try:
        if not await phases(ctx):
            return  # it ended on the way (a compaction run, a resume with nothing left)
    except AwaitingApproval:
        await gate.park(ctx)
        return
    except LockLost:
        # The lease is gone: another worker may hold the session now. Nothing more is
        # written (not even what is buffered), its tools are stopped: that worker
        # resumes from the checkpoint.
        ctx.control.lost.set()
        log.warning("run %s lost its lock; it stops without writing", ctx.run.id)
        return
    except Exception as exc:
        status, error = ended_by(ctx, exc)
    finally:
        close = getattr(ctx.provider, "aclose", None)
        if close is not None:
            await close()
    await end.finish(ctx, status, error)


async def phases(ctx: RunContext) -> bool:
    """Start-up, then the steps (``steps.run_steps``); False when the run already ended here."""
    run = ctx.run
    ctx.limits = await ctx.db(effective_limits, ctx.session.owner_id)
    # The session's "busy" for this run was said when it was given the session (its
    # admission, a hand-over, a decision that resumed it).
    recorder.emit(ctx, events.RUN_UPDATED, run=run_data(run))
    if run.mode == Run.Mode.COMPACT:
        # "Compact now": the summary, nothing else (docs/semantics.md §10, result "compact").
        ctx.history = await ctx.db(active_path, ctx.session)
        await model.compact(ctx, force=True)
        run.result = "compact"
        await end.finish(ctx, Run.Status.COMPLETED, None)
        return False
    async with ctx.host.starting():
        if not await start.start_up(ctx):
            # Resume with nothing unfinished: the turn had ended; no model call, no tool.
            await end.finish(ctx, Run.Status.COMPLETED, None)
            return False
    await steps.run_steps(ctx)
    return True


def ended_by(ctx: RunContext, exc: Exception) -> tuple[str, dict | None]:
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
        log.warning("run %s lost its database connection: %s", ctx.run.id, exc)
        message, kind = (
            f"The database connection was lost during the run ({str(exc).strip()}). "
            "What was saved before is kept: resume or continue the run.",
            "DatabaseError",
        )
    else:
        log.exception("run %s failed", ctx.run.id)
        message, kind = str(exc), exc.__class__.__name__
    recorder.fail_last_message(ctx, message)
    return Run.Status.ERROR, {"type": kind, "message": message}
