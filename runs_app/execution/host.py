"""The run host: every live run of a process, as an asyncio task on one event loop.

An agent run spends nearly all its time waiting — for the model's next token, for a tool,
for a human — so a run is a coroutine, not a process or a thread: one process carries
hundreds. What a run does that blocks (database statements, git, file tools) goes to the
host's threads (``threads.py``); the model's stream, the waits, the events and the abort
checks stay on the loop. Beside the runs, two tasks of the loop serve them all: the lease
keeper (``keeper.py``: leases renewed, aborts polled, a run that cannot be renewed stopped)
and the text writer (``text_writer.py``: the streamed text of every run, one statement a
tick). This module admits runs (at most ``RUN_HOST_CAPACITY`` live, a few starting at once)
and carries each from ``lifecycle.begin`` to its loop's end.

Events of the runs are published from this loop (the publisher is bound to it in a worker),
so a token costs no thread hop on its way out.

``submit`` is thread-safe: the Celery task (services mode) hands runs to the host with it,
and so does the intake thread (``take_local_runs``) the runs this process enqueues in
embedded mode (``runtime.enqueue``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
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

from core import heap
from core.logs import log_context
from workspace import sandbox

from .. import lifecycle
from . import runtime, unfinished
from .control import RunControl
from .keeper import LeaseKeeper
from .loop import run as agent_loop
from .text_writer import TextWriter
from .threads import Threads

log = logging.getLogger(__name__)
T = TypeVar("T")


class RunHost:
    def __init__(self) -> None:
        self._guard = threading.Lock()
        self._pid = 0
        self.loop: asyncio.AbstractEventLoop | None = None
        self._thread_id = 0
        self.threads: Threads | None = None
        self.texts: TextWriter | None = None
        self.runs: dict[str, RunControl] = {}
        self._room: asyncio.Semaphore | None = None
        self.queued = 0  # runs handed over that wait for room (read by runs_app/metrics.py)
        self.hosted = 0  # runs handed over and not yet ended here (waiting, starting or live)
        self._starting: asyncio.Semaphore | None = None
        self.closing = False  # the process is stopping: no new run begins here (drain.py)
        self._intake_pid = 0

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
            threads = self.threads = Threads()
            self.texts = TextWriter(threads)
            # uvloop (libuv): timers, sockets and callbacks at a fraction of asyncio's own
            # cost per token; the plain loop where it is not installed.
            loop = uvloop.new_event_loop() if uvloop is not None else asyncio.new_event_loop()
            ready = threading.Event()
            # The loop thread hands the interpreter over to busy database threads and waits
            # for it back at every switch: shorter switches keep the runs' tokens flowing
            # while start-ups and checkpoints run beside them.
            sys.setswitchinterval(min(sys.getswitchinterval(), 0.001))
            threading.Thread(
                target=self._serve, args=(loop, ready), name="run-host", daemon=True
            ).start()
            ready.wait(10)
            self.loop = loop
            runtime.host_started(loop)
            return loop

    def _serve(self, loop: asyncio.AbstractEventLoop, ready: threading.Event) -> None:
        """(The loop's thread.) The keeper and the text writer, then the runs, forever."""
        assert self.threads is not None and self.texts is not None
        asyncio.set_event_loop(loop)
        self._thread_id = threading.get_ident()
        self._room = asyncio.Semaphore(settings.RUN_HOST_CAPACITY)
        self._starting = None  # sized from the settings at the first start-up
        loop.create_task(LeaseKeeper(self.runs, self.threads).run())
        loop.create_task(self.texts.run())
        loop.call_soon(ready.set)
        loop.run_forever()

    def on_loop(self) -> bool:
        return threading.get_ident() == self._thread_id

    def take_local_runs(self) -> None:
        """Take the runs this process enqueues in embedded mode (``runtime.enqueue`` puts
        their ids on its local queue): a thread of this process hands each to ``submit``.
        Once per process (the app's start-up); it waits on the queue, and the host itself
        starts with the first run."""
        with self._guard:
            if self._intake_pid == os.getpid():
                return
            self._intake_pid = os.getpid()

        def intake() -> None:
            while True:
                run_id = runtime.local_runs().get()
                try:
                    self.submit(run_id)
                except Exception:  # the lease sweep starts it once its lease lapses
                    log.exception("run %s could not be handed to the host", run_id)

        threading.Thread(target=intake, name="run-intake", daemon=True).start()

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
                materialized = None
                async with self.starting():
                    started = await self.blocking(lifecycle.begin, run_id)
                    if started.run is not None:  # its files here first (issue 45, step 4)
                        materialized = await self.blocking(_claim, started.run.session)
                _resolve(begun, started.retry)
                if started.retry:
                    self._retry_later(run_id)
                    return
                if started.run is not None:
                    await self._carry(started.run, materialized)
        except BaseException as exc:  # a run that crashed must not take the host with it
            log.exception("run %s crashed in the host", run_id)
            _resolve(begun, False, exc)
        finally:
            _resolve(finished, None)
            self.hosted -= 1  # after its end is said: a settled host has no run to finish

    async def _carry(self, run: Any, materialized: tuple[str, str] | None = None) -> None:
        """(On the loop.) A begun run's loop, from its first step to its end."""
        assert self.texts is not None
        control = RunControl(
            run.id, run.session_id, runtime.abort_bus().register(run.id), epoch=run.lease_epoch
        )
        self.runs[run.id] = control
        try:
            with log_context(run_id=run.id, session_id=run.session_id):
                await agent_loop.execute(
                    run, host=self, control=control, texts=self.texts, materialized=materialized
                )
        finally:
            self.runs.pop(run.id, None)
            runtime.abort_bus().unregister(run.id)
            # A batch of streamed text taken before the run ended may still hold its text:
            # the run ends once that is written (nothing of it after its end).
            await self.texts.written()

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

    # -- what blocks (threads.py) ----------------------------------------------------------------
    async def blocking(self, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """``fn(*args, **kwargs)`` in a database thread."""
        assert self.threads is not None
        return await self.threads.blocking(fn, *args, **kwargs)

    async def in_tool_thread(self, fn: Callable[..., T], *args: Any) -> T:
        assert self.threads is not None
        return await self.threads.in_tool_thread(fn, *args)

    def settle(self, timeout: float = 20.0) -> bool:
        """Wait until no run handed over here is left; past half of ``timeout`` the live
        ones are asked to stop (as an abort does). Whether it settled. Blocks; not for the
        loop (the end of a test, whose database is then emptied under the runs)."""
        deadline = time.monotonic() + timeout
        asked = False
        while self.hosted or runtime.local_runs().qsize() or self.texts and self.texts.busy():
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
        if self.threads is not None:
            self.threads.close_connections()


def _claim(session: Any) -> tuple[str, str] | None:
    """(A database thread.) The session's files on this host, and what its recovery must say
    of calls lost with its old home (``unfinished.claim_files``; docs/semantics.md §16.5)."""
    return unfinished.claim_files(session)


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
