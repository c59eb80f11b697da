"""What every phase of a run's loop shares: the run, its host and control, the writer."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, TypeVar

from django.conf import settings

from quotas_app.limits import Limits
from sessions_app.models import Message, Session
from workspace import snapshots

from ...checkpoint import Checkpointer
from ...models import Run
from ...providers import get_provider
from ...tools import available_tools
from ..control import RunControl, RunHostLike
from .errors import Aborted, LockLost

T = TypeVar("T")


class LoopState:
    """The run, its host and control, the writer (``Checkpointer``) and what the phases read
    and change: the path (``history``), the head, the files' last snapshot, the usage."""

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
