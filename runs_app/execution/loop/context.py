"""What every phase of a run's loop is handed: the run, its host and control, the writer, and
what the phases read and change as the run goes (the path, the head, the files' last
snapshot, the usage). One object per execution, made by ``run.execute``; the phases are
modules of functions that take it first (``ctx``)."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, TypeVar

from django.conf import settings

from quotas_app.limits import Limits
from sessions_app.models import Message, Session
from workspace import snapshots

from ...checkpoint import Checkpointer
from ...models import Run
from ...providers import get_provider
from ...tools import Tool, available_tools
from ..control import RunControl, RunHostLike
from ..text_writer import TextWriter
from .errors import Aborted, LockLost

T = TypeVar("T")


@dataclass
class RunContext:
    run: Run
    host: RunHostLike
    control: RunControl
    # Where the streamed text goes: the host's writer, one statement a tick for every run.
    texts: TextWriter
    session: Session
    provider: Any
    tools: dict[str, Tool]
    snap: snapshots.Snapshots
    # Every write of this execution is fenced by the epoch ``begin`` gave it.
    epoch: int
    writer: Checkpointer
    mode: str  # the checkpoint mode: runs, step, tool
    history: list[Message] = field(default_factory=list)
    head_id: str | None = None
    tree: str | None = None
    # What the run used so far (a resumed run adds to it); ``usage_start``: before this
    # execution, so the session's sum gets only what this one adds.
    usage: dict[str, Any] = field(default_factory=dict)
    usage_start: dict[str, Any] = field(default_factory=dict)
    overflow_retried: bool = False
    # Whether ``recovery.recover`` has dealt with the step an earlier execution left open:
    # until then, an end of this execution closes that step itself (``end.record_end``).
    recovered: bool = False
    # A stopped answer that the next step goes on with, in the same message and text part
    # (docs/semantics.md §1.12), set by ``recovery.recover``; else the step makes a new one.
    continuing: Message | None = None
    # The owner's limits, read once per execution (``run.phases``): the budget checked
    # between steps, the worktree's size bound for the tools.
    limits: Limits = field(default_factory=Limits)
    # This claim materialised the worktree from the central store (sessions_app/rehome.py
    # ``Plan.MATERIALIZE``): the tree it holds and the host the session was lost with. Read
    # (once) by ``recovery.recover``: the calls whose change that tree lacks are lost
    # (docs/semantics.md §16.5). Empty: the files are this host's own.
    materialized_tree: str = ""
    lost_host: str = ""

    @classmethod
    def of(
        cls,
        run: Run,
        *,
        host: RunHostLike,
        control: RunControl,
        texts: TextWriter,
        materialized: tuple[str, str] | None = None,
    ) -> RunContext:
        """``materialized``: (tree, lost host) when this claim filled the worktree from the
        central store."""
        session: Session = run.session
        usage = dict(run.usage or {})
        return cls(
            run=run,
            host=host,
            control=control,
            texts=texts,
            session=session,
            provider=get_provider(run.model or session.model or settings.AGENT_MODEL),
            tools={t.name: t for t in available_tools()},
            snap=snapshots.for_session(session),
            epoch=run.lease_epoch,
            writer=Checkpointer(
                session.id, run_id=run.id, epoch=run.lease_epoch, lost=control.lost.is_set
            ),
            mode=run.checkpoint or session.checkpoint,
            head_id=session.head_id,
            usage=usage,
            usage_start=dict(usage),
            materialized_tree=materialized[0] if materialized else "",
            lost_host=materialized[1] if materialized else "",
        )

    def aborted(self) -> bool:
        return self.control.stopped()

    def holds_lease(self) -> bool:
        """Whether the run still holds the session (a stale lease counts as lost)."""
        if self.control.lost.is_set() or self.control.lease_stale():
            self.control.lost.set()
            return False
        return True

    def check(self) -> None:
        if not self.holds_lease():
            # Also when the keeper has not said so yet: a process that was stopped past its
            # lease wakes up here, before its next tool, write or event.
            raise LockLost()
        if self.control.abort.is_set():
            raise Aborted()

    async def db(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn`` in one of the host's database threads (it blocks; the loop must not)."""
        return await self.host.blocking(fn, *args, **kwargs)
