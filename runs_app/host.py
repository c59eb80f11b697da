"""The run host: every live run of a process, as an asyncio task on one event loop.

An agent run spends nearly all its time waiting — for the model's next token, for a tool,
for a human — so a run is a coroutine, not a process or a thread: one process carries
hundreds. What a run does that blocks (database statements, git, file tools) goes to a small
pool of threads (``RUN_DB_THREADS``, each with its own database connection, so a process
holds that many connections whatever the number of runs); the model's stream, the waits,
the events and the abort checks stay on the loop.

One **keeper** task serves every run of the process: it renews all their leases in one
statement every third of a lease, and reads the abort flags of all of them in one query every
``RUN_ABORT_POLL_SECONDS`` (aborts also arrive at once through the abort bus). Its statements
run on a thread of their own (``lease-renewer``, with its own connection) that nothing else
uses: a slow git or a burst of checkpoints in the database threads cannot delay a renewal.
A renewal that fails — the lock taken over, or the database away — stops the run it
concerns, and so does a lease not known renewed for ``RUN_LEASE_STOP_FRACTION`` of a lease
(a renewal that hangs, a process that was stopped): the run stops *before* its lease can
lapse and the sweep give it to another worker. Should a stopped worker wake up after that,
every write it tries is refused by the run's lease epoch (runs_app/fencing.py), so no
session ever has two writers.

Events of the runs are published from this loop (the publisher is bound to it in a worker),
so a token costs no thread hop on its way out.

``submit`` is thread-safe: the Celery task (services mode) and the in-process executor
(embedded mode, tests) hand runs to the host with it.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import functools
import logging
import os
import sys
import threading
import time
from collections.abc import AsyncIterator, Callable
from typing import Any, TypeVar

from django.conf import settings

try:
    import uvloop
except ImportError:  # an optional speed-up
    uvloop = None
from django.db import DatabaseError, close_old_connections, connection

from core import heap
from core.logs import log_context
from sessions_app.services import lock
from workspace import sandbox

from . import lifecycle, runtime
from .checkpoint import write_streamed_texts
from .control import RunControl
from .engine import AgentLoop
from .models import Run

log = logging.getLogger(__name__)
T = TypeVar("T")
IDLE_CLOSE_SECONDS = 10.0


class RunHost:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._pid = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread_id = 0
        self.db: concurrent.futures.ThreadPoolExecutor | None = None
        self.renewer: concurrent.futures.ThreadPoolExecutor | None = None
        self.tools: concurrent.futures.ThreadPoolExecutor | None = None
        self.runs: dict[str, RunControl] = {}
        self._room: asyncio.Semaphore | None = None
        self.queued = 0  # runs handed over that wait for room (read by runs_app/metrics.py)
        self.hosted = 0  # runs handed over and not yet ended here (waiting, starting or live)
        self._starting: asyncio.Semaphore | None = None
        self._texts: dict[str, tuple[Any, RunControl]] = {}  # part id → (part, its run)
        self._writing: asyncio.Future | None = None  # the batch of streamed text in flight
        self.closing = False  # the process is stopping: no new run begins here (drain.py)

    # -- start-up (once per process; a forked child starts its own) ------------------------
    def ensure(self) -> asyncio.AbstractEventLoop:
        with self._guard:
            if self.loop is not None and self._pid == os.getpid() and not self.loop.is_closed():
                return self.loop
            self._pid = os.getpid()
            self.closing = False
            self.runs = {}
            self.queued = 0
            self.hosted = 0
            # The project is imported by now: the collector leaves it alone and collects
            # less often, so that no collection stops every run's tokens (core/heap.py).
            heap.settle()
            # Whether the shell's sandbox starts here is found out once, off the loop.
            reason = sandbox.unavailable_reason()
            if reason and settings.AGENT_ALLOW_SHELL:
                log.warning("%s", reason)
            self.db = concurrent.futures.ThreadPoolExecutor(
                max_workers=settings.RUN_DB_THREADS, thread_name_prefix="run-db"
            )
            # The keeper's own thread: nothing a run does can occupy it (its connection is
            # one more per process).
            self.renewer = concurrent.futures.ThreadPoolExecutor(
                max_workers=1, thread_name_prefix="lease-renewer"
            )
            self.tools = concurrent.futures.ThreadPoolExecutor(
                max_workers=settings.RUN_TOOL_THREADS, thread_name_prefix="run-tool"
            )
            # uvloop (libuv): timers, sockets and callbacks at a fraction of asyncio's own
            # cost per token; the plain loop where it is not installed.
            loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
            ready = threading.Event()

            def serve() -> None:
                asyncio.set_event_loop(loop)
                self._thread_id = threading.get_ident()
                self._room = asyncio.Semaphore(settings.RUN_HOST_CAPACITY)
                self._starting = None  # sized from the settings at the first start-up
                loop.create_task(self._keeper())
                loop.create_task(self._text_writer())
                loop.call_soon(ready.set)
                loop.run_forever()

            # The loop thread hands the interpreter over to busy database threads and waits
            # for it back at every switch: shorter switches keep the runs' tokens flowing
            # while start-ups and checkpoints run beside them.
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
            threading.Thread(target=serve, name="run-host", daemon=True).start()
            ready.wait(10)
            self.loop = loop
            runtime.host_started(loop)
            return loop

    def on_loop(self) -> bool:
        return threading.get_ident() == self._thread_id

    # -- handing runs over ---------------------------------------------------------------------
    def submit(self, run_id: str) -> concurrent.futures.Future:
        """Run ``run_id`` here. The future resolves to ``begun`` (the run went pending →
        running, or there was nothing to do) once ``lifecycle.begin`` has decided, and carries
        a ``finished`` future that resolves when the run ends."""
        loop = self.ensure()
        begun: concurrent.futures.Future = concurrent.futures.Future()
        begun.finished = concurrent.futures.Future()  # type: ignore[attr-defined]
        loop.call_soon_threadsafe(lambda: loop.create_task(self._host(run_id, begun)))
        return begun

    def run_to_end(self, run_id: str, timeout: float | None = None) -> bool:
        """Run ``run_id`` here and wait for its end (what ``run_agent`` is for
        callers that block). False when another worker's live lease still holds it."""
        begun = self.submit(run_id)
        retry = begun.result(timeout)
        begun.finished.result(timeout)  # type: ignore[attr-defined]
        return not retry

    async def _host(self, run_id: str, begun: concurrent.futures.Future) -> None:
        finished = begun.finished  # type: ignore[attr-defined]
        assert self._room is not None
        self.hosted += 1
        try:
            async with self._admitted():  # at most RUN_HOST_CAPACITY live runs in this process
                if self.closing:
                    # The process is stopping (drain.py): another worker begins it.
                    await self.blocking(runtime.enqueue, run_id)
                    _resolve(begun, False)
                    return
                async with self.starting():
                    started = await self.blocking(lifecycle.begin, run_id)
                _resolve(begun, started.retry)
                if started.retry:
                    self._retry_later(run_id)
                    return
                if started.run is None:
                    return
                run = started.run
                control = RunControl(
                    run.id,
                    run.session_id,
                    runtime.abort_bus().register(run.id),
                    epoch=run.lease_epoch,
                )
                self.runs[run.id] = control
                try:
                    with log_context(run_id=run.id, session_id=run.session_id):
                        await AgentLoop(run, host=self, control=control).execute()
                finally:
                    self.runs.pop(run.id, None)
                    runtime.abort_bus().unregister(run.id)
                    # A batch of streamed text taken before the run ended may still hold its
                    # text: the run ends once that is written (nothing of it after its end).
                    await self._written()
        except BaseException as exc:  # a run that crashed must not take the host with it
            log.exception("run %s crashed in the host", run_id)
            _resolve(begun, False, exc)
        finally:
            _resolve(finished, None)
            self.hosted -= 1  # after its end is said: a settled host has no run to finish

    @contextlib.asynccontextmanager
    async def _admitted(self) -> AsyncIterator[None]:
        """(On the loop.) Room for one more live run, counted in ``queued`` while it waits."""
        assert self._room is not None
        self.queued += 1
        try:
            await self._room.acquire()
        finally:
            self.queued -= 1
        try:
            yield
        finally:
            self._room.release()

    def starting(self) -> asyncio.Semaphore:
        """A few start-ups at a time (``begin``, the history, the first rows, a snapshot):
        hundreds of runs handed over at once would else fill every database thread with
        start-up work, and hold the interpreter, while the live runs wait for theirs."""
        if self._starting is None:  # on the loop: no other coroutine runs in between
            self._starting = asyncio.Semaphore(max(1, settings.RUN_STARTING_AT_ONCE))
        return self._starting

    def _retry_later(self, run_id: str) -> None:
        """The session is still held by another worker's lease: try again once it may have
        expired (a dead worker's); the lease sweep would find it too."""
        assert self.loop is not None
        delay = max(1.0, settings.RUN_LEASE_SECONDS / 2)
        self.loop.call_later(delay, lambda: self.submit(run_id))

    # -- what blocks ---------------------------------------------------------------------------
    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a database thread. A connection that broke is closed
        there, so the thread's next call opens a new one."""
        assert self.loop is not None and self.db is not None
        return await self.loop.run_in_executor(
            self.db, functools.partial(_in_db_thread, fn, args, kwargs)
        )

    async def in_tool_thread(self, fn: Callable[..., T], *args: Any) -> T:
        assert self.loop is not None and self.tools is not None
        return await self.loop.run_in_executor(
            self.tools, functools.partial(_in_db_thread, fn, args, {})
        )

    # -- streamed text ---------------------------------------------------------------------------
    def stream_text(self, part: Any, control: RunControl) -> None:
        """(On the loop.) Write ``part``'s text with the next tick's batch, unless its run
        has lost its lease by then (another worker may own the session)."""
        self._texts[part.id] = (part, control)

    async def _text_writer(self) -> None:
        """Every ``STREAM_FLUSH_SECONDS``, the text streamed into the runs' parts so far, in
        one statement (``write_streamed_texts``) instead of a transaction per run — at most
        ``STREAM_FLUSH_BATCH`` parts a statement, the longest-waiting first: hundreds of runs
        would else make one statement that holds hundreds of rows (and the database threads
        the runs' steps need) for a long while; the others wait for the next tick."""
        while True:
            await asyncio.sleep(settings.STREAM_FLUSH_SECONDS)
            if not self._texts:
                continue
            taken = list(self._texts.items())[: settings.STREAM_FLUSH_BATCH]
            for part_id, _ in taken:
                del self._texts[part_id]
            batch = [
                (part_id, part.text, control.run_id, control.epoch)
                for part_id, (part, control) in taken
                if not control.lost.is_set()
            ]
            controls = {control.run_id: control for _, (_, control) in taken}
            self._writing = asyncio.ensure_future(self.blocking(write_streamed_texts, batch))
            try:
                lost = await self._writing
            except Exception:  # each step's own flush writes its text whole anyway
                log.warning("writing the streamed text of %d parts failed", len(batch))
                lost = set()
            finally:
                self._writing = None
            for run_id in lost:  # another execution owns these runs: they stop at once
                log.warning("run %s: its streamed text was refused (lease epoch)", run_id)
                controls[run_id].lost.set()

    async def _written(self) -> None:
        writing = self._writing
        if writing is not None and not writing.done():
            await asyncio.wait([writing])

    def settle(self, timeout: float = 20.0) -> bool:
        """Wait until no run handed over here is left; past half of ``timeout`` the live
        ones are asked to stop (as an abort does). Whether it settled. Blocks; not for the
        loop (the end of a test, whose database is then emptied under the runs)."""
        deadline = time.monotonic() + timeout
        asked = False
        while self.hosted or self._writing is not None and not self._writing.done():
            left = deadline - time.monotonic()
            if left <= 0:
                return False
            if not asked and left < timeout / 2:
                asked = True
                for control in list(self.runs.values()):
                    control.abort.set()
            time.sleep(0.02)
        return True

    def close_connections(self) -> None:
        """Close the database connection of every database thread (an idle host; the end of
        a test session, whose database is then dropped). Blocks; not for the loop."""
        if self.db is None:
            return
        count = settings.RUN_DB_THREADS
        if self.renewer is not None:
            concurrent.futures.wait([self.renewer.submit(connection.close)], timeout=15)
        barrier = threading.Barrier(count)

        def close() -> None:
            # Each thread takes one of these (the barrier holds it until all have), so every
            # thread's own connection is closed.
            with contextlib.suppress(threading.BrokenBarrierError):
                barrier.wait(timeout=5)
            connection.close()

        concurrent.futures.wait([self.db.submit(close) for _ in range(count)], timeout=15)

    # -- the keeper ----------------------------------------------------------------------------
    async def on_renewer(self, fn: Callable[..., T], *args: Any) -> T:
        """``fn(*args)`` on the keeper's own thread."""
        assert self.loop is not None and self.renewer is not None
        return await self.loop.run_in_executor(
            self.renewer, functools.partial(_in_db_thread, fn, args, {})
        )

    def _stop_unrenewed(self, live: dict[str, RunControl]) -> None:
        """Stop every run whose lease was not known renewed for the stop fraction of a
        lease: it stops while its lease still holds, before another worker may take it."""
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

    async def _keeper(self) -> None:
        last_renew = last_poll = idle_since = time.monotonic()
        closed = True
        renewing: asyncio.Future | None = None
        renewing_since = 0.0
        renewing_runs: dict[str, RunControl] = {}
        while True:
            renew_every = max(0.2, settings.RUN_LEASE_SECONDS / 3)
            poll_every = settings.RUN_ABORT_POLL_SECONDS
            await asyncio.sleep(min(0.1, poll_every, renew_every))
            if not self.runs:
                last_renew = last_poll = now = time.monotonic()
                if not closed and now - idle_since > IDLE_CLOSE_SECONDS:
                    # Nothing runs here: give the database its connections back.
                    closed = True
                    await asyncio.get_running_loop().run_in_executor(None, self.close_connections)
                continue
            idle_since, closed = time.monotonic(), False
            now = time.monotonic()
            live = dict(self.runs)
            if renewing is not None and renewing.done():
                try:
                    held = renewing.result()
                except Exception:
                    # Unrenewed leases expire and another worker may take the sessions: stop.
                    log.exception("lease renewal failed: the runs of this process stop")
                    held = set()
                for run_id, control in renewing_runs.items():
                    if run_id in held:
                        # Extended from the moment it was asked for, at the latest.
                        control.renewed_at = max(control.renewed_at, renewing_since)
                    else:
                        control.lost.set()
                renewing = None
            if renewing is None and now - last_renew >= renew_every:
                # Not awaited: a renewal that hangs must not stop the keeper from stopping
                # the runs whose leases it could not extend (``_stop_unrenewed``).
                last_renew = renewing_since = now
                renewing_runs = live
                renewing = asyncio.ensure_future(
                    self.on_renewer(
                        lock.renew_many, [(c.session_id, c.run_id) for c in live.values()]
                    )
                )
            self._stop_unrenewed(live)
            if now - last_poll >= poll_every and renewing is None:
                last_poll = now
                try:
                    aborted = await asyncio.wait_for(
                        self.on_renewer(_aborted, list(live)), timeout=renew_every
                    )
                except Exception:
                    log.warning("abort poll failed", exc_info=True)
                    aborted = []
                for run_id in aborted:
                    if run_id in live:
                        live[run_id].abort.set()


def _aborted(run_ids: list[str]) -> list[str]:
    return list(
        Run.objects.filter(id__in=run_ids, abort_requested=True).values_list("id", flat=True)
    )


def _in_db_thread(fn: Callable[..., T], args: tuple, kwargs: dict) -> T:
    try:
        return fn(*args, **kwargs)
    except DatabaseError:
        # The connection may be broken (a restart, a killed backend): open a new one next.
        close_old_connections()
        connection.close()
        raise


def _resolve(future: concurrent.futures.Future, value: Any, exc: BaseException | None = None):
    if future.done():
        return
    if exc is not None:
        future.set_exception(exc)
    else:
        future.set_result(value)


host = RunHost()


def run_agent(run_id: str) -> bool:
    """Run (or resume) one run to its end on this process's host and wait for it (see
    ``lifecycle.begin`` for why delivering it twice is safe). Returns False when the session
    is still held by another worker's live lease and the delivery should be retried later."""
    return host.run_to_end(run_id)
