"""What a running loop and the host that carries it share: the run's stop signals, and the
host's way of running what blocks (``RunHostLike``: the loop needs no import of the host)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from contextlib import AbstractAsyncContextManager
from dataclasses import dataclass, field
from typing import Any, Protocol, TypeVar

from django.conf import settings

T = TypeVar("T")


@dataclass
class RunControl:
    """What the host's keeper and the abort bus tell a running run: stop (``abort``), or stop
    without writing another row (``lost``: its lease is gone). ``threading.Event``s, because
    tools running in threads read them too."""

    run_id: str
    session_id: str
    abort: threading.Event
    lost: threading.Event = field(default_factory=threading.Event)
    # The lease epoch of this execution (runs_app/execution/fencing.py).
    epoch: int | None = None
    # When (``time.monotonic``) the lease was last known extended: set when the run began,
    # then by each renewal the keeper saw succeed. The keeper stops the run before
    # ``RUN_LEASE_SECONDS`` can pass since then.
    renewed_at: float = field(default_factory=time.monotonic)

    def stopped(self) -> bool:
        return self.abort.is_set() or self.lost.is_set()

    def lease_stale(self) -> bool:
        """The lease was not known renewed for the stop fraction of a lease: the keeper will
        stop the run at its next tick; whoever asks first stops it now."""
        limit = settings.RUN_LEASE_SECONDS * settings.RUN_LEASE_STOP_FRACTION
        return time.monotonic() - self.renewed_at > limit


class RunHostLike(Protocol):
    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T: ...

    async def in_tool_thread(self, fn: Callable[..., T], *args: Any) -> T: ...

    def starting(self) -> AbstractAsyncContextManager[Any]: ...
