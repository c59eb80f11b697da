"""The lease keeper: one task on the host's loop serves every run of the process.

It renews all their leases in one statement every third of a lease, and reads the abort flags
of all of them in one query every ``RUN_ABORT_POLL_SECONDS`` (aborts also arrive at once
through the abort bus). Its statements run on the renewer thread (``threads.py``), which
nothing else uses. A renewal that fails — the lock taken over, or the database away — stops
the run it concerns, and so does a lease not known renewed for ``RUN_LEASE_STOP_FRACTION`` of
a lease (a renewal that hangs, a process that was stopped): the run stops *before* its lease
can lapse and the sweep give it to another worker. Should a stopped worker wake up after
that, every write it tries is refused by the run's lease epoch (``fencing.py``), so no
session ever has two writers. With no run for ``IDLE_CLOSE_SECONDS``, the database threads'
connections are closed.
"""

from __future__ import annotations

import asyncio
import logging
import time

from django.conf import settings

from sessions_app.services import lock

from ..models import Run
from .control import RunControl
from .threads import Threads

log = logging.getLogger(__name__)
IDLE_CLOSE_SECONDS = 10.0


class LeaseKeeper:
    def __init__(self, runs: dict[str, RunControl], threads: Threads) -> None:
        self.runs = runs  # the host's live runs (the same dict)
        self.threads = threads
        self.renewing: asyncio.Future | None = None
        self.renewing_since = 0.0
        self.renewing_runs: dict[str, RunControl] = {}

    async def run(self) -> None:
        """(The keeper's task, forever.)"""
        last_renew = last_poll = idle_since = time.monotonic()
        closed = True
        while True:
            renew_every = max(0.2, settings.RUN_LEASE_SECONDS / 3)
            poll_every = settings.RUN_ABORT_POLL_SECONDS
            await asyncio.sleep(min(0.1, poll_every, renew_every))
            if not self.runs:
                last_renew = last_poll = now = time.monotonic()
                if not closed and now - idle_since > IDLE_CLOSE_SECONDS:
                    # Nothing runs here: give the database its connections back.
                    closed = True
                    loop = asyncio.get_running_loop()
                    await loop.run_in_executor(None, self.threads.close_connections)
                continue
            idle_since, closed = time.monotonic(), False
            now = time.monotonic()
            live = dict(self.runs)
            self._take_renewal()
            if self.renewing is None and now - last_renew >= renew_every:
                last_renew = now
                self._renew(live, now)
            stop_unrenewed(live)
            if now - last_poll >= poll_every and self.renewing is None:
                last_poll = now
                await self._poll_aborts(live, renew_every)

    def _renew(self, live: dict[str, RunControl], now: float) -> None:
        """Not awaited: a renewal that hangs must not stop the keeper from stopping the runs
        whose leases it could not extend (``stop_unrenewed``)."""
        self.renewing_since = now
        self.renewing_runs = live
        self.renewing = asyncio.ensure_future(
            self.threads.on_renewer(
                lock.renew_many, [(c.session_id, c.run_id) for c in live.values()]
            )
        )

    def _take_renewal(self) -> None:
        """A renewal that has finished: the runs it held are renewed, the others stop."""
        if self.renewing is None or not self.renewing.done():
            return
        try:
            held = self.renewing.result()
        except Exception:
            # Unrenewed leases expire and another worker may take the sessions: stop.
            log.exception("lease renewal failed: the runs of this process stop")
            held = set()
        for run_id, control in self.renewing_runs.items():
            if run_id in held:
                # Extended from the moment it was asked for, at the latest.
                control.renewed_at = max(control.renewed_at, self.renewing_since)
            else:
                control.lost.set()
        self.renewing = None

    async def _poll_aborts(self, live: dict[str, RunControl], timeout: float) -> None:
        try:
            aborted = await asyncio.wait_for(
                self.threads.on_renewer(_aborted, list(live)), timeout=timeout
            )
        except Exception:
            log.warning("abort poll failed", exc_info=True)
            aborted = []
        for run_id in aborted:
            if run_id in live:
                live[run_id].abort.set()


def stop_unrenewed(live: dict[str, RunControl]) -> None:
    """Stop every run whose lease was not known renewed for the stop fraction of a lease: it
    stops while its lease still holds, before another worker may take it."""
    limit = settings.RUN_LEASE_SECONDS * settings.RUN_LEASE_STOP_FRACTION
    now = time.monotonic()
    for run_id, control in live.items():
        if not control.lost.is_set() and now - control.renewed_at > limit:
            log.warning(
                "run %s: its lease was not renewed for %.1f s; it stops",
                run_id,
                now - control.renewed_at,
            )
            control.lost.set()


def _aborted(run_ids: list[str]) -> list[str]:
    return list(
        Run.objects.filter(id__in=run_ids, abort_requested=True).values_list("id", flat=True)
    )
